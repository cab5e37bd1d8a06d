"""A primitive declares its position arguments once; the splice and the null baseline read the declaration.

The known answer: moving a call's declared positions by (dr, dc) must translate its shape and its raster
by exactly (dr, dc). That holds for every primitive of every medium, fails for a misdeclared primitive,
and a primitive added here (not in `bench/`) is found, spliced and shifted with no edit to
`bench/intervene/splice.py` or `bench/translation/baseline.py`.
"""

import ast
import inspect
import random

import numpy as np
import pytest
import shapely.affinity

from bench.canvas import geometry as G
from bench.canvas import raster as R
from bench.canvas.medium import MEDIA, V1, V1_VOCABULARY, Call, Primitive, shape_of
from bench.intervene import splice
from bench.intervene.splice import choose_displacements, cut_arms, move, shape_mask, statements
from bench.sandbox.runtime import execute
from bench.translation import baseline
from bench.translation.baseline import shift_call


def _bar_mask(h, r, c, n):
    return R.rect_mask(r, c, h, 1, n)


def _bar_shape(h, r, c, grid):
    return G.rect_shape(r, c, h, 1, grid)


#: a vertical bar whose position is NOT its first two arguments: the declaration, not a convention, says where
BAR = Primitive("bar", ("h", "r", "c"), _bar_mask, _bar_shape, positions=((1, 2),), doc="bar(h, r, c, color)")
#: the same bar with its declaration wrong (the length taken for the row): the known-answer check must catch it
MISDECLARED = Primitive("bar", ("h", "r", "c"), _bar_mask, _bar_shape, positions=((0, 2),))
BAR_MEDIUM = V1.with_vocabulary("v1+bar", {**V1_VOCABULARY, "bar": BAR})


def _call_inside(prim: Primitive, rng: random.Random) -> Call:
    """A call of `prim` well inside the canvas (positions 9..13, sizes 2..4), so a move of <= 5 cells keeps it whole."""
    if prim.takes_points:
        return Call(prim.name, tuple(float(rng.randint(9, 13)) for _ in range(2 * rng.randint(3, 5))), (0, 0, 0), 0)
    pos = {i for pair in prim.positions for i in pair}
    return Call(prim.name, tuple(float(rng.randint(9, 13) if i in pos else rng.randint(2, 4)) for i in range(len(prim.params))),
                (0, 0, 0), 0)


def _translates(prim: Primitive, call: Call, dr: int, dc: int, medium) -> bool:
    moved = Call(call.kind, prim.moved(call.params, dr, dc), call.color, call.order)
    before, after = shape_of(medium, call), shape_of(medium, moved)
    # area of the symmetric difference, not `equals`: a disc's vertices are floats and move by float sums
    shape_ok = after.symmetric_difference(shapely.affinity.translate(before, xoff=dc, yoff=dr)).area < 1e-9
    if prim.takes_points:
        m0, m1 = prim.mask(call.points(), 24), prim.mask(moved.points(), 24)
    else:
        m0, m1 = prim.mask(*call.params, 24), prim.mask(*moved.params, 24)
    return shape_ok and np.array_equal(np.roll(m0, (dr, dc), axis=(0, 1)), m1)


@pytest.mark.parametrize("medium", sorted(MEDIA))
def test_every_declared_position_translates_the_shape(medium):
    m = MEDIA[medium]
    rng = random.Random(0)
    checked = 0
    for prim in m.vocabulary.values():
        if prim.name == "fill":
            assert prim.position_pairs(0) == ()  # fill has no place
            continue
        for _ in range(6):
            call = _call_inside(prim, rng)
            for dr, dc in ((3, -2), (-5, 4), (0, 5)):
                assert _translates(prim, call, dr, dc, m), (prim.name, call.params, dr, dc)
                checked += 1
    assert checked >= 5 * 6 * 3


def test_a_misdeclared_primitive_fails_the_known_answer():
    medium = V1.with_vocabulary("bad", {**V1_VOCABULARY, "bar": MISDECLARED})
    call = Call("bar", (3.0, 9.0, 10.0), (0, 0, 0), 0)
    assert not _translates(MISDECLARED, call, 2, 3, medium)
    assert _translates(BAR, call, 2, 3, BAR_MEDIUM)


