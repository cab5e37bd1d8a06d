"""The medium object: v1 semantics, the resolution and vocabulary variants, colours, argument errors."""

import numpy as np
import pytest

from bench.canvas.medium import OUTLINE, V1, BudgetExceeded, DrawError, get_medium
from bench.canvas.palette import ColorError, v1_palette
from bench.sandbox.runtime import execute


def test_palette_has_thirty_named_colours_and_lenient_lookup():
    p = v1_palette()
    assert len(p.colors) == 30
    assert p.rgb("Light Grey") == p.rgb("light_gray") == p.colors["light_gray"]
    assert p.rgb("#ff8000") == (255, 128, 0) and p.rgb("#fff") == (255, 255, 255)
    assert p.rgb((300, -4, 12.6)) == (255, 0, 13)
    assert p.rgb("darkorange") == (255, 140, 0)  # a CSS name outside the palette
    for bad in ("nope", "#12345", (1, 2), ("a", 1, 2), 7):
        with pytest.raises(ColorError):
            p.rgb(bad)


def test_v1_semantics_top_left_origin_row_column_order():
    r = execute("fill('white')\nrect(2, 5, 3, 4, 'red')\nset_pixel(0, 23, 'black')")
    px = r.pixels
    red = np.all(px == v1_palette().colors["red"], axis=-1)
    assert set(np.nonzero(red)[0]) == {2, 3, 4} and set(np.nonzero(red)[1]) == {5, 6, 7, 8}
    assert tuple(px[0, 23]) == (0, 0, 0)
    assert r.background == (255, 255, 255)
    assert r.nonbackground_fraction() == pytest.approx(13 / 576)


def test_painters_order_is_kept_in_raster_and_log():
    r = execute("rect(0, 0, 10, 10, 'red')\nrect(5, 5, 10, 10, 'blue')")
    assert [c.kind for c in r.calls] == ["rect", "rect"] and [c.order for c in r.calls] == [0, 1]
    assert tuple(r.pixels[7, 7]) == v1_palette().colors["blue"]


def test_48_raster_keeps_the_shapes_and_doubles_the_pixels():
    prog = "fill('white')\nrect(18, 3, 4, 5, 'red')\ncircle(12, 12, 5, 'blue')\npoly([(0, 0), (0, 10), (8, 0)], 'gold')"
    a, b = execute(prog, V1), execute(prog, get_medium("v1@48"))
    assert b.pixels.shape == (48, 48, 3)
    assert a.shapes_wkb == b.shapes_wkb
    red = np.all(b.pixels == v1_palette().colors["red"], axis=-1)
    assert red.sum() == 4 * 20


def test_48_grid_variant_addresses_48_cells():
    r = execute("rect(40, 40, 8, 8, 'red')", get_medium("v1-48"))
    assert r.pixels.shape == (48, 48, 3) and tuple(r.pixels[47, 47]) == v1_palette().colors["red"]


def test_outline_vocabulary_is_a_variant_not_a_fork():
    r = execute("fill('white')\nrect_outline(2, 2, 6, 6, 'black')\ncircle_outline(15, 15, 4, 'red')", OUTLINE)
    assert r.valid
    black = np.all(r.pixels == 0, axis=-1)
    assert black.sum() == 20 and not black[4, 4]
    shapes = r.shapes()
    assert shapes[1].area == pytest.approx(20.0)
    # the v1 vocabulary does not know the outline primitives
    assert execute("rect_outline(2, 2, 6, 6, 'black')").outcome == "runtime"


def test_argument_errors_are_clear():
    canvas = V1.new_canvas()
    f = canvas.functions()
    with pytest.raises(DrawError, match=r"rect\(\) takes \(r, c, h, w, color\)"):
        f["rect"](1, 2, "red")
    with pytest.raises(DrawError, match="must be a number"):
        f["circle"]("a", 2, 3, "red")
    with pytest.raises(DrawError, match="finite"):
        f["line"](float("inf"), 0, 1, 1, "red")
    with pytest.raises(BudgetExceeded):
        f["circle"](0, 0, 10**7, "red")
