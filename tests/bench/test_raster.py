"""Rasterisers are exact and their continuous shapes agree with them within documented tolerances."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.canvas import geometry as G
from bench.canvas import raster as R

N = 24
ints = st.integers(-30, 54)
reals = st.floats(-30, 54, allow_nan=False, allow_infinity=False)


def incremental_bresenham(x0, y0, x1, y1):
    """The textbook all-octant integer Bresenham, for comparison."""
    out = []
    dx, sx = abs(x1 - x0), (1 if x0 < x1 else -1)
    dy, sy = -abs(y1 - y0), (1 if y0 < y1 else -1)
    err = dx + dy
    while True:
        out.append((x0, y0))
        if x0 == x1 and y0 == y1:
            return out
        e2 = 2 * err
        if e2 >= dy:
            err += dy
            x0 += sx
        if e2 <= dx:
            err += dx
            y0 += sy


@given(ints, ints, ints, ints)
def test_line_is_a_bresenham_line(r0, c0, r1, c1):
    big = 200  # draw on a grid large enough to hold the whole line, offset to positive coordinates
    rows, cols = R.line_cells(r0 + 60, c0 + 60, r1 + 60, c1 + 60, big)
    d = max(abs(r1 - r0), abs(c1 - c0))
    assert len(rows) == d + 1
    cells = sorted(zip(rows.tolist(), cols.tolist()))
    # 8-connected and within half a cell of the ideal line on the minor axis
    if d:
        for rr, cc in cells:
            if abs(c1 - c0) >= abs(r1 - r0):
                ideal = (r0 + 60) + (r1 - r0) * (cc - (c0 + 60)) / (c1 - c0)
                assert abs(rr - ideal) <= 0.5 + 1e-9
            else:
                ideal = (c0 + 60) + (c1 - c0) * (rr - (r0 + 60)) / (r1 - r0)
                assert abs(cc - ideal) <= 0.5 + 1e-9
    ref = incremental_bresenham(c0, r0, c1, r1)
    assert len(ref) == d + 1
    # identical to the textbook algorithm wherever the ideal line never passes exactly between two cells
    m, D = min(abs(r1 - r0), abs(c1 - c0)), d
    if D and all((2 * k * m) % (2 * D) != D for k in range(D + 1)):
        assert sorted((y + 60, x + 60) for x, y in ref) == cells


@given(ints, ints, ints, ints)
def test_line_clipping_matches_unclipped(r0, c0, r1, c1):
    big = R.line_cells(r0 + 60, c0 + 60, r1 + 60, c1 + 60, 200)
    full = {(r - 60, c - 60) for r, c in zip(*[a.tolist() for a in big])}
    visible = {(r, c) for r, c in full if 0 <= r < N and 0 <= c < N}
    m = R.line_mask(r0, c0, r1, c1, N)
    assert set(zip(*np.nonzero(m))) == visible


@given(st.integers(0, 12), st.integers(0, 23), st.integers(0, 23))
def test_line_shape_area_equals_cell_count(d, r0, c0):
    for r1, c1 in ((r0 + d, c0), (r0, c0 + d), (r0 + d, c0 + d // 2), (r0 - d // 3, c0 + d)):
        if not (0 <= r1 < N and 0 <= c1 < N):
            continue
        cells = int(R.line_mask(r0, c0, r1, c1, N).sum())
        area = G.line_shape(r0, c0, r1, c1, N).area
        # exact away from the border; the half-cell extension can be clipped at the canvas edge
        assert abs(area - cells) <= 1.0


@pytest.mark.parametrize("radius", range(0, 201))
def test_disc_area_tolerance(radius):
    cells = sum(2 * h + 1 for h in R.disc_half_widths(radius))
    area = math.pi * (radius + 0.5) ** 2
    # documented: |cells - area| <= 0.1 * perimeter + 2.5 for the disc of radius R + 0.5
    assert abs(cells - area) <= 0.1 * 2 * math.pi * (radius + 0.5) + 2.5


def test_midpoint_disc_small_cases():
    assert R.disc_mask(5, 5, 0, N).sum() == 1
    plus = R.disc_mask(5, 5, 1, N)
    assert plus.sum() == 5 and plus[4, 5] and plus[5, 4] and plus[6, 5] and plus[5, 6] and not plus[4, 4]
    assert R.disc_mask(5, 5, -1, N).sum() == 0
    # symmetric under the eight octant reflections
    m = R.disc_mask(12, 12, 7, 25)
    assert (m == m.T).all() and (m == m[::-1]).all() and (m == m[:, ::-1]).all()


@given(ints, ints, st.integers(0, 40))
def test_disc_shape_agrees_with_raster_when_clipped(r, c, radius):
    cells = int(R.disc_mask(r, c, radius, N).sum())
    area = G.disc_shape(r, c, radius, N).area
    per = 2 * math.pi * (radius + 0.5)
    assert abs(cells - area) <= 0.1 * per + 2.5 + 0.5 * min(per, 4 * N)


@given(reals, reals, st.floats(-30, 30, allow_nan=False), st.floats(-30, 30, allow_nan=False))
def test_rect_area_tolerance(r, c, h, w):
    cells = int(R.rect_mask(r, c, h, w, N).sum())
    area = G.rect_shape(r, c, h, w, N).area
    # documented: |cells - area| <= (|h| + |w|) + 1 (each side can gain or lose a partial row/column)
    assert abs(cells - area) <= min(abs(h), N) + min(abs(w), N) + 1


@given(st.integers(-5, 30), st.integers(-5, 30), st.integers(-10, 30), st.integers(-10, 30))
def test_rect_exact_for_integers(r, c, h, w):
    assert int(R.rect_mask(r, c, h, w, N).sum()) == pytest.approx(G.rect_shape(r, c, h, w, N).area)


@given(st.lists(st.tuples(reals, reals), min_size=3, max_size=9))
def test_poly_area_tolerance(points):
    cells = int(R.poly_mask(points, N).sum())
    geom = G.poly_shape(points, N)
    # documented: |cells - area| <= perimeter / 2 + 2 (cells straddling the boundary)
    assert abs(cells - geom.area) <= geom.length / 2 + 2


def test_polygons_without_interior_paint_nothing():
    """Found by test_poly_area_tolerance: a collinear triangle and a retraced spike painted 3 cells on their
    line while their shapes have area 0 (crossings computed in floating point straddled centres on the line)."""
    for pts in ([(0.0, 0.0), (21.0, 21.0), (0.125, 0.125)], [(24.625, 24.625), (0.0, 0.0), (0.0, 1.0), (0.0, 0.0)]):
        assert int(R.poly_mask(pts, N).sum()) == 0 and G.poly_shape(pts, N).area == 0


@given(st.integers(-5, 30), st.integers(-5, 30), st.integers(0, 30), st.integers(0, 30))
def test_rect_and_its_poly_paint_the_same_cells(r, c, h, w):
    pts = [(r, c), (r, c + w), (r + h, c + w), (r + h, c)]
    assert (R.rect_mask(r, c, h, w, N) == R.poly_mask(pts, N)).all()


def test_poly_even_odd_star():
    # a pentagram: the even-odd rule leaves the central pentagon empty, in raster and shape alike
    pts = [(12 + 11 * math.sin(a), 12 + 11 * math.cos(a)) for a in [k * 4 * math.pi / 5 for k in range(5)]]
    m = R.poly_mask(pts, N)
    assert not m[12, 12]
    g = G.poly_shape(pts, N)
    assert not g.contains(G.shapely.Point(12.5, 12.5))
    assert abs(m.sum() - g.area) <= g.length / 2 + 2


def test_hostile_coordinates_never_crash_and_stay_cheap():
    for v in (1e300, -1e300, 10**30, -(10**30)):
        R.rect_mask(v, 0, v, 5, N)
        R.line_mask(0, 0, v, v, N)
        R.poly_mask([(0, 0), (v, 0), (0, v)], N)
        G.rect_shape(v, 0, v, 5, N)
        G.line_shape(0, 0, v, v, N)
        G.poly_shape([(0, 0), (v, 0), (0, v)], N)