def test_declarations_are_checked():
    with pytest.raises(ValueError, match="distinct indices"):
        Primitive("x", ("r", "c"), _bar_mask, _bar_shape, positions=((0, 2),))
    with pytest.raises(ValueError, match="distinct indices"):
        Primitive("x", ("r", "c"), _bar_mask, _bar_shape, positions=((0, 0),))
    with pytest.raises(ValueError, match="point primitive"):
        Primitive("x", (), _bar_mask, _bar_shape, takes_points=True, positions=((0, 1),))
    with pytest.raises(ValueError, match="radius index"):
        Primitive("x", ("r", "c", "radius"), _bar_mask, _bar_shape, positions=((0, 1),), radius=1)


def test_a_new_primitive_is_spliced_from_its_declaration():
    text = "```python\nfill('white')\nrect(2, 2, 3, 3, 'blue')\nbar(4, 6, 9, 'red')  # the bar\nbar(n, 6, 9, 'red')\n```"
    assert [s.name for s in statements(text)] == ["fill", "rect"]  # v1 does not know bar: not a statement
    got = statements(text, BAR_MEDIUM.vocabulary)
    assert [s.name for s in got] == ["fill", "rect", "bar", "bar"]
    bar = got[2]
    # the literals are the declared positions (6 and 9), not the first two arguments
    assert bar.spliceable and [(lit.value, lit.axis) for lit in bar.literals] == [(6, "r"), (9, "c")]
    assert move(text, bar, 3, -2) == text.replace("bar(4, 6, 9, 'red')  #", "bar(4, 9, 7, 'red')  #")
    # a non-literal that is not a position does not stop the splice; the shape then is unknown
    assert got[3].spliceable and shape_mask(got[3]) is None
    base = shape_mask(bar)
    assert base.sum() == 4 and np.array_equal(np.roll(base, (3, -2), axis=(0, 1)), shape_mask(bar, 3, -2))
    # end to end: the spliced program, executed with the medium that has the bar, paints the bar moved
    painted = np.zeros((24, 24), bool)
    painted[:, :12] = True
    arms = {a.arm: a for a in cut_arms(text, bar, painted)}
    assert set(arms) == {"null-empty", "null-asis", "moved-used", "moved-unused"}
    for name in ("moved-used", "moved-unused"):
        a = arms[name]
        before = execute(arms["null-asis"].prefix.split("```python\n", 1)[1], BAR_MEDIUM)
        after = execute(a.prefix.split("```python\n", 1)[1], BAR_MEDIUM)
        assert before.valid and after.valid
        assert after.calls[-1].params == (4.0, 6.0 + a.dr, 9.0 + a.dc)
        mask = np.any(after.pixels != 255, axis=-1) & ~np.any(execute("rect(2, 2, 3, 3, 'blue')", BAR_MEDIUM).pixels != 255, axis=-1)
        assert np.array_equal(mask, shape_mask(bar, a.dr, a.dc))
    used = choose_displacements(bar, painted)["moved-used"]
    assert used is not None and used[3] >= 0.5
    assert splice.continued_drawing("bar(1, 2, 3, 'red')\n```", BAR_MEDIUM.vocabulary)
    assert not splice.continued_drawing("bar(1, 2, 3, 'red')\n```")  # v1's vocabulary has no bar


def test_a_new_primitive_is_null_shifted_from_its_declaration():
    call = Call("bar", (4.0, 6.0, 9.0), (255, 0, 0), 3)
    moved = shift_call(call, 2, -5, BAR_MEDIUM)
    assert moved == Call("bar", (4.0, 8.0, 4.0), (255, 0, 0), 3)
    # points primitives move every vertex; fill does not move
    assert shift_call(Call("poly", (1.0, 2.0, 3.0, 4.0, 5.0, 0.0), (0, 0, 0), 1), 1, 2).params == (2.0, 4.0, 4.0, 6.0, 6.0, 2.0)
    assert shift_call(Call("fill", (), (0, 0, 0), 0), 1, 2).params == ()
    assert shift_call(Call("poly_outline", (1.0, 2.0, 3.0, 4.0), (0, 0, 0), 1), 1, 2, MEDIA["outline"]).params == (2.0, 4.0, 4.0, 6.0)


def test_splice_and_baseline_name_no_primitive():
    """What a primitive's positions are lives in its declaration; these modules must not list primitives again."""
    names = {n for m in MEDIA.values() for n in m.vocabulary}
    for module in (splice, baseline):
        consts = {n.value for n in ast.walk(ast.parse(inspect.getsource(module))) if isinstance(n, ast.Constant)}
        assert not names & consts, (module.__name__, names & consts)
