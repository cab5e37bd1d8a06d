"""Rasterise a sanitised SVG into a square viewport, as a browser would, with a bundled font for text.

**The square viewport.** An answer is drawn into a size x size square (512 native, 24 for scoring)
the way a browser draws an SVG into a square box (`<img width=N height=N>`): the root's `viewBox` is
mapped onto the square by its `preserveAspectRatio` (default `xMidYMid meet`: uniform scale, centred,
the rest letterboxed in the white background; `slice` fills and crops; `none` stretches, because the
author asked for it). A root without a `viewBox` gets `0 0 W H` from its `width` and `height`
(absolute units converted to px; a missing or relative one counts as 512, the size the prompt asks
for), so a 512x256 drawing is scaled uniformly and centred, never stretched: a circle stays round.

**Text.** resvg draws text only with fonts it is given, and system fonts differ between machines.
It gets the DejaVu family that ships inside matplotlib (`font_dir()`), and only that
(`skip_system_fonts`), with every generic family (serif, sans-serif, monospace, cursive, fantasy)
mapped onto it, so any font-family falls back to DejaVu and a render is byte-identical on any machine.

`render_answer` runs in a sandbox worker (bench.sandbox.worker), under its CPU and memory limits;
resvg panics (a Rust `PanicException`, which derives from BaseException) become the outcome `crash`.
"""

from __future__ import annotations

import importlib.util
import io
import re
import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

import numpy as np

from bench.svg.sanitise import SvgError, sanitise_tree

NATIVE = 512
FONT_FILES = ("DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf", "DejaVuSans-BoldOblique.ttf",
              "DejaVuSerif.ttf", "DejaVuSerif-Bold.ttf", "DejaVuSansMono.ttf", "DejaVuSansMono-Bold.ttf")
_UNITS = {"": 1.0, "px": 1.0, "pt": 4 / 3, "pc": 16.0, "in": 96.0, "cm": 96 / 2.54, "mm": 96 / 25.4}
_LENGTH = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([a-z]*)\s*$")


class SvgPanic(RuntimeError):
    """resvg panicked on a document the sanitiser accepted (the attempt's outcome is `crash`)."""


@lru_cache(maxsize=1)
def font_dir() -> Path | None:
    """matplotlib's bundled TrueType folder (found without importing matplotlib), or None."""
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "mpl-data" / "fonts" / "ttf"
    return path if (path / FONT_FILES[0]).is_file() else None


@lru_cache(maxsize=1)
def font_files() -> tuple[str, ...]:
    d = font_dir()
    return tuple(str(d / f) for f in FONT_FILES if (d / f).is_file()) if d else ()


def _length(value: str | None) -> float | None:
    m = _LENGTH.match(value or "")
    if not m or m.group(2) not in _UNITS:
        return None
    v = float(m.group(1)) * _UNITS[m.group(2)]
    return v if v > 0 else None


def square(root: ET.Element, size: int) -> str:
    """The document with its root set to a size x size viewport (see the module docstring)."""
    vb = root.get("viewBox")
    nums = [float(x) for x in re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", vb or "")]
    if len(nums) != 4 or nums[2] <= 0 or nums[3] <= 0:
        w = _length(root.get("width")) or float(NATIVE)
        h = _length(root.get("height")) or float(NATIVE)
        root.set("viewBox", f"0 0 {w:g} {h:g}")
    root.set("width", str(size))
    root.set("height", str(size))
    return ET.tostring(root, encoding="unicode")


def rasterise_png(svg: str, size: int) -> bytes:
    """PNG bytes of `svg` (already squared) at size x size on white, with the bundled fonts only."""
    import resvg_py

    try:
        png = resvg_py.svg_to_bytes(
            svg_string=svg, width=size, height=size, background="#ffffff", skip_system_fonts=True,
            font_files=list(font_files()), font_family="DejaVu Sans", serif_family="DejaVu Serif",
            sans_serif_family="DejaVu Sans", monospace_family="DejaVu Sans Mono", cursive_family="DejaVu Sans",
            fantasy_family="DejaVu Sans",
        )
    except Exception as e:  # noqa: BLE001 - resvg raises ValueError for documents it cannot draw
        raise SvgError(f"resvg could not render it ({str(e)[:120]})") from None
    except BaseException as e:
        if type(e).__name__ == "PanicException":  # pyo3's panic type is not importable by name
            raise SvgPanic(f"the renderer panicked ({str(e)[:120]})") from None
        raise  # the CPU-time signal, KeyboardInterrupt: never swallowed here
    return bytes(png)


def decode_png(png: bytes, size: int) -> np.ndarray:
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    if img.size != (size, size):  # resvg always honours width/height; a guard, not a path
        raise SvgError(f"renderer returned {img.size}, not {size}x{size}")
    return np.asarray(img, dtype=np.uint8).copy()


def rasterise(svg: str, size: int) -> np.ndarray:
    """(size, size, 3) uint8 render of an SVG document in the square viewport (trusted callers: the
    sandbox worker, tests); the document is sanitised again first."""
    root = sanitise_tree(svg).root
    return decode_png(rasterise_png(square(root, size), size), size)


def render_answer(text: str, size: int = 24, native: int = NATIVE):
    """One model answer as an ExecResult (medium `svg`): `ok` with pixels at `size` (drawn from the
    vector source) and the PNG at `native` (0: none), or `svg` / `crash` with the reason."""
    from bench.sandbox.runtime import ExecResult

    try:
        doc = sanitise_tree(text)
        png = rasterise_png(square(doc.root, native), native) if native else None
        pixels = decode_png(rasterise_png(square(doc.root, size), size), size)
    except SvgError as e:
        return ExecResult("svg", str(e), medium="svg")
    except SvgPanic as e:
        return ExecResult("crash", str(e), medium="svg")
    return ExecResult("ok", "", code=None, pixels=pixels, medium="svg", png=png)
