"""Exact rasterisers of the canvas medium, each returning a boolean cell mask of an n x n grid.

Conventions (documented in docs/medium.md and tested in tests/bench/test_raster.py):
- cell (i, j) is the unit square rows [i, i+1) x columns [j, j+1); its centre is (i + 0.5, j + 0.5);
- area primitives (rect, poly) take corner coordinates and fill the cells whose *centres* lie inside,
  with a half-open rule (a centre on the top/left edge is in, on the bottom/right edge is out), so a
  rect and the poly of its four corners paint the same cells;
- pixel primitives (line, circle) are centred on cells: integer cell indices (floats are rounded half
  up) through Bresenham's line and the midpoint-circle algorithm.
Everything is clipped to the grid; work is bounded by the grid size, not by the coordinates.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # jaxtyping's import (unittest.mock, asyncio: 50 ms) stays out of every sandbox worker's start
    from jaxtyping import Bool

    Mask = Bool[np.ndarray, "n n"]

#: coordinates are clamped to +-COORD_LIMIT before any arithmetic, so a hostile 1e300 cannot overflow.
COORD_LIMIT = 1_000_000
#: largest circle radius the midpoint algorithm will run (its spans are cached per radius).
MAX_RADIUS = 4096


def clamp(v: float) -> float:
    return max(-COORD_LIMIT, min(COORD_LIMIT, v))


def cell_index(v: float) -> int:
    """Round a cell coordinate to an integer index, halves up (3.5 -> 4, -0.5 -> 0)."""
    return int(math.floor(clamp(v) + 0.5))


def _centre_range(lo: float, hi: float, n: int) -> tuple[int, int]:
    """Indices i in [0, n) whose centres i + 0.5 lie in [lo, hi)."""
    a = math.ceil(lo - 0.5)
    b = math.ceil(hi - 0.5)
    return max(a, 0), min(b, n)


def rect_mask(r: float, c: float, h: float, w: float, n: int) -> Mask:
    """Cells whose centres lie in rows [r, r+h) and columns [c, c+w); negative extents are flipped."""
    r, c, h, w = clamp(r), clamp(c), clamp(h), clamp(w)
    if h < 0:
        r, h = r + h, -h
    if w < 0:
        c, w = c + w, -w
    m = np.zeros((n, n), dtype=bool)
    r0, r1 = _centre_range(r, r + h, n)
    c0, c1 = _centre_range(c, c + w, n)
    if r0 < r1 and c0 < c1:
        m[r0:r1, c0:c1] = True
    return m


def line_cells(r0: int, c0: int, r1: int, c1: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Bresenham's line between cell centres, in closed form, restricted to the visible range.

    With D = max(|dr|, |dc|) major-axis steps and m = |minor delta|, step k in 0..D plots the major
    coordinate a0 + k*sa and the minor coordinate b0 + sb * floor((2*k*m + D) / (2*D)): the ideal line
    rounded half away from the start point, which is what the incremental integer algorithm plots
    (exactly D + 1 cells, 8-connected, each within half a cell of the ideal line on the minor axis).
    Only the k whose major coordinate is on the grid are evaluated, so a line to 1e6 costs O(n).
    """
    dr, dc = r1 - r0, c1 - c0
    if abs(dc) >= abs(dr):
        a0, b0, da, db = c0, r0, dc, dr
        col_major = True
    else:
        a0, b0, da, db = r0, c0, dr, dc
        col_major = False
    big_d = abs(da)
    sa = 1 if da >= 0 else -1
    sb = 1 if db >= 0 else -1
    m = abs(db)
    # k range with a0 + k*sa in [0, n)
    if sa > 0:
        k_lo, k_hi = -a0, n - 1 - a0
    else:
        k_lo, k_hi = a0 - (n - 1), a0
    k_lo, k_hi = max(k_lo, 0), min(k_hi, big_d)
    if k_lo > k_hi:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    k = np.arange(k_lo, k_hi + 1, dtype=np.int64)
    a = a0 + k * sa
    if big_d == 0:
        b = np.full_like(k, b0)
    else:
        b = b0 + sb * ((2 * k * m + big_d) // (2 * big_d))
    keep = (b >= 0) & (b < n)
    a, b = a[keep], b[keep]
    return (b, a) if col_major else (a, b)


def line_mask(r0: float, c0: float, r1: float, c1: float, n: int) -> Mask:
    rows, cols = line_cells(cell_index(r0), cell_index(c0), cell_index(r1), cell_index(c1), n)
    m = np.zeros((n, n), dtype=bool)
    m[rows, cols] = True
    return m


@lru_cache(maxsize=512)
def disc_half_widths(radius: int) -> tuple[int, ...]:
    """Half-width of each row dy = -R..R of the midpoint-circle filled disc of integer radius R.

    The classic integer midpoint algorithm walks one octant (x from R down, y from 0 up, decision
    variable err = 1 - R) and mirrors it eight ways; the filled disc spans, in each row, the widest
    boundary point of that row. R = 0 is one cell, R = 1 a plus of five cells.
    """
    hw = [-1] * (2 * radius + 1)
    x, y, err = radius, 0, 1 - radius
    while x >= y:
        for dy, half in ((y, x), (-y, x), (x, y), (-x, y)):
            if half > hw[dy + radius]:
                hw[dy + radius] = half
        y += 1
        if err < 0:
            err += 2 * y + 1
        else:
            x -= 1
            err += 2 * (y - x) + 1
    return tuple(hw)


def disc_mask(r: float, c: float, radius: float, n: int) -> Mask:
    """Midpoint-circle filled disc centred on cell (round(r), round(c)); radius rounded half up.

    A negative radius draws nothing. Radii above MAX_RADIUS are refused by the caller (budget).
    """
    m = np.zeros((n, n), dtype=bool)
    rad = cell_index(radius)
    if rad < 0:
        return m
    rad = min(rad, MAX_RADIUS)
    cr, cc = cell_index(r), cell_index(c)
    hw = disc_half_widths(rad)
    lo, hi = max(cr - rad, 0), min(cr + rad, n - 1)
    for row in range(lo, hi + 1):
        half = hw[row - cr + rad]
        a, b = max(cc - half, 0), min(cc + half, n - 1)
        if a <= b:
            m[row, a : b + 1] = True
    return m


def poly_mask(points: list[tuple[float, float]], n: int) -> Mask:
    """Scanline fill on cell centres, even-odd rule, half-open edges; vertices are (row, col) corners."""
    m = np.zeros((n, n), dtype=bool)
    k = len(points)
    if k < 3:
        return m
    pts = [(clamp(p[0]), clamp(p[1])) for p in points]
    # the edges that are not flat, and the rows the polygon spans
    edges = []
    y_lo = y_hi = pts[0][0]
    for i in range(k):
        y0, x0 = pts[i]
        y1, x1 = pts[i + 1 - k]
        if y0 < y_lo:
            y_lo = y0
        elif y0 > y_hi:
            y_hi = y0
        if y0 != y1:
            edges.append((min(y0, y1), max(y0, y1), y0, x0, y1 - y0, x1 - x0))
    r_lo, r_hi = _centre_range(y_lo, y_hi, n)
    if r_lo >= r_hi or not edges:
        return m
    if len(edges) * (r_hi - r_lo) > SMALL_POLYGON:
        return _poly_mask_rows(pts, n, r_lo, r_hi, m)
    # a small polygon (the typical one: a few vertices over a few rows) one row at a time in plain Python: numpy's
    # fixed cost per operation made this 3-4x slower (tests/bench/test_sandbox_fast_paths.py: the same masks as
    # _poly_mask_rows on 15,000 polygons); the arithmetic per crossing is the same as there
    ceil = math.ceil
    for i in range(r_lo, r_hi):
        y = i + 0.5
        xs = [x0 + (y - y0) / dy * dx for lo, hi, y0, x0, dy, dx in edges if lo <= y < hi]
        if len(xs) < 2:
            continue
        xs.sort()
        row = m[i]
        for j in range(0, len(xs) - 1, 2):
            lo, hi = xs[j], xs[j + 1]
            # a span of zero width (collinear or retraced edges, crossings differing by rounding) has no
            # interior; without this, a centre lying on the line was painted while the shape's area is 0
            if hi - lo < 1e-9:
                continue
            a, b = max(ceil(lo - 0.5), 0), min(ceil(hi - 0.5), n)
            if a < b:
                row[a:b] = True
    return m


#: rows x edges above which poly_mask fills every scanline at once with numpy (below it, plain Python is faster)
SMALL_POLYGON = 384


def _poly_mask_rows(points: list[tuple[float, float]], n: int, r_lo: int, r_hi: int, m: Mask) -> Mask:
    """poly_mask's rows r_lo..r_hi of clamped `points`, every scanline at once (rows x edges arrays)."""
    pts = np.array(points, dtype=np.float64)
    ry, cx = pts[:, 0], pts[:, 1]
    ry2, cx2 = np.roll(ry, -1), np.roll(cx, -1)
    ymin, ymax = np.minimum(ry, ry2), np.maximum(ry, ry2)
    nonflat = ry != ry2
    # every scanline at once (rows x edges), the same arithmetic per element as one row at a time: for a large
    # polygon a Python loop over rows and edges is the slower
    y = np.arange(r_lo, r_hi, dtype=np.float64)[:, None] + 0.5
    hit = nonflat & (ymin <= y) & (y < ymax)
    counts = hit.sum(axis=1)
    if not counts.any():
        return m
    with np.errstate(all="ignore"):  # edges a row does not hit may overflow; they are never read
        t = (y - ry) / np.where(nonflat, ry2 - ry, 1.0)
        x = cx + t * (cx2 - cx)
    xs = np.sort(np.where(hit, x, np.finfo(np.float64).max), axis=1)[:, : int(counts.max())]
    lo, hi = xs[:, 0:-1:2], xs[:, 1::2]  # the crossings in pairs, left to right
    pair = np.arange(lo.shape[1]) * 2 + 1 < counts[:, None]
    # a span of zero width (collinear or retraced edges, crossings differing by rounding) has no interior;
    # without this, a centre lying on the line was painted while the shape's area is 0
    pair &= np.where(pair, hi - lo, 0.0) >= 1e-9
    a = np.maximum(np.ceil(np.where(pair, lo, 0.0) - 0.5), 0).astype(np.int64)
    b = np.minimum(np.ceil(np.where(pair, hi, 0.0) - 0.5), n).astype(np.int64)
    pair &= a < b
    # a row's spans are disjoint and ordered: +1 where one starts, -1 where it ends, a running sum marks the
    # cells inside (memory rows x n, not rows x spans x n: a 512-cell grid's zigzag needed 630 MB that way)
    row, k = np.nonzero(pair)
    diff = np.zeros((r_hi - r_lo, n + 1), dtype=np.int32)
    np.add.at(diff, (row, a[row, k]), 1)
    np.add.at(diff, (row, b[row, k]), -1)
    m[r_lo:r_hi] = np.cumsum(diff[:, :n], axis=1) > 0
    return m
