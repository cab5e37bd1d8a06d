"""The host boundary: what a worker sends back is framed, bounded, validated and made safe for JSON and HDF5.

Everything a sandbox worker returns crosses here, and nothing else carries worker output into the
host. Three rules:
- **No pickle from a worker.** A worker encodes its result as a JSON header plus raw blobs
  (`encode`); the host parses that with `decode`, which checks every field (outcome name, sizes,
  finite numbers, colour ranges) and turns anything malformed into the outcome `crash`. A worker that
  escaped every other layer can send garbage, never code for the host to run.
- **Bounded size.** A result over `Limits.max_result_bytes` is replaced inside the worker by a
  `budget` outcome, and the host reads at most that many bytes per message.
- **Safe strings.** `clean_text` is the one function that makes a string from a model or a worker
  safe for JSON and HDF5: lone surrogates and NUL become U+FFFD (HDF5 variable-length strings refuse
  NUL and UTF-8 refuses surrogates; either one in a `reason` used to stop `renders.h5` for good),
  optional one-line form, optional length cap.
"""

from __future__ import annotations

import json
import math
import re
import struct
from typing import Any

import numpy as np

_UNSAFE = re.compile("[\x00\ud800-\udfff]")
_BREAKS = re.compile(r"[\r\n]+")
REPLACEMENT = "\ufffd"
#: outcome names a worker may report (the pool adds `timeout`, `memory`, `crash`, `backstop` itself)
WORKER_OUTCOMES = ("ok", "syntax", "forbidden", "runtime", "timeout", "memory", "budget", "no_code", "svg", "crash")
_MAX_REASON = 500
_MAX_CODE = 200_000


class MalformedResult(ValueError):
    """A worker message that does not follow the wire format (the attempt becomes `crash`)."""


def clean_text(value: Any, limit: int | None = None, one_line: bool = False) -> str:
    """`value` as a string that JSON (UTF-8) and HDF5 (no NUL) accept: lone surrogates and NUL become
    U+FFFD; `one_line` folds line breaks to spaces; `limit` cuts to that many characters."""
    s = value if isinstance(value, str) else str(value)
    if limit is not None and len(s) > limit:
        s = s[:limit]
    if not s.isascii() or "\x00" in s:
        s = _UNSAFE.sub(REPLACEMENT, s)
    if one_line and ("\n" in s or "\r" in s):
        s = _BREAKS.sub(" ", s)
    return s


# --------------------------------------------------------------------------- the wire format
# frame: 4-byte big-endian header length, the header (JSON, ASCII), then the blobs the header sizes:
# pixels (n*n*3 bytes), call parameters (float64), one WKB blob per shape, the PNG.


def encode(result: Any) -> bytes:
    """Worker side: the bytes of one ExecResult (see the module docstring)."""
    px = result.pixels
    blobs: list[bytes] = []
    header: dict[str, Any] = {
        "o": result.outcome, "r": clean_text(result.reason, _MAX_REASON, one_line=True),
        "c": None if result.code is None else clean_text(result.code, _MAX_CODE), "m": clean_text(result.medium, 40),
        "bg": None if result.background is None else [int(x) for x in result.background],
        "ops": int(result.ops), "pw": int(result.pixel_writes),
        "px": None, "calls": [], "np": 0, "wkb": [], "png": None, "score": None,
    }
    if px is not None:
        header["px"] = int(px.shape[0])
        blobs.append(np.ascontiguousarray(px, dtype=np.uint8).tobytes())
    params: list[float] = []
    for c in result.calls:
        header["calls"].append([c.kind, [int(x) for x in c.color], int(c.order), len(c.params)])
        params.extend(c.params)
    header["np"] = len(params)
    if params:
        blobs.append(np.asarray(params, dtype=np.float64).tobytes())
    for w in result.shapes_wkb:
        header["wkb"].append(len(w))
        blobs.append(bytes(w))
    if result.png is not None:
        header["png"] = len(result.png)
        blobs.append(bytes(result.png))
    if result.score is not None:
        s = result.score
        header["score"] = [s.piou, s.piou_pen, s.overpaint, list(s.part_iou), s.piou_color, list(s.part_iou_color)]
    head = json.dumps(header, separators=(",", ":")).encode("ascii")
    return b"".join([struct.pack(">I", len(head)), head, *blobs])


def encoded_size(result: Any) -> int:
    """Bytes `encode(result)` will take, within a few kB, without building it (the size cap's test)."""
    n = 0 if result.pixels is None else result.pixels.nbytes
    n += sum(len(w) for w in result.shapes_wkb) + 8 * sum(len(c.params) for c in result.calls) + 40 * len(result.calls)
    n += 0 if result.png is None else len(result.png)
    n += 0 if result.code is None else 4 * len(result.code)
    return n + 4096


