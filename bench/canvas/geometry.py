"""Continuous shapes of the canvas primitives (shapely, cell units, x = column, y = row).

These are what PIoU scores. Each is defined so that its area agrees with the primitive's raster
(tests/bench/test_raster.py checks the documented tolerances with hypothesis):
- rect / set_pixel: the box itself (exact for integer arguments);
- poly: the polygon through its corner vertices; a self-intersecting ring is read with the even-odd
  rule, like the scanline fill (exclusive-or of the triangle fan);
- line: Bresenham plots one cell per major-axis step, so its shape is the parallelogram of unit
  minor-axis thickness swept along the centre line, extended half a cell past both end cells: area
  exactly D + 1, the cell count;
- circle: a disc of radius R + 0.5 centred on the centre cell (the midpoint disc's equal-area radius
  is R + 0.39..0.59 for R >= 2 and tends to R + 0.45);
- fill: the whole canvas.
Every shape is clipped to the canvas box [0, grid] x [0, grid].
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import shapely
from shapely.geometry import Polygon
from shapely.geometry.base import BaseGeometry

from bench.canvas.raster import COORD_LIMIT, cell_index, clamp

EMPTY = Polygon()


@functools.lru_cache(maxsize=16)
def canvas_box(grid: int) -> BaseGeometry:
    # built once per grid: shapely.geometry.box takes 24 us, and every shape is clipped to it (about 8% of a
    # typical program's time in the sandbox); geometries are immutable, so one object serves every call
    return shapely.box(0, 0, grid, grid)


def clip(geom: BaseGeometry, grid: int) -> BaseGeometry:
    if geom.is_empty:
        return EMPTY
    out = shapely.intersection(geom, canvas_box(grid))
    return _polygonal(out)


def _polygonal(geom: BaseGeometry) -> BaseGeometry:
    """Keep only the areal part of a geometry (intersections can leave lines and points behind)."""
    if geom.is_empty:
        return EMPTY
    if geom.geom_type in ("Polygon", "MultiPolygon"):
        return geom
    parts = [g for g in getattr(geom, "geoms", []) if g.geom_type in ("Polygon", "MultiPolygon") and not g.is_empty]
    if not parts:
        return EMPTY
    return shapely.union_all(parts)


def rect_shape(r: float, c: float, h: float, w: float, grid: int) -> BaseGeometry:
    r, c, h, w = clamp(r), clamp(c), clamp(h), clamp(w)
    if h < 0:
        r, h = r + h, -h
    if w < 0:
        c, w = c + w, -w
    if h == 0 or w == 0:
        return EMPTY
    if 0 < c < c + w < grid and 0 < r < r + h < grid:  # (a width below float precision at c is no width)
        # strictly inside the canvas: what clipping returns, built directly (GEOS hands back the box from its
        # lower-left corner, clockwise; tests/bench/test_sandbox_fast_paths.py compares the bytes with `clip`)
        return shapely.box(c, r, c + w, r + h, ccw=False)
    return clip(shapely.box(c, r, c + w, r + h), grid)  # the same polygon as geometry.box, 4x faster


def fill_shape(grid: int) -> BaseGeometry:
    return canvas_box(grid)


#: vertices of a disc's ring: 64 segments per quarter keep the polygonal area within 0.04% of the true disc
DISC_SEGMENTS = 256


def _snap(v: float) -> float:
    # GEOS's Angle::sinCosSnap: a sine or cosine below 5e-16 is taken as 0 (so the ring passes exactly through
    # the points at pi and 3 pi / 2)
    return 0.0 if abs(v) < 5e-16 else v


@functools.lru_cache(maxsize=64)
def _disc_offsets(radius: float) -> np.ndarray:
    """The ring of `shapely.Point(x, y).buffer(radius, quad_segs=64)` less its centre, as GEOS computes it
    (OffsetSegmentGenerator::createCircle: clockwise from angle 0, vertex i at x + radius * cos(-i * 2 pi / 256)
    and y + radius * sin(...)): adding a centre gives the buffer's coordinates bit for bit, without its
    noding and polygon building (a buffer took about 80 us of a disc's 110; tests/bench/test_sandbox_fast_paths.py
    compares the bytes on every disc of grid 24 and on 3,000 elsewhere, and the coordinates on 11,500 rings)."""
    inc = 2.0 * math.pi / DISC_SEGMENTS
    out = np.empty((DISC_SEGMENTS, 2))
    for i in range(DISC_SEGMENTS):
        a = -i * inc
        out[i, 0] = radius * _snap(math.cos(a))
        out[i, 1] = radius * _snap(math.sin(a))
    out.flags.writeable = False
    return out


def disc_shape(r: float, c: float, radius: float, grid: int) -> BaseGeometry:
    rad = cell_index(radius)
    if rad < 0:
        return EMPTY
    cr, cc = cell_index(r), cell_index(c)
    x, y, big_r = cc + 0.5, cr + 0.5, rad + 0.5
    ring = _disc_offsets(big_r) + (x, y)
    # the ring's bounds are exactly the centre -/+ the radius (cos and sin reach -1 and 1, and nothing below -1)
    if 0 < x - big_r and 0 < y - big_r and x + big_r < grid and y + big_r < grid:
        # strictly inside the canvas: what clipping returns (the same ring, started one vertex later), without
        # the overlay, half of a disc's cost (tests/bench/test_sandbox_fast_paths.py compares the bytes with `clip`)
        return shapely.Polygon(np.concatenate([ring[1:], ring[:2]]))
    return clip(shapely.Polygon(ring), grid)


def line_shape(r0: float, c0: float, r1: float, c1: float, grid: int) -> BaseGeometry:
    a = (cell_index(r0), cell_index(c0))
    b = (cell_index(r1), cell_index(c1))
    dr, dc = b[0] - a[0], b[1] - a[1]
    big_d = max(abs(dr), abs(dc))
    if big_d == 0:
        return clip(shapely.box(a[1], a[0], a[1] + 1, a[0] + 1), grid)
    # centre line from cell centre to cell centre, extended by half a major-axis step at both ends
    ext = 0.5 / big_d
    p = (a[0] + 0.5 - dr * ext, a[1] + 0.5 - dc * ext)
    q = (b[0] + 0.5 + dr * ext, b[1] + 0.5 + dc * ext)
    if abs(dc) >= abs(dr):  # column-major: unit thickness along rows
        ring = [(p[1], p[0] - 0.5), (q[1], q[0] - 0.5), (q[1], q[0] + 0.5), (p[1], p[0] + 0.5)]
    else:
        ring = [(p[1] - 0.5, p[0]), (q[1] - 0.5, q[0]), (q[1] + 0.5, q[0]), (p[1] + 0.5, p[0])]
    return clip(Polygon(ring), grid)


#: fixed-precision overlay grid for polygons: robust against GEOS topology errors on degenerate input
_GRID = 1e-9


def _coordinate(v: float) -> float:
    # round(clamp(v), 9) + 0.0 (no -0.0): a float with no fraction inside the limit is already that, at a fifth
    # of round's cost
    if type(v) is float and -COORD_LIMIT <= v <= COORD_LIMIT and v.is_integer():
        return v + 0.0
    return round(clamp(v), 9) + 0.0


def _ring(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(_coordinate(c), _coordinate(r)) for r, c in points]


#: rings of at most this many vertices are remembered by `_ring_polygon` (a polygon's charge and its shape
#: both need its ring and validity)
_REMEMBERED_VERTICES = 64


def _make_ring_polygon(points: Sequence[Sequence[float]]) -> tuple[tuple[tuple[float, float], ...], BaseGeometry, bool]:
    xy = tuple(_ring(points))
    poly = shapely.polygons(xy)
    return xy, poly, bool(poly.is_valid)


_remembered_ring = functools.lru_cache(maxsize=256)(_make_ring_polygon)


def _ring_polygon(points: list[tuple[float, float]]) -> tuple[tuple[tuple[float, float], ...], BaseGeometry, bool]:
    """The (x, y) ring of `points`, its polygon and whether that is valid: computed once per distinct small ring
    (the canvas charges a polygon by its validity when it is drawn, then computes its shape; geometries are
    immutable, so the polygon can be shared)."""
    if len(points) <= _REMEMBERED_VERTICES:
        try:
            return _remembered_ring(tuple(map(tuple, points)))
        except TypeError:  # an unhashable coordinate: computed below
            pass
    return _make_ring_polygon(points)


def needs_even_odd(points: list[tuple[float, float]]) -> bool:
    """Whether `poly_shape` takes its even-odd path for these (row, col) points (a ring that is not a
    valid simple polygon): the path whose cost grows with the cube of the vertices."""
    return len(points) >= 3 and not _ring_polygon(points)[2]


def poly_shape(points: list[tuple[float, float]], grid: int) -> BaseGeometry:
    if len(points) < 3:
        return EMPTY
    xy, poly, valid = _ring_polygon(points)
    if valid:
        return clip(poly, grid) if poly.area > 0 else EMPTY
    # even-odd reading of a self-intersecting ring: XOR of the fan triangles from the first vertex, in a
    # balanced tree (pairs, then pairs of pairs: each overlay stays small; a running XOR made the
    # accumulated shape ever larger, 15 times slower on a 256-vertex zigzag)
    ring = np.array(xy, dtype=np.float64)
    fan = np.empty((len(xy) - 2, 3, 2))
    fan[:, 0], fan[:, 1], fan[:, 2] = ring[0], ring[1:-1], ring[2:]
    tris = shapely.polygons(fan)  # all at once: the same coordinates as one Polygon each
    tris = list(tris[shapely.area(tris) > 0])
    if not tris:
        return EMPTY
    while len(tris) > 1:
        pairs = [_polygonal(shapely.symmetric_difference(tris[i], tris[i + 1], grid_size=_GRID))
                 for i in range(0, len(tris) - 1, 2)]
        tris = pairs + tris[len(tris) - len(tris) % 2:]
    return _polygonal(shapely.intersection(tris[0], canvas_box(grid), grid_size=_GRID))


#: rings of at most this many vertices have their crossings counted in plain Python (numpy's fixed cost per
#: operation made a 6-vertex ring's count 3x slower); larger ones with numpy, the same arithmetic
_SMALL_RING = 12


def crossings(points: list[tuple[float, float]]) -> int:
    """Proper crossings between non-adjacent edges of the closed ring through `points` (O(n^2)): pairs of edges
    i < j - 1 (first and last included) whose end points lie strictly on both sides of each other's line."""
    xy = _ring_polygon(points)[0]
    n = len(xy)
    if n <= _SMALL_RING:
        # side[i][k]: the sign of point k's orientation against edge i (from point i to point i + 1)
        side = []
        for i in range(n):
            (ux, uy), (vx, vy) = xy[i], xy[i + 1 - n]
            dx, dy = vx - ux, vy - uy
            side.append([(dx * (wy - uy) - dy * (wx - ux)) for wx, wy in xy])
        count = 0
        for i in range(n):
            si, i1 = side[i], i + 1 - n
            for j in range(i + 2, n):
                sj, j1 = side[j], j + 1 - n
                a, b, c, d = si[j], si[j1], sj[i], sj[i1]
                if ((a < 0 < b) or (b < 0 < a)) and ((c < 0 < d) or (d < 0 < c)):
                    count += 1
        return count
    p = np.asarray(xy, dtype=np.float64)
    q = np.roll(p, -1, axis=0)

    def orient(u: np.ndarray, v: np.ndarray, w: np.ndarray) -> np.ndarray:
        return np.sign((v[..., 0] - u[..., 0]) * (w[..., 1] - u[..., 1]) - (v[..., 1] - u[..., 1]) * (w[..., 0] - u[..., 0]))

    a, b, c, d = p[:, None], q[:, None], p[None], q[None]
    hit = (orient(a, b, c) * orient(a, b, d) < 0) & (orient(c, d, a) * orient(c, d, b) < 0)
    return int(np.triu(hit, 2).sum())


def area(geom: BaseGeometry) -> float:
    return float(geom.area) if not geom.is_empty else 0.0


def perimeter(geom: BaseGeometry) -> float:
    return float(geom.length) if not geom.is_empty else 0.0


__all__ = [
    "EMPTY",
    "area",
    "canvas_box",
    "clip",
    "disc_shape",
    "fill_shape",
    "line_shape",
    "perimeter",
    "poly_shape",
    "rect_shape",
]
