"""Grid-language prompts for the translation task, and the parser that reads them back.

The prompt states every part's type, position, extent, colour and drawing order in row/column
language and never names a subject. `parse_prompt` inverts `write_prompt` exactly (a test checks that
the canonical program can be derived from the prompt text alone, for every reference), which is the
operational meaning of "unambiguous" here.
"""

from __future__ import annotations

import re

from bench.translation.references import Part, Reference

HEADER = (
    "Draw on a 24x24 grid of cells. Rows are numbered 0-23 from top to bottom and columns 0-23 from "
    "left to right; a position is written (row, column). First fill the whole canvas with '{bg}'. "
    "Then draw these shapes in this order (later shapes cover earlier ones):"
)
HEADER_RE = re.compile(r"First fill the whole canvas with '(\w+)'\.")


def _pts(points) -> str:
    return ", ".join(f"({r}, {c})" for r, c in points)


def describe(part: Part, bg: str) -> str:
    a, col, k = part.args, part.color, part.kind
    if k == "rect":
        return f"a filled '{col}' rectangle covering rows {a['r']}-{a['r'] + a['h'] - 1} and columns {a['c']}-{a['c'] + a['w'] - 1}"
    if k == "circle":
        return f"a filled '{col}' disc centred on cell ({a['r']}, {a['c']}) with radius {a['radius']}"
    if k == "line":
        return f"a '{col}' line one cell thick from cell ({a['r0']}, {a['c0']}) to cell ({a['r1']}, {a['c1']})"
    if k == "poly":
        return f"a filled '{col}' polygon with corners at the grid points {_pts(a['points'])} (grid point (r, c) is the top-left corner of cell (r, c))"
    if k == "pixels":
        return f"single '{col}' cells at {_pts(a['cells'])}"
    if k == "frame":
        return (f"a '{col}' rectangular outline one cell thick whose outer edge covers rows {a['r']}-{a['r'] + a['h'] - 1} "
                f"and columns {a['c']}-{a['c'] + a['w'] - 1}")
    if k == "ring":
        return f"a '{col}' ring one cell thick centred on cell ({a['r']}, {a['c']}) with outer radius {a['radius']} (the cells inside it are repainted '{bg}')"
    if k == "stripes":
        if a["axis"] == "vertical":
            return (f"{a['count']} '{col}' vertical stripes, each {a['width']} columns wide and covering rows {a['r']}-{a['r'] + a['length'] - 1}; "
                    f"the first covers columns {a['c']}-{a['c'] + a['width'] - 1} and each next one starts {a['step']} columns further right")
        return (f"{a['count']} '{col}' horizontal stripes, each {a['width']} rows tall and covering columns {a['c']}-{a['c'] + a['length'] - 1}; "
                f"the first covers rows {a['r']}-{a['r'] + a['width'] - 1} and each next one starts {a['step']} rows further down")
    if k == "checker":
        return (f"a '{col}' checkerboard of {a['size']}x{a['size']} squares, {a['rows']} squares down and {a['cols']} squares across, "
                f"whose top-left square starts at cell ({a['r']}, {a['c']}) and is filled; filled and empty squares alternate")
    if k == "dots":
        return (f"a grid of {a['rows']} by {a['cols']} filled '{col}' discs of radius {a['radius']}; the first is centred on cell "
                f"({a['r']}, {a['c']}) and neighbouring centres are {a['step']} cells apart across and down")
    if k == "rings":
        radii = ", ".join(str(a["radius"] - j * a["step"]) for j in range(a["count"]))
        return (f"{a['count']} concentric '{col}' rings one cell thick centred on cell ({a['r']}, {a['c']}) with outer radii {radii}, "
                f"drawn from the largest (the cells inside each ring are repainted '{bg}')")
    raise ValueError(f"unknown part kind {k!r}")


def write_prompt(ref: Reference) -> str:
    lines = [HEADER.format(bg=ref.background)]
    for i, part in enumerate(ref.parts, 1):
        lines.append(f"{i}. {describe(part, ref.background)}.")
    return "\n".join(lines)


