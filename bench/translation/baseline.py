"""Type-and-count-matched random placement: the chance level of PIoU, and the translation gate.

Each draw keeps a reference's parts (their types, sizes, colours and drawing order) and moves every
part by a uniformly random integer offset that keeps its bounding box on the canvas. The paper
reports mean 0.072 and 95th percentile 0.253 for its null; ours is printed beside it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import shapely

from bench.canvas.medium import V1, Call, Medium, shape_of
from bench.translation.piou import ReferenceGeometry, reference_geometry, score_calls
from bench.translation.references import Reference, reference_calls

PAPER_NULL = {"mean": 0.072, "p95": 0.253}
TAU = 0.6  #: the gate: a model passes when its median PIoU >= TAU (fixed before any score was seen)


def shift_call(call: Call, dr: int, dc: int, medium: Medium = V1) -> Call:
    """The call moved by (dr, dc): the positions its primitive declares move, sizes and radii do not."""
    return Call(call.kind, medium.vocabulary[call.kind].moved(call.params, dr, dc), call.color, call.order)


def random_placement(ref: Reference, rng: random.Random) -> list[Call]:
    """One null draw: every scored part moved as a whole by a random on-canvas offset."""
    calls, owner = reference_calls(ref)
    out = [calls[0]]
    groups: dict[int, list[Call]] = {}
    order: list[int] = []
    for c, o in zip(calls[1:], owner[1:]):
        key = o if o >= 0 else order[-1] if order else -1
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(c)
    for key in order:
        group = groups[key]
        minx, miny, maxx, maxy = shapely.union_all([shape_of(V1, c) for c in group]).bounds
        dr = rng.randint(-int(np.floor(miny)), max(-int(np.floor(miny)), 24 - int(np.ceil(maxy))))
        dc = rng.randint(-int(np.floor(minx)), max(-int(np.floor(minx)), 24 - int(np.ceil(maxx))))
        out.extend(shift_call(c, dr, dc) for c in group)
    return out


@dataclass(frozen=True)
class NullSummary:
    draws: int
    seed: int
    mean: float
    median: float
    p95: float
    pass_rate: float  #: share of draws at or above TAU


def null_distribution(refs: Sequence[Reference], draws_per_ref: int = 20, seed: int = 0) -> tuple[np.ndarray, NullSummary]:
    rng = random.Random(seed)
    values = []
    for ref in refs:
        rg: ReferenceGeometry = reference_geometry(ref)
        for _ in range(draws_per_ref):
            calls = random_placement(ref, rng)
            values.append(score_calls(calls, [shape_of(V1, c) for c in calls], rg).piou)
    arr = np.asarray(values)
    summary = NullSummary(len(arr), seed, float(arr.mean()), float(np.median(arr)), float(np.percentile(arr, 95)), float((arr >= TAU).mean()))
    return arr, summary


def passes_gate(pious: Sequence[float], tau: float = TAU) -> bool:
    """The translation gate: median PIoU >= tau (the layout comparisons accept only models that pass)."""
    return bool(len(pious)) and float(np.median(np.asarray(pious))) >= tau
