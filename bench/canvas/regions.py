"""Named regions of the canvas (left, right, top, bottom halves) as masks over a block grid such as the 6x6 occupancy grid.

A region is data: a span of rows and a span of columns, each as fractions of the canvas, so the one
table serves any block grid it aligns with (the probes' 6x6 grid of 4x4 blocks of a 24x24 render, or
the 24x24 cells themselves). Steering (`experiments.stages.steer`) raises the probe's predicted occupancy
of a region and measures it on the render; the CLI checks `--region` against `REGIONS`. Adding a
region is one row here.

It lives in `bench/` (not beside the occupancy grid in `interp/probes.py`) because `bench/` may not
import `interp/`, while `interp/` and `experiments/` may import `bench/`: this way every layer can ask
for the same map.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping

import numpy as np
from jaxtyping import Bool


@dataclass(frozen=True)
class Region:
    """A rectangle of the canvas given as fractions of its side, so it does not depend on the grid's size."""

    name: str  #: what `--region` and the steering rows call it
    rows: tuple[Fraction, Fraction]  #: [start, end) of the rows, as fractions of the canvas height
    cols: tuple[Fraction, Fraction]  #: [start, end) of the columns, as fractions of the canvas width
    doc: str = ""  #: one phrase for people

    def __post_init__(self) -> None:
        for lo, hi in (self.rows, self.cols):
            if not 0 <= lo < hi <= 1:
                raise ValueError(f"region {self.name}: span [{lo}, {hi}) is not inside [0, 1]")

    def mask(self, blocks: int) -> Bool[np.ndarray, "blocks blocks"]:
        """(blocks, blocks) bool mask of the cells of a blocks x blocks grid that the region covers."""
        spans = []
        for lo, hi in (self.rows, self.cols):
            a, b = lo * blocks, hi * blocks
            if a.denominator != 1 or b.denominator != 1:
                raise ValueError(f"region {self.name} does not align with a {blocks}x{blocks} grid")
            spans.append(slice(int(a), int(b)))
        m = np.zeros((blocks, blocks), bool)
        m[spans[0], spans[1]] = True
        return m


_ALL, _FIRST, _SECOND = (Fraction(0), Fraction(1)), (Fraction(0), Fraction(1, 2)), (Fraction(1, 2), Fraction(1))

#: the regions steering can target, in the order the CLI lists them
REGIONS: Mapping[str, Region] = {r.name: r for r in (
    Region("left", rows=_ALL, cols=_FIRST, doc="left half"),
    Region("right", rows=_ALL, cols=_SECOND, doc="right half"),
    Region("top", rows=_FIRST, cols=_ALL, doc="top half"),
    Region("bottom", rows=_SECOND, cols=_ALL, doc="bottom half"),
)}


def region_mask(name: str, blocks: int) -> Bool[np.ndarray, "blocks blocks"]:
    """Mask of region `name` over a blocks x blocks grid (`interp.probes.GRID_SIZE` for the occupancy grid)."""
    if name not in REGIONS:
        raise ValueError(f"unknown region {name!r}: use {', '.join(REGIONS)}")
    return REGIONS[name].mask(blocks)


__all__ = ["REGIONS", "Region", "region_mask"]
