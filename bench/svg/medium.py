"""Sanitise and rasterise SVG written by a model (untrusted input).

`sanitise(text)` extracts the first `<svg ...>...</svg>` document and accepts it only when:
- it is at most `MAX_BYTES` (100 kB) and `MAX_ELEMENTS` (5,000) elements, nested at most 64 deep;
- it has no DOCTYPE, entity or processing instruction (no entity expansion, no external DTD);
- every element is in the allow-list (shapes, paths, text, groups, defs/use/symbol, gradients,
  patterns, clip paths, masks, title/desc): no `script`, no `foreignObject`, no `image`,
  no `iframe`, no animation;
- no attribute is an event handler (`on...`), and every reference (`href`, `xlink:href`, `url(...)` in
  attributes or `style`) is local (`#id`); no `@import` in a style element.
Otherwise it raises `SvgError` with the reason (the attempt is invalid, its reason recorded).

`rasterise(svg, size)` renders with resvg (a maintained Rust renderer, through `resvg-py`) onto a
white canvas and returns (size, size, 3) uint8. The study renders each attempt at its native size
(512) and at 24x24 directly from the vector source, so the SVG arm is judged at the canvas arm's
resolution.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET

import numpy as np

MAX_BYTES = 100_000
MAX_ELEMENTS = 5_000
MAX_DEPTH = 64
NATIVE = 512
ALLOWED = {
    "svg", "g", "defs", "use", "symbol", "title", "desc", "metadata", "rect", "circle", "ellipse", "line", "polyline",
    "polygon", "path", "text", "tspan", "linearGradient", "radialGradient", "stop", "pattern", "clipPath", "mask",
    "style", "marker",
}
_SVG = re.compile(r"<svg\b.*?</svg\s*>", re.S | re.I)
_URL = re.compile(r"url\(\s*['\"]?\s*([^)'\"\s]*)", re.I)


class SvgError(ValueError):
    """SVG that is refused or cannot be rendered."""


def extract_svg(text: str) -> str | None:
    m = _SVG.search(text or "")
    return m.group(0) if m else None


def _local(ref: str) -> bool:
    return ref.startswith("#") and len(ref) > 1


def sanitise(text: str) -> str:
    if re.search(r"<!DOCTYPE|<!ENTITY", text or "", re.I):
        raise SvgError("DOCTYPE, entities and processing instructions are not allowed")
    svg = extract_svg(text)
    if svg is None:
        raise SvgError("no <svg>...</svg> document in the text")
    if len(svg.encode()) > MAX_BYTES:
        raise SvgError(f"SVG over {MAX_BYTES} bytes")
    if re.search(r"<!DOCTYPE|<!ENTITY|<\?", svg, re.I):
        raise SvgError("DOCTYPE, entities and processing instructions are not allowed")
    try:
        root = ET.fromstring(svg)
    except ET.ParseError as e:
        raise SvgError(f"not well-formed XML ({e})") from None
    count = 0

    def walk(el: ET.Element, depth: int) -> None:
        nonlocal count
        count += 1
        if count > MAX_ELEMENTS:
            raise SvgError(f"more than {MAX_ELEMENTS} elements")
        if depth > MAX_DEPTH:
            raise SvgError(f"nested deeper than {MAX_DEPTH}")
        tag = el.tag.split("}")[-1] if isinstance(el.tag, str) else ""
        if tag not in ALLOWED:
            raise SvgError(f"element <{tag}> is not allowed")
        for k, v in el.attrib.items():
            name = k.split("}")[-1].lower()
            if name.startswith("on"):
                raise SvgError(f"event attribute {name!r} is not allowed")
            if name == "href" and not _local(v.strip()):
                raise SvgError(f"external reference {v[:60]!r} is not allowed")
            for ref in _URL.findall(v):
                if not _local(ref):
                    raise SvgError(f"external url({ref[:60]}) is not allowed")
        if tag == "style":
            body = el.text or ""
            if "@import" in body.lower() or any(not _local(r) for r in _URL.findall(body)):
                raise SvgError("external references in <style> are not allowed")
        for child in el:
            walk(child, depth + 1)

    walk(root, 0)
    return svg


def rasterise(svg: str, size: int) -> np.ndarray:
    """(size, size, 3) uint8 render of sanitised SVG on white."""
    import resvg_py
    from PIL import Image

    try:
        png = resvg_py.svg_to_bytes(svg_string=svg, width=size, height=size, background="#ffffff", skip_system_fonts=True)
    except Exception as e:  # noqa: BLE001 - resvg raises its own error types
        raise SvgError(f"resvg could not render it ({str(e)[:120]})") from None
    img = Image.open(io.BytesIO(bytes(png))).convert("RGB")
    if img.size != (size, size):
        img = img.resize((size, size), Image.BILINEAR)
    return np.asarray(img, dtype=np.uint8)


def render_attempt(text: str, sizes: tuple[int, ...] = (NATIVE, 24)) -> dict[str, object]:
    """{'outcome': 'ok'|'svg', 'reason', 'pixels': {size: array}} for one model answer."""
    try:
        svg = sanitise(text)
        return {"outcome": "ok", "reason": "", "pixels": {s: rasterise(svg, s) for s in sizes}}
    except SvgError as e:
        return {"outcome": "svg", "reason": str(e), "pixels": {}}


SYSTEM_PROMPT = (
    "You write one self-contained SVG image of 512x512 pixels: start with "
    '<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512" viewBox="0 0 512 512"> and end with </svg>. '
    "Use standard shape elements (rect, circle, ellipse, line, polyline, polygon, path, g). Paint the background "
    "explicitly with a full-size rect first. References must be local (#id): you may define shapes, gradients and "
    "patterns in <defs> and reuse them with <use> or pattern fills for repeated or tiled structure instead of "
    "listing every instance. No scripts, no external images or fonts, no text unless the request asks for it. "
    "Answer with the SVG only, in one ```svg code block, and keep it concise."
)
