"""Reference geometries of the translation task: parts in painter's order, their calls, and their canonical program.

A reference is data: a background colour and an ordered list of parts. A part is one of
`rect`, `circle`, `line`, `poly`, `pixels` (a cluster of single cells), `frame` (a one-cell
rectangular outline, four rects) or `ring` (a disc with its inside repainted in the background
colour), or a periodic motif `stripes` / `checker` / `dots` / `rings` whose instances are separate
parts but whose natural transcription is one loop. Every part expands to primitive calls
(`part_calls`), and `canonical_program` writes the program that makes exactly those calls, so the
reference geometry and the canonical transcription come from one source. All coordinates are
integers on the 24x24 grid, colours are palette names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable

from bench.canvas.medium import V1, Call, Medium

SETS = ("sampled", "ladder", "periodic", "icons")
GENERATOR_VERSION = "refs/1"


@dataclass(frozen=True)
class Part:
    """One reference part: a kind, integer arguments and a palette colour name."""

    kind: str
    args: dict[str, Any]
    color: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "args": self.args, "color": self.color}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Part":
        args = {k: (tuple(tuple(p) for p in v) if k in ("points", "cells") else v) for k, v in d["args"].items()}
        return Part(d["kind"], args, d["color"])


@dataclass(frozen=True)
class Reference:
    id: str
    set: str
    background: str
    parts: tuple[Part, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "set": self.set, "background": self.background,
            "parts": [p.to_json() for p in self.parts], "meta": self.meta, "version": GENERATOR_VERSION,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Reference":
        return Reference(d["id"], d["set"], d["background"], tuple(Part.from_json(p) for p in d["parts"]), d.get("meta", {}))


PERIODIC = ("stripes", "checker", "dots", "rings")


def instances(part: Part) -> list[Part]:
    """A periodic motif as its individual scored parts; any other part is itself."""
    a = part.args
    if part.kind == "stripes":
        out = []
        for k in range(a["count"]):
            if a["axis"] == "vertical":
                out.append(Part("rect", {"r": a["r"], "c": a["c"] + k * a["step"], "h": a["length"], "w": a["width"]}, part.color))
            else:
                out.append(Part("rect", {"r": a["r"] + k * a["step"], "c": a["c"], "h": a["width"], "w": a["length"]}, part.color))
        return out
    if part.kind == "checker":
        out = []
        for i in range(a["rows"]):
            for j in range(a["cols"]):
                if (i + j) % 2 == 0:
                    out.append(Part("rect", {"r": a["r"] + i * a["size"], "c": a["c"] + j * a["size"], "h": a["size"], "w": a["size"]}, part.color))
        return out
    if part.kind == "dots":
        return [
            Part("circle", {"r": a["r"] + i * a["step"], "c": a["c"] + j * a["step"], "radius": a["radius"]}, part.color)
            for i in range(a["rows"]) for j in range(a["cols"])
        ]
    if part.kind == "rings":
        return [Part("ring", {"r": a["r"], "c": a["c"], "radius": a["radius"] - k * a["step"]}, part.color) for k in range(a["count"])]
    return [part]


def scored_parts(ref: Reference) -> list[Part]:
    return [q for p in ref.parts for q in instances(p)]


def part_calls(part: Part, background: str) -> list[tuple[str, tuple, str]]:
    """The primitive calls (kind, numeric args or points, colour name) that draw one non-periodic part."""
    a, col = part.args, part.color
    k = part.kind
    if k == "rect":
        return [("rect", (a["r"], a["c"], a["h"], a["w"]), col)]
    if k == "circle":
        return [("circle", (a["r"], a["c"], a["radius"]), col)]
    if k == "line":
        return [("line", (a["r0"], a["c0"], a["r1"], a["c1"]), col)]
    if k == "poly":
        return [("poly", tuple(a["points"]), col)]
    if k == "pixels":
        return [("set_pixel", (r, c), col) for r, c in a["cells"]]
    if k == "frame":
        r, c, h, w = a["r"], a["c"], a["h"], a["w"]
        return [
            ("rect", (r, c, 1, w), col), ("rect", (r + h - 1, c, 1, w), col),
            ("rect", (r + 1, c, h - 2, 1), col), ("rect", (r + 1, c + w - 1, h - 2, 1), col),
        ]
    if k == "ring":
        return [("circle", (a["r"], a["c"], a["radius"]), col), ("circle", (a["r"], a["c"], a["radius"] - 1), background)]
    raise ValueError(f"unknown part kind {k!r}")


def reference_calls(ref: Reference, medium: Medium = V1) -> tuple[list[Call], list[int]]:
    """All calls of a reference in painter's order (the background fill first) and, per call, the index
    of the scored part it belongs to (-1 for background calls)."""
    pal = medium.palette
    calls = [Call("fill", (), pal.rgb(ref.background), 0)]
    owner = [-1]
    for i, part in enumerate(scored_parts(ref)):
        for kind, args, col in part_calls(part, ref.background):
            params = tuple(float(v) for p in args for v in (p if isinstance(p, tuple) else (p,)))
            calls.append(Call(kind, params, pal.rgb(col), len(calls)))
            owner.append(i if col != ref.background else -1)
    return calls, owner


def _fmt_points(points: Iterable[tuple[int, int]]) -> str:
    return "[" + ", ".join(f"({r}, {c})" for r, c in points) + "]"


def canonical_program(ref: Reference) -> str:
    """The program a perfect transcription would be: one statement (or one loop) per part, in order."""
    lines = [f"fill('{ref.background}')"]
    for part in ref.parts:
        a, col = part.args, part.color
        k = part.kind
        if k == "stripes":
            if a["axis"] == "vertical":
                lines.append(f"for k in range({a['count']}):\n    rect({a['r']}, {a['c']} + {a['step']} * k, {a['length']}, {a['width']}, '{col}')")
            else:
                lines.append(f"for k in range({a['count']}):\n    rect({a['r']} + {a['step']} * k, {a['c']}, {a['width']}, {a['length']}, '{col}')")
        elif k == "checker":
            lines.append(
                f"for i in range({a['rows']}):\n    for j in range({a['cols']}):\n        if (i + j) % 2 == 0:\n"
                f"            rect({a['r']} + {a['size']} * i, {a['c']} + {a['size']} * j, {a['size']}, {a['size']}, '{col}')"
            )
        elif k == "dots":
            lines.append(
                f"for i in range({a['rows']}):\n    for j in range({a['cols']}):\n"
                f"        circle({a['r']} + {a['step']} * i, {a['c']} + {a['step']} * j, {a['radius']}, '{col}')"
            )
        elif k == "rings":
            lines.append(
                f"for k in range({a['count']}):\n    circle({a['r']}, {a['c']}, {a['radius']} - {a['step']} * k, '{col}')\n"
                f"    circle({a['r']}, {a['c']}, {a['radius']} - {a['step']} * k - 1, '{ref.background}')"
            )
        elif k == "pixels":
            lines.append(f"for r, c in {_fmt_points(a['cells'])}:\n    set_pixel(r, c, '{col}')")
        elif k == "poly":
            lines.append(f"poly({_fmt_points(a['points'])}, '{col}')")
        else:
            for kind, args, c in part_calls(part, ref.background):
                lines.append(f"{kind}({', '.join(str(v) for v in args)}, '{c}')")
    return "\n".join(lines) + "\n"


def load_references(which: str = "all") -> list[Reference]:
    """The frozen reference file shipped with the package (`bench/translation/data/references.jsonl`)."""
    if which != "all" and which not in SETS:
        raise ValueError(f"unknown reference set {which!r}; choose from {', '.join(SETS)} or all")
    text = resources.files("bench.translation").joinpath("data/references.jsonl").read_text()
    refs = [Reference.from_json(json.loads(line)) for line in text.splitlines() if line.strip()]
    return refs if which == "all" else [r for r in refs if r.set == which]


def reference_by_id(ref_id: str) -> Reference:
    for r in load_references():
        if r.id == ref_id:
            return r
    raise KeyError(f"no reference with id {ref_id!r} (list them with `ambench translation refs`)")
