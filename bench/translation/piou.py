"""Exact-area per-part IoU (PIoU) on continuous geometry, painter's order respected.

Reference side: each scored part's region is what stays visible of its calls after every later call
(`visible_regions`). Generated side: each call's visible region likewise; calls that paint the
background (any `fill`, or any shape in the reference's background colour) only occlude: they are
not paint. Each generated visible region is assigned to the part it overlaps most by overlap ratio
|g & R_i| / |g| (colour-matched variant: only parts of the same RGB colour qualify); the regions
assigned to a part are unioned; IoU per part with exact polygon areas (shapely); PIoU is the mean
over parts. Over-paint = share of the painted area (union of visible generated paint) that lies in
no part; PIoU_pen = PIoU * (1 - overpaint). An invalid attempt scores 0 on all three.
Areas are in grid cells; only the geometry is used, never the raster, so the score is independent
of the raster resolution.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import shapely
from shapely.geometry.base import BaseGeometry

from bench.canvas.geometry import EMPTY, _polygonal
from bench.canvas.medium import V1, Call, Medium, shape_of
from bench.translation.references import Reference, reference_calls, scored_parts

EPS = 1e-9


def visible(shapes: Sequence[BaseGeometry]) -> list[BaseGeometry]:
    """Visible region of each shape after all later shapes are painted over it."""
    out: list[BaseGeometry] = [EMPTY] * len(shapes)
    cover: BaseGeometry = EMPTY
    for k in range(len(shapes) - 1, -1, -1):
        s = shapes[k]
        if s.is_empty:
            continue
        out[k] = _polygonal(shapely.difference(s, cover)) if not cover.is_empty else s
        cover = shapely.union(cover, s) if not cover.is_empty else s
    return out


@dataclass
class ReferenceGeometry:
    """A reference turned into scored regions (computed once per reference, reused for every attempt)."""

    ref: Reference
    regions: list[BaseGeometry]
    colors: list[tuple[int, int, int]]
    background: tuple[int, int, int]
    union: BaseGeometry = field(default=EMPTY)


def reference_geometry(ref: Reference, medium: Medium = V1) -> ReferenceGeometry:
    calls, owner = reference_calls(ref, medium)
    vis = visible([shape_of(medium, c) for c in calls])
    parts = scored_parts(ref)
    regions: list[BaseGeometry] = []
    for i in range(len(parts)):
        mine = [v for v, o in zip(vis, owner) if o == i and not v.is_empty]
        regions.append(shapely.union_all(mine) if mine else EMPTY)
    colors = [medium.palette.rgb(p.color) for p in parts]
    union = shapely.union_all([r for r in regions if not r.is_empty]) if regions else EMPTY
    return ReferenceGeometry(ref, regions, colors, medium.palette.rgb(ref.background), union)


@dataclass(frozen=True)
class Score:
    piou: float
    piou_pen: float
    overpaint: float
    part_iou: tuple[float, ...]
    piou_color: float  #: colour-matched variant
    part_iou_color: tuple[float, ...]


def zero_score(n_parts: int) -> Score:
    z = tuple(0.0 for _ in range(n_parts))
    return Score(0.0, 0.0, 0.0, z, 0.0, z)


def _iou(a: BaseGeometry, b: BaseGeometry) -> float:
    if a.is_empty and b.is_empty:
        return 1.0
    if a.is_empty or b.is_empty:
        return 0.0
    inter = shapely.intersection(a, b).area
    uni = a.area + b.area - inter
    return float(inter / uni) if uni > EPS else 0.0


def _assign(gen: list[tuple[BaseGeometry, tuple[int, int, int]]], rg: ReferenceGeometry, match_color: bool) -> tuple[float, ...]:
    buckets: list[list[BaseGeometry]] = [[] for _ in rg.regions]
    for g, col in gen:
        ga = g.area
        best, best_ratio = -1, 0.0
        for i, (region, rcol) in enumerate(zip(rg.regions, rg.colors)):
            if region.is_empty or (match_color and rcol != col):
                continue
            if not shapely.intersects(g, region):
                continue
            ratio = shapely.intersection(g, region).area / ga
            if ratio > best_ratio + EPS:
                best, best_ratio = i, ratio
        if best >= 0:
            buckets[best].append(g)
    ious = []
    for region, bucket in zip(rg.regions, buckets):
        got = shapely.union_all(bucket) if bucket else EMPTY
        ious.append(_iou(got, region))
    return tuple(ious)


def score_calls(calls: Sequence[Call], shapes: Sequence[BaseGeometry], rg: ReferenceGeometry) -> Score:
    """PIoU of one valid attempt given its call log and continuous shapes."""
    vis = visible(list(shapes))
    paint = [
        (v, c.color) for v, c in zip(vis, calls)
        if c.kind != "fill" and tuple(c.color) != rg.background and not v.is_empty and v.area > EPS
    ]
    part_iou = _assign(paint, rg, match_color=False)
    part_iou_c = _assign(paint, rg, match_color=True)
    n = max(len(part_iou), 1)
    piou = sum(part_iou) / n
    piou_c = sum(part_iou_c) / n
    if paint:
        painted = shapely.union_all([g for g, _ in paint])
        outside = shapely.difference(painted, rg.union).area if not rg.union.is_empty else painted.area
        overpaint = float(outside / painted.area) if painted.area > EPS else 0.0
    else:
        overpaint = 0.0
    overpaint = min(max(overpaint, 0.0), 1.0)
    return Score(piou, piou * (1.0 - overpaint), overpaint, part_iou, piou_c, part_iou_c)


def score_result(result, rg: ReferenceGeometry) -> Score:
    """PIoU of an ExecResult (invalid attempts score zero)."""
    if not result.valid:
        return zero_score(len(rg.regions))
    return score_calls(result.calls, result.shapes(), rg)
