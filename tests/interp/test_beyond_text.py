"""The beyond-text test's calibration (issue 28): cross-fitted Freedman-Lane and an order-aware baseline, checked on
known answers whose broken variants fail the same checks: the in-sample fitted values (the test before issue 28) on
real transformer activations with a target that depends on one word, and the baselines without a reading of word
order on a target that depends on the order of two words that are never within a trigram. All draws seeded."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from interp.baselines import word_order_features, word_positions
from interp.probes import Grid, carries_variance
from interp.simulate import Population, beyond_text_replications, beyond_text_test

TEXT = dict(seed=1, vocab=20, words=4, relevant=2, text_share=0.3, act_noise=0.3)
GRID = Grid(pca=(2, 4, 8, 16, 32), alphas=tuple(float(a) for a in np.logspace(-2, 4, 7)), outer=5, inner=5)


@pytest.fixture(autouse=True)
def _one_thread():
    with threadpool_limits(1):
        yield


def test_word_order_features_read_order_and_not_conjunctions():
    texts = ["a red circle left of a blue square", "a blue square left of a red circle", "a red flag"]
    f = word_order_features(texts)
    assert f.shape[1] > 0 and np.all(f[0] == -f[1]) and np.any(f[0] != 0) and np.all(f[2] == 0)
    # a fixed template (every pair always in the same order): no order column (one of zeros, which carries no
    # variance and is never a ceiling), so no conjunction of two words (the XOR planner's plan) becomes readable;
    # the words' places are a separate baseline, linear in the words of each place
    fixed = ["a red kite at noon", "a blue kite at dusk", "a red kite at dusk"]
    assert not carries_variance(word_order_features(fixed))
    assert word_positions(fixed).shape[1] == 14  # 7 word@place + 7 word@-place


@pytest.mark.slow
def test_the_word_order_baseline_reads_a_word_order_target_that_bags_cannot():
    """Activations that hold the words and the order of two marker words, a target that depends only on that order
    (the markers never within a trigram). The word-order baseline (or the markers' places) reads most of it, so the
    beyond-text Delta is small; the broken variant, the baselines before issue 28 (bags of words, 1-3 grams, characters, embeddings),
    reads none of it and the whole order effect looks "beyond the text". (The test's p is still small here: the
    activations read the order more exactly than the baseline's PCA + ridge over its pair columns; see
    docs/probes.md, what "beyond the text" excludes.)"""
    pop = Population("text-order", **TEXT)
    right = beyond_text_replications(pop, 80, 4, GRID, 19)
    broken = beyond_text_replications(pop, 80, 4, GRID, 19, without=("word-order", "word-positions", "word-places"))
    # the ceiling reads the order: word order, or the two markers' places (whole, or through the columns most
    # associated with the target), the readings the broken variant lacks
    assert all(r["baseline"].split("/")[0] in ("word-order", "word-places") and r["beyond"] < 0.05 for r in right), right
    assert all(r["beyond"] > 0.2 for r in broken), broken


def _needs_random_planner():
    from interp.organisms import WEIGHTS, record
    from interp.organisms.zoo import code_version

    stale = (record(WEIGHTS / "random-planner") or {}).get("code_version") != code_version("random-planner")
    return pytest.mark.skipif(stale, reason="committed random-planner weights missing or stale")


@pytest.mark.slow
@_needs_random_planner()
def test_text_only_targets_on_real_activations_are_not_beyond_the_text_and_the_in_sample_null_says_they_are():
    """Issue 28: on a real transformer's activations (the random planner's, 208 prompts, `last` token) a target that
    depends on one colour word only was "beyond the text" in 30-50% of data sets. With the ceiling's cross-fitted
    values the test rejects rarely (perf/bench_beyond_text.py: 1 of 40); the broken variant, the whole designs'
    in-sample fit (the test before issue 28, which had no screened ceilings), rejects often (10 of 20 there). (A
    screened ceiling's in-sample fit, 4 or 16 columns, hardly overfits: 1 of 12 here.) A word-order target (place phrase before time phrase, the two
    words never adjacent) is not beyond the text either."""
    from interp.simulate import organism_activations, organism_prompts, word_targets

    grid = Grid(pca=(4, 8, 16, 32), outer=5, inner=3)
    items, _ = organism_prompts()
    xs = organism_activations(items)
    texts = [i.text for i in items]
    teal = np.array([" teal " in f" {t} " for t in texts], float)
    ys = word_targets(teal, 12, seed=11)
    right = [beyond_text_test(xs, texts, y, grid, 99, r)["p_fl"] for r, y in enumerate(ys)]
    broken = [beyond_text_test(xs, texts, y, grid, 99, r, fitted="in-sample", screened=False)["p_fl"]
              for r, y in enumerate(ys)]
    assert sum(p <= 0.05 for p in right) <= 1, right
    assert sum(p <= 0.05 for p in broken) >= 3, broken
    items, bits = organism_prompts(swapped=True)
    xs = organism_activations(items)
    texts = [i.text for i in items]
    order = [beyond_text_test(xs, texts, y, grid, 99, r)["p_fl"] for r, y in enumerate(word_targets(bits, 6, seed=11))]
    assert sum(p <= 0.05 for p in order) <= 1, order


FEATURE_POP = dict(seed=1, vocab=20, words=6, relevant=2, text_share=0.3, act_noise=0.3)


@pytest.mark.slow
def test_exact_readers_of_one_text_feature_are_a_reading_of_the_text_and_a_hidden_plan_is_beyond():
    """Issue 39: activations that hold exactly one text feature (a word's place, the word count and its parity, the
    order of two words, the XOR of two words) were called "beyond the text" in 20 of 20 data sets. The verdict
    (`interp.baselines.beyond_outcome`, the report's one rule) now needs the text features to reproduce less than
    READABLE_MAX of what the probe decodes: these readers give 0.75-0.95, and never get "beyond"; a hidden plan gives
    under 0.1 and always does. The broken variant, the verdict on the test alone (p and a positive Delta) against the
    whole designs only (the ceilings before the screened ones), calls the place and order readers beyond in every data
    set (the activations hold along one direction what a baseline must learn from noisy targets among hundreds of
    columns)."""
    from interp.baselines import READABLE_MAX, beyond_outcome
    from experiments.stages.probe import ProbeSettings

    grid = ProbeSettings().grid
    for kind in ("text-place", "text-count", "text-order", "text-cooccur"):
        got = beyond_text_replications(Population(kind, **FEATURE_POP), 80, 3, grid, 19)
        assert all(r["text_readable"] >= READABLE_MAX for r in got), (kind, got)
        assert not any(beyond_outcome(r["p_fl"], r["beyond"], r["text_readable"]) == "beyond" for r in got), kind
        if kind in ("text-place", "text-order"):  # the test alone against the whole designs: "beyond" every time
            whole = beyond_text_replications(Population(kind, **FEATURE_POP), 80, 3, grid, 19, screened=False)
            assert all(r["p_fl"] <= 0.05 and r["beyond"] > 0 for r in whole), (kind, whole)
    plan = beyond_text_replications(Population("planted", **FEATURE_POP), 80, 3, grid, 39)  # p < 0.05 needs 39
    assert all(beyond_outcome(r["p_fl"], r["beyond"], r["text_readable"]) == "beyond" for r in plan), plan


@pytest.mark.slow
def test_a_word_s_place_read_exactly_is_not_beyond_its_screened_ceiling_and_is_beyond_the_whole_designs():
    """Issue 39: the beyond-text test's ceiling must read a text feature at full strength. A word's place is one of
    66 place columns; under one ridge penalty the whole design learns it from noisy targets less exactly than
    activations that hold it along one direction, and Freedman-Lane rejected in 20 of 20 data sets (the broken
    variant, `screened=False`, below: every one of 6). With each reading also through its 4 and 16 columns most
    associated with the targets (chosen on each fold's training rows) the screened word places are the ceiling and
    the test rejects in at most 1 of 6 (1 of 20 measured), while a hidden plan is still found in every data set."""
    from experiments.stages.probe import ProbeSettings

    grid = ProbeSettings().grid
    pop = Population("text-place", **FEATURE_POP)
    screened = beyond_text_replications(pop, 80, 6, grid, 19)
    assert sum(r["p_fl"] <= 0.05 for r in screened) <= 1, [r["p_fl"] for r in screened]
    assert all("/" in r["baseline"] for r in screened), [r["baseline"] for r in screened]
    whole = beyond_text_replications(pop, 80, 6, grid, 19, screened=False)
    assert all(r["p_fl"] <= 0.05 for r in whole), [r["p_fl"] for r in whole]
    plan = beyond_text_replications(Population("planted", **FEATURE_POP), 80, 3, grid, 19)
    assert all(r["p_fl"] <= 0.05 for r in plan), [r["p_fl"] for r in plan]
