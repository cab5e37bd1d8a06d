"""Seeded generator of the translation references (frozen into data/references.jsonl).

    python -m bench.translation.generate --check    # the frozen file equals a fresh generation
    python -m bench.translation.generate --write    # regenerate it (bump GENERATOR_VERSION first)

Sets (all seeds fixed below and recorded in each reference's `meta`):
- sampled (145): 2-9 parts (weights favour 3-5), types rect/circle/line/poly/pixels, sizes 2-12
  cells, uniform placement, so occlusion happens naturally; every part keeps >= 40% of its area
  and >= 1 cell visible.
- ladder (100): four axes x five rungs x five references. `parts`: 3, 6, 9, 12, 16 parts.
  `min_feature`: the thinnest part dimension is 0.15, 0.125, 0.1, 0.07, 0.045 of the canvas
  (4, 3, 2, 2, 1 cells; sizes scale with it). `occlusion`: of six parts, 0, 1, 2, 3, 5 are partly
  covered by later ones. `vertices`: four polygons of 3, 5, 7, 9, 11 corners. Every reference is
  built from primitive-shaped parts, so a correct transcription exists by construction.
- periodic (20): stripes, checkerboards, dot grids and concentric rings (five each).
- icons (13): hand-made configurations, four of them with outline shapes (frames, rings).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from importlib import resources
from pathlib import Path

import shapely

from bench.canvas.medium import V1, shape_of
from bench.translation.references import GENERATOR_VERSION, Part, Reference, reference_calls, scored_parts

SEED = 20260901
COLORS = [c for c in V1.palette.colors if c not in ("white", "black")]
BACKGROUNDS = ["white", "black", "light_gray", "beige", "navy"]
KINDS = ["rect", "rect", "circle", "line", "poly", "pixels"]


def _poly(rng: random.Random, cr: int, cc: int, rad: int, n: int) -> tuple[tuple[int, int], ...]:
    angles = sorted(rng.uniform(0, 2 * math.pi) for _ in range(n))
    pts = []
    for a in angles:
        rr = rng.uniform(0.5, 1.0) * rad
        pts.append((min(24, max(0, round(cr + rr * math.sin(a)))), min(24, max(0, round(cc + rr * math.cos(a))))))
    return tuple(pts)


def random_part(rng: random.Random, kind: str, lo: int, hi: int, color: str, vertices: int | None = None) -> Part:
    if kind == "rect":
        h, w = rng.randint(lo, hi), rng.randint(lo, hi)
        return Part("rect", {"r": rng.randint(0, 24 - h), "c": rng.randint(0, 24 - w), "h": h, "w": w}, color)
    if kind == "circle":
        rad = rng.randint(max(1, lo // 2), max(1, hi // 2))
        return Part("circle", {"r": rng.randint(rad, 23 - rad), "c": rng.randint(rad, 23 - rad), "radius": rad}, color)
    if kind == "line":
        while True:
            r0, c0, r1, c1 = (rng.randint(0, 23) for _ in range(4))
            if max(abs(r1 - r0), abs(c1 - c0)) >= max(lo, 3):
                return Part("line", {"r0": r0, "c0": c0, "r1": r1, "c1": c1}, color)
    if kind == "poly":
        while True:
            rad = rng.randint(max(2, lo), max(3, hi))
            pts = _poly(rng, rng.randint(rad // 2, 24 - rad // 2), rng.randint(rad // 2, 24 - rad // 2), rad, vertices or rng.randint(3, 5))
            g = shapely.Polygon([(c, r) for r, c in pts])
            if len(set(pts)) == len(pts) and g.is_valid and g.area >= max(2.0, lo * lo / 2):
                return Part("poly", {"points": pts}, color)
    if kind == "pixels":
        r, c = rng.randint(1, 22), rng.randint(1, 22)
        cells = {(r, c)}
        while len(cells) < rng.randint(2, 6):
            cells.add((min(23, max(0, r + rng.randint(-3, 3))), min(23, max(0, c + rng.randint(-3, 3)))))
        return Part("pixels", {"cells": tuple(sorted(cells))}, color)
    raise ValueError(kind)


def visibility(ref: Reference) -> list[tuple[float, float]]:
    """(visible area, own area) of each scored part."""
    from bench.translation.piou import reference_geometry

    rg = reference_geometry(ref)
    calls, owner = reference_calls(ref)
    own = []
    for i in range(len(scored_parts(ref))):
        shapes = [shape_of(V1, c) for c, o in zip(calls, owner) if o == i]
        own.append(shapely.union_all(shapes).area if shapes else 0.0)
    return [(r.area, a) for r, a in zip(rg.regions, own)]


def acceptable(ref: Reference, min_fraction: float = 0.4) -> bool:
    return all(v >= 1.0 and v >= min_fraction * a for v, a in visibility(ref))


def _sample_ref(rng: random.Random, ref_id: str, ref_set: str, n: int, lo: int, hi: int, meta: dict, kinds=None, vertices=None) -> Reference:
    for _ in range(500):
        bg = rng.choice(BACKGROUNDS)
        cols = rng.sample([c for c in COLORS if c != bg], n)
        parts = tuple(random_part(rng, kinds or rng.choice(KINDS), lo, hi, cols[i], vertices) for i in range(n))
        ref = Reference(ref_id, ref_set, bg, parts, meta)
        if acceptable(ref):
            return ref
    raise RuntimeError(f"could not sample {ref_id}")


def sampled(rng: random.Random) -> list[Reference]:
    out = []
    counts = [2, 3, 3, 4, 4, 4, 5, 5, 6, 7, 8, 9]
    for k in range(145):
        n = rng.choice(counts)
        out.append(_sample_ref(rng, f"s{k:03d}", "sampled", n, 2, 12, {"seed": SEED, "parts": n}))
    return out


def _occluded(ref: Reference) -> int:
    return sum(1 for v, a in visibility(ref) if v < a - 1e-6)


def ladder(rng: random.Random) -> list[Reference]:
    out = []
    for rung, n in enumerate((3, 6, 9, 12, 16)):
        for j in range(5):
            lo, hi = (2, 8) if n <= 9 else (2, 6)
            out.append(_sample_ref(rng, f"l-parts-{rung + 1}-{j}", "ladder", n, lo, hi, {"axis": "parts", "rung": rung + 1, "value": n, "seed": SEED}))
    for rung, f in enumerate((0.15, 0.125, 0.1, 0.07, 0.045)):
        m = max(1, math.floor(f * 24 + 0.5))
        for j in range(5):
            for _ in range(500):
                bg = rng.choice(BACKGROUNDS)
                cols = rng.sample([c for c in COLORS if c != bg], 4)
                parts = []
                for i in range(4):
                    if i == 0:  # the part that sets the minimum feature: a rect m cells thin
                        long = rng.randint(3 * m, 12)
                        h, w = (m, long) if rng.random() < 0.5 else (long, m)
                        parts.append(Part("rect", {"r": rng.randint(0, 24 - h), "c": rng.randint(0, 24 - w), "h": h, "w": w}, cols[i]))
                    else:
                        parts.append(random_part(rng, rng.choice(["rect", "circle", "poly"]), 2 * m, 4 * m, cols[i]))
                ref = Reference(f"l-feature-{rung + 1}-{j}", "ladder", bg, tuple(parts), {"axis": "min_feature", "rung": rung + 1, "value": f, "cells": m, "seed": SEED})
                if acceptable(ref):
                    out.append(ref)
                    break
            else:
                raise RuntimeError("ladder min_feature")
    for rung, k in enumerate((0, 1, 2, 3, 5)):
        for j in range(5):
            for _ in range(5000):
                ref = _sample_ref(rng, f"l-occlusion-{rung + 1}-{j}", "ladder", 6, 3, 9, {"axis": "occlusion", "rung": rung + 1, "value": k, "seed": SEED}, kinds="rect" if k == 0 else None)
                if _occluded(ref) == k:
                    out.append(ref)
                    break
            else:
                raise RuntimeError("ladder occlusion")
    for rung, v in enumerate((3, 5, 7, 9, 11)):
        for j in range(5):
            out.append(_sample_ref(rng, f"l-vertices-{rung + 1}-{j}", "ladder", 4, 4, 9, {"axis": "vertices", "rung": rung + 1, "value": v, "seed": SEED}, kinds="poly", vertices=v))
    return out


def periodic(rng: random.Random) -> list[Reference]:
    out = []
    for j in range(5):
        bg = rng.choice(BACKGROUNDS)
        col = rng.choice([c for c in COLORS if c != bg])
        width, gap = rng.randint(1, 3), rng.randint(1, 3)
        step = width + gap
        count = min(rng.randint(3, 6), (24 - width) // step + 1)
        axis = "vertical" if j % 2 == 0 else "horizontal"
        start = rng.randint(0, 24 - ((count - 1) * step + width))
        length = rng.randint(12, 24)
        other = rng.randint(0, 24 - length)
        args = {"axis": axis, "count": count, "width": width, "step": step, "length": length}
        args.update({"c": start, "r": other} if axis == "vertical" else {"r": start, "c": other})
        out.append(Reference(f"p-stripes-{j}", "periodic", bg, (Part("stripes", args, col),), {"motif": "stripes", "seed": SEED}))
    for j in range(5):
        bg = rng.choice(BACKGROUNDS)
        col = rng.choice([c for c in COLORS if c != bg])
        size = rng.randint(2, 4)
        rows, cols = rng.randint(3, 24 // size), rng.randint(3, 24 // size)
        r, c = rng.randint(0, 24 - rows * size), rng.randint(0, 24 - cols * size)
        out.append(Reference(f"p-checker-{j}", "periodic", bg, (Part("checker", {"size": size, "rows": rows, "cols": cols, "r": r, "c": c}, col),), {"motif": "checker", "seed": SEED}))
    for j in range(5):
        bg = rng.choice(BACKGROUNDS)
        col = rng.choice([c for c in COLORS if c != bg])
        radius = rng.randint(1, 2)
        step = 2 * radius + rng.randint(2, 3)
        fit = (23 - 2 * radius) // step + 1
        rows, cols = min(rng.randint(2, 4), fit), min(rng.randint(2, 4), fit)
        r = rng.randint(radius, 23 - radius - (rows - 1) * step)
        c = rng.randint(radius, 23 - radius - (cols - 1) * step)
        out.append(Reference(f"p-dots-{j}", "periodic", bg, (Part("dots", {"rows": rows, "cols": cols, "radius": radius, "r": r, "c": c, "step": step}, col),), {"motif": "dots", "seed": SEED}))
    for j in range(5):
        bg = rng.choice(BACKGROUNDS)
        col = rng.choice([c for c in COLORS if c != bg])
        step = rng.randint(2, 3)
        count = rng.randint(2, 4)
        radius = rng.randint(step * (count - 1) + 2, 11)
        r, c = rng.randint(radius, 23 - radius), rng.randint(radius, 23 - radius)
        out.append(Reference(f"p-rings-{j}", "periodic", bg, (Part("rings", {"count": count, "r": r, "c": c, "radius": radius, "step": step}, col),), {"motif": "rings", "seed": SEED}))
    return out


def icons() -> list[Reference]:
    P = Part
    def R(r, c, h, w, col):
        return P("rect", {"r": r, "c": c, "h": h, "w": w}, col)
    def C(r, c, rad, col):
        return P("circle", {"r": r, "c": c, "radius": rad}, col)
    def L(r0, c0, r1, c1, col):
        return P("line", {"r0": r0, "c0": c0, "r1": r1, "c1": c1}, col)
    def Q(pts, col):
        return P("poly", {"points": tuple(pts)}, col)
    def X(cells, col):
        return P("pixels", {"cells": tuple(cells)}, col)
    items = [
        ("house", "sky_blue", [R(12, 5, 10, 14, "tan"), Q([(12, 3), (4, 12), (12, 21)], "dark_red"), R(16, 10, 6, 4, "brown"), X([(14, 7), (14, 16)], "yellow")]),
        ("tree", "light_blue", [R(20, 0, 4, 24, "green"), R(13, 11, 8, 3, "brown"), C(9, 12, 6, "dark_green")]),
        ("sun", "sky_blue", [C(11, 11, 5, "yellow"), L(1, 11, 4, 11, "orange"), L(18, 11, 21, 11, "orange"), L(11, 1, 11, 4, "orange"), L(11, 18, 11, 21, "orange")]),
        ("tricolour", "white", [R(4, 2, 5, 20, "red"), R(9, 2, 5, 20, "gold"), R(14, 2, 5, 20, "dark_green"), L(2, 1, 22, 1, "gray")]),
        ("face", "white", [C(12, 12, 9, "yellow"), X([(9, 8), (9, 9), (9, 15), (9, 16)], "black"), L(16, 8, 16, 16, "dark_red")]),
        ("boat", "sky_blue", [R(19, 0, 5, 24, "blue"), Q([(16, 3), (20, 6), (20, 18), (16, 21)], "brown"), L(4, 12, 15, 12, "dark_gray"), Q([(4, 13), (15, 13), (15, 20)], "white")]),
        ("arrow", "white", [R(11, 2, 3, 14, "blue"), Q([(6, 15), (12, 22), (18, 15)], "blue")]),
        ("heart", "pink", [Q([(6, 12), (3, 8), (3, 5), (6, 2), (11, 3), (20, 12), (11, 21), (6, 22), (3, 19), (3, 16)], "red")]),
        ("target", "white", [P("ring", {"r": 11, "c": 11, "radius": 10}, "red"), P("ring", {"r": 11, "c": 11, "radius": 7}, "red"), P("ring", {"r": 11, "c": 11, "radius": 4}, "red"), C(11, 11, 1, "red")]),
        ("framed_moon", "black", [P("frame", {"r": 1, "c": 1, "h": 22, "w": 22}, "gold"), C(11, 11, 6, "light_gray"), C(9, 14, 5, "navy")]),
        ("window", "beige", [P("frame", {"r": 3, "c": 3, "h": 18, "w": 18}, "brown"), R(4, 4, 16, 16, "sky_blue"), L(4, 11, 19, 11, "brown"), L(11, 4, 11, 19, "brown")]),
        ("outlines", "white", [P("frame", {"r": 2, "c": 2, "h": 9, "w": 9}, "black"), P("ring", {"r": 16, "c": 16, "radius": 5}, "purple"), L(14, 2, 21, 9, "teal")]),
        ("mushroom", "light_green", [R(13, 9, 9, 6, "beige"), Q([(13, 2), (7, 5), (5, 12), (7, 19), (13, 22)], "red"), X([(9, 8), (8, 12), (10, 15), (11, 6)], "white")]),
    ]
    return [Reference(f"i-{name}", "icons", bg, tuple(parts), {"icon": name}) for name, bg, parts in items]


def generate() -> list[Reference]:
    rng = random.Random(SEED)
    refs = sampled(rng) + ladder(rng) + periodic(rng) + icons()
    for r in refs:
        if not acceptable(r, min_fraction=0.0):
            raise RuntimeError(f"{r.id}: a part is invisible")
    return refs


def dumps(refs: list[Reference]) -> str:
    return "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in refs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = dumps(generate())
    path = Path(str(resources.files("bench.translation").joinpath("data/references.jsonl")))
    if args.write:
        path.write_text(text)
        print(f"wrote {path} ({text.count(chr(10))} references, {GENERATOR_VERSION})")
    if args.check:
        same = path.read_text() == text
        print("frozen file matches the generator" if same else "frozen file DIFFERS from the generator")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
