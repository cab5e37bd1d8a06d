"""Attention focus on spatial words (issue 16): the word finder, the runtime's per-layer attention mass, and
the focus ratio on a tiny Llama whose layer-0 attention is set by hand (a closed-form answer); uniform
attention gives exactly 1, and a spatial word misplaced by one token fails the check."""

import math

import numpy as np
import pytest

from interp.attention import SPATIAL_WORDS, focus_from_mass, spatial_spans
from interp.prompts import PromptItem, Protocol, build
from tests.interp.tiny_attention import build_focused, marked_ids

WORDS = ("left", "right", "above", "below", "upper")
SCORE = 3.0
ITEM = PromptItem("3A-00", "layout", "Draw a red ball to the left of a blue box.")
ANSWER = "fill('white')\nrect(2, 2, 4, 4, 'red')\ncircle(12, 12, 3, 'blue')"


def test_spatial_words_are_whole_words_found_by_offsets():
    text = "Draw a kite to the Upper right of a child; a top-left corner, leftover topping, CENTRE."
    got = spatial_spans(text)
    assert [w for _, _, w in got] == ["upper", "right", "top", "left", "corner", "centre"]
    assert all(text[a:b].lower() == w for a, b, w in got)
    assert {"left", "row", "column", "above", "centre", "corner"} <= set(SPATIAL_WORDS) and "on" not in SPATIAL_WORDS


def test_request_tokens_by_offsets(tiny):
    b = build(ITEM, Protocol("few-shot", 2), tiny.tokenizer)
    a, e = b.request
    assert b.text[a:e] == ITEM.text
    (s0, s1, _), = spatial_spans(b.text[a:e])
    toks = b.tokens_in([(a + s0, a + s1)])
    assert toks and all(b.request[0] <= b.offsets[i][0] < b.request[1] for i in toks)
    assert "left" in tiny.tokenizer.decode([b.tokens[i] for i in toks])


def test_focus_from_mass_arithmetic():
    # one layer, three queries: the spatial group gets 0.3 of mass with 2 of 10 keys visible; the prompt 0.6
    mass = np.array([[[[0.3, 2], [0.6, 10]], [[0.3, 2], [0.6, 10]], [[0.0, 0], [0.5, 8]]]])
    f = focus_from_mass(mass, [[0, 1], [2], []])
    assert f.by_layer[0] == pytest.approx(2.5)  # (0.3/0.6) / (2/10); the query that sees no spatial key has none
    assert f.share_by_layer[0] == pytest.approx((0.5 + 0.0) / 2) and f.n_queries == 3 and f.focus == pytest.approx(2.5)
    assert np.isnan(focus_from_mass(mass, []).focus)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """score -> runtime: the focused model and its broken twin with uniform layer-0 attention."""
    from interp.runtime import Runtime

    return {score: Runtime.from_folder(build_focused(tmp_path_factory.mktemp("focus") / "m", WORDS, score), name="focused")
            for score in (SCORE, 0.0)}


def _known_focus(rt, built, score):
    """The closed form: every prompt token with a marked id gets weight e^score, every other 1; the request's
    spatial tokens are marked, so (share / expected) = |P| e^s / (|B| (e^s - 1) + |P|), whatever |S| is."""
    marked = marked_ids(rt.tokenizer, WORDS)
    n_p = len(built.tokens)
    n_b = sum(t in marked for t in built.tokens)
    e = math.exp(score)
    return n_p * e / (n_b * (e - 1) + n_p)


def _mass(rt, built, spatial):
    ids = rt.tokenizer(ANSWER, add_special_tokens=False)["input_ids"]
    n = len(built.tokens)
    queries = list(range(n, n + len(ids)))
    return rt.attention_mass(list(built.tokens) + ids, queries, [spatial, list(range(n))]).numpy(), len(queries)


@pytest.mark.parametrize("score", [SCORE, 0.0], ids=["focused", "uniform"])
def test_focus_recovers_the_constructed_attention(models, score):
    rt = models[score]
    built = build(ITEM, Protocol("zero-shot"), rt.tokenizer)
    a, e = built.request
    spatial = built.tokens_in([(a + s0, a + s1) for s0, s1, _ in spatial_spans(built.text[a:e])])
    assert len(spatial) == 1  # " left", one token in this tokenizer
    mass, n_q = _mass(rt, built, spatial)
    assert mass.shape == (2, n_q, 2, 2) and np.all(mass[:, :, 1, 1] == len(built.tokens))
    f = focus_from_mass(mass, [list(range(n_q))])
    want = _known_focus(rt, built, score)
    assert f.by_layer[0] == pytest.approx(want, rel=1e-3)
    if score == 0.0:
        assert f.by_layer[0] == pytest.approx(1.0, abs=1e-5)  # uniform attention: no focus
    else:
        assert want > 5  # the construction is a strong focus, far from 1


def test_a_word_misplaced_by_one_token_fails_the_check(models):
    """The broken variant: the spatial word's token taken one position off. The layer-0 focus no longer
    matches the closed form (it falls below 1: the neighbour is an unmarked token)."""
    score, rt = SCORE, models[SCORE]
    built = build(ITEM, Protocol("zero-shot"), rt.tokenizer)
    a, e = built.request
    spatial = built.tokens_in([(a + s0, a + s1) for s0, s1, _ in spatial_spans(built.text[a:e])])
    mass, n_q = _mass(rt, built, [spatial[0] + 1])
    got = focus_from_mass(mass, [list(range(n_q))]).by_layer[0]
    assert got < 1 and abs(got - _known_focus(rt, built, score)) > 0.5 * _known_focus(rt, built, score)


def test_bad_positions_are_refused(tiny):
    with pytest.raises(ValueError, match="must lie in"):
        tiny.attention_mass([1, 2, 3], [5], [[0]])
    with pytest.raises(ValueError, match="layers must be in"):
        tiny.attention_mass([1, 2, 3], [2], [[0]], layers=[7])
