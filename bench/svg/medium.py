"""The SVG medium (Exp. 2): a model answers with an SVG document, rendered at 512 and at 24x24.

The pieces live in their own modules: `bench.svg.extract` (find the document in an answer),
`bench.svg.sanitise` (the allow-list and the bounds on what rendering may cost) and
`bench.svg.render` (the square viewport, the bundled font, resvg). Model answers are only ever
sanitised and rendered inside a sandbox worker (`SandboxPool.run_jobs` with `Job(kind="svg")`), under
the same CPU, memory and kernel limits as canvas programs: a panic, a segfault, a hang or a memory
bomb costs one attempt. `render_attempt` below renders in *this* process and is for trusted text
(tests, debugging) only.
"""

from __future__ import annotations

from bench.svg.extract import extract_svg
from bench.svg.render import NATIVE, rasterise, render_answer
from bench.svg.sanitise import MAX_BYTES, MAX_DEPTH, MAX_ELEMENTS, SvgError, sanitise

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_ELEMENTS", "NATIVE", "SYSTEM_PROMPT", "SvgError", "extract_svg", "rasterise",
           "render_attempt", "sanitise"]


def render_attempt(text: str, sizes: tuple[int, ...] = (NATIVE, 24)) -> dict[str, object]:
    """{'outcome': 'ok'|'svg'|'crash', 'reason', 'pixels': {size: array}} for one answer, in this process
    (trusted text only; see the module docstring)."""
    out: dict[int, object] = {}
    for size in sizes:
        res = render_answer(text, size, native=0)
        if not res.valid:
            return {"outcome": res.outcome, "reason": res.reason, "pixels": {}}
        out[size] = res.pixels
    return {"outcome": "ok", "reason": "", "pixels": out}


SYSTEM_PROMPT = (
    "You write one self-contained SVG image of 512x512 pixels: start with "
    '<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512" viewBox="0 0 512 512"> and end with </svg>. '
    "Use standard shape elements (rect, circle, ellipse, line, polyline, polygon, path, g). Paint the background "
    "explicitly with a full-size rect first. References must be local (#id): you may define shapes, gradients and "
    "patterns in <defs> and reuse them with <use> or pattern fills for repeated or tiled structure instead of "
    "listing every instance. No scripts, no external images or fonts, no text unless the request asks for it. "
    "Answer with the SVG only, in one ```svg code block, and keep it concise."
)
