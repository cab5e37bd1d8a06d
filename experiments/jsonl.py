"""JSONL files of checked rows, and whole files written atomically: each row's CRC-32, the torn last line a killed
writer leaves, the lenient read `ambench repair` keeps from, and the write that replaces a file."""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from pathlib import Path
from typing import Any, Mapping

from experiments.run_errors import RowError, RunError


def _crc(row: Mapping[str, Any]) -> str:
    body = {k: v for k, v in row.items() if k != "_crc"}
    return f"{zlib.crc32(json.dumps(body, sort_keys=True, ensure_ascii=False).encode('utf-8')) & 0xFFFFFFFF:08x}"


def encode_row(row: Mapping[str, Any]) -> str:
    """One JSONL line: sorted keys, raw unicode, and its checksum."""
    body = {k: v for k, v in row.items() if k != "_crc"}
    return json.dumps({**body, "_crc": _crc(body)}, sort_keys=True, ensure_ascii=False) + "\n"


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    """(complete lines, the bytes after the last newline)."""
    cut = data.rfind(b"\n") + 1
    # split at "\n" only: str.splitlines would also split at U+2028 and other separators that a model's
    # text carries inside a JSON string (rows are written with ensure_ascii=False)
    return data[:cut].split(b"\n")[:-1], data[cut:]


def parse_rows(path: Path, data: bytes) -> tuple[list[dict[str, Any]], int]:
    """(rows, length of the valid prefix in bytes). A last line without its newline is kept when it is a
    whole row with a good checksum and dropped (a torn write) otherwise; any other bad line is an error."""
    lines, tail = _split(data)
    rows: list[dict[str, Any]] = []
    good = 0
    for n, line in enumerate(lines, 1):
        good += len(line) + 1
        if not line.strip():
            continue
        rows.append(_decode(path, n, line))
    if tail.strip():
        try:
            row = _decode(path, len(lines) + 1, tail)
        except RunError:
            return rows, good  # a torn last line: the write that a kill interrupted
        rows.append(row)
        good += len(tail)
    return rows, good


def _decode(path: Path, n: int, line: bytes) -> dict[str, Any]:
    try:
        row = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RowError(f"{path}: line {n} is not JSON; the file was edited or corrupted") from None
    if not isinstance(row, dict):
        raise RowError(f"{path}: line {n} is not a JSON object; the file was edited or corrupted")
    if "_crc" not in row:  # every row the run writes has one: deleting it is how a row is edited unnoticed
        raise RowError(f"{path}: line {n} has no checksum; the file was edited or corrupted")
    if row["_crc"] != _crc(row):
        raise RowError(f"{path}: line {n} fails its checksum; the file was edited or corrupted")
    return {k: v for k, v in row.items() if k != "_crc"}


def lenient_rows(path: Path, data: bytes) -> tuple[list[dict[str, Any]], list[tuple[int, str, dict[str, Any] | None]]]:
    """(the whole, checked rows; the bad lines as (line number, why, the row as it parses or None)): what
    `ambench repair` keeps and drops. A torn last line is a bad line too."""
    lines, tail = _split(data)
    if tail.strip():
        lines.append(tail)
    good: list[dict[str, Any]] = []
    bad: list[tuple[int, str, dict[str, Any] | None]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            good.append(_decode(path, n, line))
        except RowError as e:
            try:
                parsed = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                parsed = None
            why = str(e).split(f"line {n} ", 1)[-1].split(";")[0]
            bad.append((n, why, parsed if isinstance(parsed, dict) else None))
    return good, bad


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file (read-only: the file is never changed; a torn last line is skipped)."""
    path = Path(path)
    if not path.exists():
        return []
    if path.is_dir():
        raise RunError(f"{path} is a folder, not a JSONL file")
    return parse_rows(path, path.read_bytes())[0]


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write a whole file: a temporary name in the same folder, fsync, rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # a full disk (ENOSPC) or a Ctrl-C mid-write once left `.probes.jsonl.tmp` inside a finished study: the old
        # file is intact (it is replaced only by the rename), and the half-written copy goes too
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
