"""The one region map: named halves of the canvas as masks over any block grid they align with."""

from fractions import Fraction

import numpy as np
import pytest

from bench.canvas.regions import REGIONS, Region, region_mask


def test_halves_over_the_occupancy_grid():
    # the slices steering had hard-coded before the map moved here
    old = {"left": (slice(0, 6), slice(0, 3)), "right": (slice(0, 6), slice(3, 6)),
           "top": (slice(0, 3), slice(0, 6)), "bottom": (slice(3, 6), slice(0, 6))}
    assert list(REGIONS) == list(old)
    for name, sl in old.items():
        want = np.zeros((6, 6), bool)
        want[sl] = True
        assert np.array_equal(region_mask(name, 6), want)
    assert np.array_equal(region_mask("left", 6), ~region_mask("right", 6))
    assert np.array_equal(region_mask("top", 6), ~region_mask("bottom", 6))


def test_one_table_serves_every_grid_it_aligns_with():
    for name in REGIONS:
        cells = region_mask(name, 24)
        blocks = region_mask(name, 6)
        assert np.array_equal(cells, np.kron(blocks, np.ones((4, 4), bool)).astype(bool))
    with pytest.raises(ValueError, match="does not align with a 5x5 grid"):
        region_mask("left", 5)


def test_bad_names_and_spans_are_one_sentence():
    with pytest.raises(ValueError, match="unknown region 'middle': use left, right, top, bottom"):
        region_mask("middle", 6)
    with pytest.raises(ValueError, match="not inside"):
        Region("x", rows=(Fraction(1, 2), Fraction(1, 2)), cols=(Fraction(0), Fraction(1)))
    quarter = Region("top-left", rows=(Fraction(0), Fraction(1, 2)), cols=(Fraction(0), Fraction(1, 2)))
    assert quarter.mask(6).sum() == 9 and quarter.mask(6)[:3, :3].all()