# -- parsing back ------------------------------------------------------------------------------
N = r"(-?\d+)"
C = r"'(\w+)'"
PT_LIST = r"((?:\(-?\d+, -?\d+\)(?:, )?)+)"
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("rect", re.compile(rf"^a filled {C} rectangle covering rows {N}-{N} and columns {N}-{N}$")),
    ("circle", re.compile(rf"^a filled {C} disc centred on cell \({N}, {N}\) with radius {N}$")),
    ("line", re.compile(rf"^a {C} line one cell thick from cell \({N}, {N}\) to cell \({N}, {N}\)$")),
    ("poly", re.compile(rf"^a filled {C} polygon with corners at the grid points {PT_LIST} \(grid point")),
    ("pixels", re.compile(rf"^single {C} cells at {PT_LIST}$")),
    ("frame", re.compile(rf"^a {C} rectangular outline one cell thick whose outer edge covers rows {N}-{N} and columns {N}-{N}$")),
    ("ring", re.compile(rf"^a {C} ring one cell thick centred on cell \({N}, {N}\) with outer radius {N} ")),
    ("vstripes", re.compile(rf"^{N} {C} vertical stripes, each {N} columns wide and covering rows {N}-{N}; the first covers columns {N}-{N} and each next one starts {N} columns")),
    ("hstripes", re.compile(rf"^{N} {C} horizontal stripes, each {N} rows tall and covering columns {N}-{N}; the first covers rows {N}-{N} and each next one starts {N} rows")),
    ("checker", re.compile(rf"^a {C} checkerboard of {N}x{N} squares, {N} squares down and {N} squares across, whose top-left square starts at cell \({N}, {N}\)")),
    ("dots", re.compile(rf"^a grid of {N} by {N} filled {C} discs of radius {N}; the first is centred on cell \({N}, {N}\) and neighbouring centres are {N} cells")),
    ("rings", re.compile(rf"^{N} concentric {C} rings one cell thick centred on cell \({N}, {N}\) with outer radii ((?:-?\d+(?:, )?)+), drawn")),
]


def _points(text: str) -> tuple[tuple[int, int], ...]:
    return tuple((int(r), int(c)) for r, c in re.findall(r"\((-?\d+), (-?\d+)\)", text))


def parse_part(sentence: str) -> Part:
    for kind, pat in PATTERNS:
        m = pat.search(sentence)
        if not m:
            continue
        g = m.groups()
        i = [int(x) if re.fullmatch(r"-?\d+", x or "") else x for x in g]
        if kind == "rect":
            return Part("rect", {"r": i[1], "c": i[3], "h": i[2] - i[1] + 1, "w": i[4] - i[3] + 1}, g[0])
        if kind == "circle":
            return Part("circle", {"r": i[1], "c": i[2], "radius": i[3]}, g[0])
        if kind == "line":
            return Part("line", {"r0": i[1], "c0": i[2], "r1": i[3], "c1": i[4]}, g[0])
        if kind == "poly":
            return Part("poly", {"points": _points(g[1])}, g[0])
        if kind == "pixels":
            return Part("pixels", {"cells": _points(g[1])}, g[0])
        if kind == "frame":
            return Part("frame", {"r": i[1], "c": i[3], "h": i[2] - i[1] + 1, "w": i[4] - i[3] + 1}, g[0])
        if kind == "ring":
            return Part("ring", {"r": i[1], "c": i[2], "radius": i[3]}, g[0])
        if kind == "vstripes":
            return Part("stripes", {"axis": "vertical", "count": i[0], "width": i[2], "r": i[3], "length": i[4] - i[3] + 1, "c": i[5], "step": i[7]}, g[1])
        if kind == "hstripes":
            return Part("stripes", {"axis": "horizontal", "count": i[0], "width": i[2], "c": i[3], "length": i[4] - i[3] + 1, "r": i[5], "step": i[7]}, g[1])
        if kind == "checker":
            return Part("checker", {"size": i[1], "rows": i[3], "cols": i[4], "r": i[5], "c": i[6]}, g[0])
        if kind == "dots":
            return Part("dots", {"rows": i[0], "cols": i[1], "radius": i[3], "r": i[4], "c": i[5], "step": i[6]}, g[2])
        if kind == "rings":
            radii = [int(x) for x in re.findall(r"-?\d+", g[4])]
            step = radii[0] - radii[1] if len(radii) > 1 else 1
            return Part("rings", {"count": i[0], "r": i[2], "c": i[3], "radius": radii[0], "step": step}, g[1])
    raise ValueError(f"cannot parse part description: {sentence[:80]!r}")


def parse_prompt(text: str, ref_id: str = "parsed", ref_set: str = "parsed") -> Reference:
    """Rebuild a reference (and so its canonical program) from prompt text alone."""
    m = HEADER_RE.search(text)
    if not m:
        raise ValueError("not a translation prompt: no background sentence")
    parts = []
    for line in text.splitlines():
        item = re.match(r"^(\d+)\. (.*)\.$", line)
        if item:
            if int(item.group(1)) != len(parts) + 1:
                raise ValueError("parts are not numbered in order")
            parts.append(parse_part(item.group(2)))
    return Reference(ref_id, ref_set, m.group(1), tuple(parts))