def _int(v: Any, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise MalformedResult(f"integer out of range: {v!r}")
    return v


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise MalformedResult("non-finite number")
    return float(v)


def _rgb(v: Any) -> tuple[int, int, int]:
    if not isinstance(v, list) or len(v) != 3:
        raise MalformedResult("bad colour")
    return (_int(v[0], 0, 255), _int(v[1], 0, 255), _int(v[2], 0, 255))


def decode(data: bytes, medium: str = "v1") -> Any:
    """Host side: the ExecResult in `data`, or an ExecResult `crash` when `data` is malformed."""
    try:
        return _decode(data)
    except (MalformedResult, ValueError, TypeError, KeyError, IndexError, struct.error, UnicodeDecodeError) as e:
        from bench.sandbox.runtime import ExecResult

        return ExecResult("crash", clean_text(f"the worker sent a malformed result ({e})", _MAX_REASON, True), medium=medium)


def _decode(data: bytes) -> Any:
    from bench.canvas.medium import Call
    from bench.sandbox.runtime import ExecResult
    from bench.translation.piou import Score

    if len(data) < 4:
        raise MalformedResult("short message")
    (hlen,) = struct.unpack(">I", data[:4])
    if hlen > len(data) - 4:
        raise MalformedResult("header longer than the message")
    h = json.loads(data[4: 4 + hlen].decode("ascii"))
    if not isinstance(h, dict):
        raise MalformedResult("header is not an object")
    pos = 4 + hlen

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > len(data):
            raise MalformedResult("blob past the end of the message")
        out = data[pos: pos + n]
        pos += n
        return out

    outcome = h["o"]
    if outcome not in WORKER_OUTCOMES:
        raise MalformedResult(f"unknown outcome {clean_text(outcome, 40)!r}")
    pixels = None
    if h["px"] is not None:
        n = _int(h["px"], 1, 4096)
        pixels = np.frombuffer(take(n * n * 3), dtype=np.uint8).reshape(n, n, 3).copy()
    calls_h = h["calls"]
    if not isinstance(calls_h, list):
        raise MalformedResult("calls is not a list")
    n_params = _int(h["np"], 0, 1 << 28)
    params = np.frombuffer(take(8 * n_params), dtype=np.float64) if n_params else np.zeros(0)
    if n_params and not np.isfinite(params).all():
        raise MalformedResult("non-finite parameter")
    # every field checked as _int and _rgb check it, inline: a result carries tens of calls, and a function call
    # per field made decoding most of the host's share of a typical program
    values = params.tolist()
    calls, k, kinds = [], 0, {}
    for kind, color, order, count in calls_h:
        if type(count) is not int or not 0 <= count <= n_params - k:
            raise MalformedResult("parameter count mismatch")
        if type(color) is not list or len(color) != 3:
            raise MalformedResult("bad colour")
        r, g, b = color
        if not (type(r) is int and type(g) is int and type(b) is int and 0 <= r <= 255 and 0 <= g <= 255 and 0 <= b <= 255):
            raise MalformedResult("bad colour")
        if type(order) is not int or not 0 <= order <= 1 << 31:
            raise MalformedResult(f"integer out of range: {order!r}")
        if type(kind) is str:
            name = kinds.get(kind)
            if name is None:
                name = kinds[kind] = clean_text(kind, 40)
        else:
            name = clean_text(kind, 40)
        calls.append(Call(name, tuple(values[k: k + count]), (r, g, b), order))
        k += count
    if k != n_params:
        raise MalformedResult("parameter count mismatch")
    sizes = h["wkb"]
    if type(sizes) is not list or not all(type(n) is int and 0 <= n <= 1 << 31 for n in sizes):
        raise MalformedResult("bad shape sizes")
    wkb = [take(n) for n in sizes]
    png = None if h["png"] is None else take(_int(h["png"], 0, 1 << 31))
    if pos != len(data):
        raise MalformedResult("trailing bytes")
    score = None
    if h["score"] is not None:
        p, pen, over, parts, pc, parts_c = h["score"]
        score = Score(_float(p), _float(pen), _float(over), tuple(_float(x) for x in parts), _float(pc),
                      tuple(_float(x) for x in parts_c))
    code = h["c"]
    return ExecResult(
        outcome, clean_text(h["r"], _MAX_REASON, one_line=True),
        code=None if code is None else clean_text(code, _MAX_CODE), pixels=pixels, calls=calls, shapes_wkb=wkb,
        background=None if h["bg"] is None else _rgb(h["bg"]), ops=_int(h["ops"], 0, 1 << 62),
        pixel_writes=_int(h["pw"], 0, 1 << 62), medium=clean_text(h["m"], 40), png=png, score=score,
    )


def parse_greeting(payload: bytes) -> dict[str, Any]:
    """The kernel report a worker sends once (bounded, strings cleaned); ValueError when malformed."""
    if len(payload) > 65_536:
        raise ValueError("greeting too long")
    data = json.loads(payload.decode("utf-8", "replace"))
    if not isinstance(data, dict):
        raise ValueError("greeting is not an object")
    out: dict[str, Any] = {}
    for k in ("seccomp", "landlock", "capabilities"):
        out[k] = clean_text(data.get(k, ""), 300, one_line=True)
    roots = data.get("read_roots", [])
    out["read_roots"] = [clean_text(r, 500) for r in roots[:64]] if isinstance(roots, list) else []
    return out
