"""PIoU against hand-computed areas: occlusion, assignment, over-paint, colour matching, resolution."""

import random

import pytest

from bench.canvas.medium import get_medium
from bench.sandbox.runtime import execute
from bench.translation.baseline import TAU, null_distribution, passes_gate, random_placement
from bench.translation.piou import reference_geometry, score_result
from bench.translation.references import Part, Reference, canonical_program, load_references


def rect(r, c, h, w, col):
    return Part("rect", {"r": r, "c": c, "h": h, "w": w}, col)


TWO = Reference("t", "test", "white", (rect(0, 0, 10, 10, "red"), rect(5, 5, 10, 10, "blue")))


def score(ref, program, medium=None):
    return score_result(execute(program, medium) if medium else execute(program), reference_geometry(ref))


def test_occlusion_defines_the_reference_regions():
    rg = reference_geometry(TWO)
    assert rg.regions[0].area == pytest.approx(75.0)  # the red square minus the blue corner
    assert rg.regions[1].area == pytest.approx(100.0)


def test_missing_part_and_occluded_overlap_by_hand():
    s = score(TWO, "fill('white')\nrect(0, 0, 10, 10, 'red')")
    # the red square (100) overlaps red's region 75/100 and blue's 25/100 -> red; IoU 75/100
    assert s.part_iou == pytest.approx((0.75, 0.0))
    assert s.piou == pytest.approx(0.375) and s.overpaint == pytest.approx(0.0)


def test_colour_matching_variant_by_hand():
    s = score(TWO, "fill('white')\nrect(0, 0, 10, 10, 'blue')\nrect(5, 5, 10, 10, 'red')")
    assert s.piou == pytest.approx(1.0)
    assert s.piou_color == pytest.approx(0.0)


def test_overpaint_penalty_by_hand():
    one = Reference("o", "test", "white", (rect(0, 0, 4, 4, "red"),))
    s = score(one, "fill('white')\nrect(0, 0, 4, 8, 'red')")
    assert s.piou == pytest.approx(16 / 32) and s.overpaint == pytest.approx(0.5)
    assert s.piou_pen == pytest.approx(0.25)


def test_painting_over_everything_scores_zero_and_background_paint_erases():
    assert score(TWO, "rect(0, 0, 10, 10, 'red')\nrect(5, 5, 10, 10, 'blue')\nfill('white')").piou == 0.0
    s = score(TWO, "fill('white')\nrect(0, 0, 10, 10, 'red')\nrect(5, 5, 10, 10, 'blue')\nrect(5, 5, 10, 10, 'white')")
    assert s.part_iou == pytest.approx((1.0, 0.0)) and s.overpaint == pytest.approx(0.0)


def test_split_part_is_unioned():
    one = Reference("o", "test", "white", (rect(0, 0, 4, 8, "red"),))
    s = score(one, "fill('white')\nrect(0, 0, 4, 4, 'red')\nrect(0, 4, 4, 4, 'red')")
    assert s.piou == pytest.approx(1.0)


def test_invalid_attempt_scores_zero():
    s = score(TWO, "import os")
    assert (s.piou, s.piou_pen, s.piou_color) == (0.0, 0.0, 0.0)


def test_resolution_independence_24_vs_48():
    rng = random.Random(3)
    refs = load_references("sampled")[:25] + load_references("icons")
    m48 = get_medium("v1@48")
    for ref in refs:
        calls = random_placement(ref, rng)
        prog = "\n".join(_as_code(c) for c in calls)
        for text in (prog, canonical_program(ref)):
            a, b = score(ref, text), score(ref, text, m48)
            assert execute(text, m48).pixels.shape == (48, 48, 3)
            assert a.piou == b.piou and a.piou_pen == b.piou_pen and a.part_iou == b.part_iou


def _as_code(call):
    col = "(%d, %d, %d)" % call.color
    if call.kind == "fill":
        return f"fill({col})"
    if call.kind == "poly":
        pts = ", ".join(f"({call.params[i]}, {call.params[i + 1]})" for i in range(0, len(call.params), 2))
        return f"poly([{pts}], {col})"
    return f"{call.kind}({', '.join(str(p) for p in call.params)}, {col})"


def test_null_baseline_is_seeded_and_near_chance():
    refs = load_references("sampled")[:40]
    a, s1 = null_distribution(refs, draws_per_ref=5, seed=7)
    b, s2 = null_distribution(refs, draws_per_ref=5, seed=7)
    assert (a == b).all() and s1 == s2 and s1.seed == 7
    assert 0.02 < s1.mean < 0.2 and s1.p95 < TAU


def test_gate():
    assert passes_gate([1.0, 1.0, 0.0]) and not passes_gate([0.59, 0.59, 1.0]) and not passes_gate([])
