"""Intervals and tests of probe R^2 checked by simulation against what they claim (issue 19): coverage of the
expected R^2 and Delta of the procedure, the null's rate of intervals that exclude 0, and the beyond-text test's
known answers. Small versions of perf/bench_coverage.py; each has a broken variant that fails the same check
(the prompt bootstrap of fixed predictions for coverage, the paper's permutation test for the beyond-text claim).
All draws are seeded: a run gives the same numbers on every machine."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from interp.probes import Grid
from interp.simulate import Population, beyond_text_replications, expected_r2, interval_replications

GRID = Grid(pca=(2, 4, 8, 16), alphas=tuple(float(a) for a in np.logspace(-2, 4, 7)), outer=5, inner=5)


def _covers(ci, truth) -> bool:
    lo, hi = (ci.lo, ci.hi) if hasattr(ci, "lo") else ci
    return lo <= truth <= hi


@pytest.fixture(autouse=True)
def _one_thread():
    with threadpool_limits(1):  # small matrices: threads only contend (and the answer does not depend on them)
        yield


def test_intervals_cover_the_expected_r2_and_delta_and_the_fixed_prediction_bootstrap_does_not():
    pop = Population("planted", seed=1)
    truth = expected_r2(pop, 48, ["resid", "tfidf"], GRID, draws=20)
    reps = interval_replications(pop, 60, 60, GRID)
    delta = truth["resid"] - truth["tfidf"]
    new_r2 = np.mean([_covers(r["new_r2"], truth["resid"]) for r in reps])
    new_d = np.mean([_covers(r["new_delta"], delta) for r in reps])
    old_r2 = np.mean([_covers(r["old_r2"], truth["resid"]) for r in reps])
    old_d = np.mean([_covers(r["old_delta"], delta) for r in reps])
    assert new_r2 >= 0.88 and new_d >= 0.9, (new_r2, new_d)
    # the broken variant: resampling test prompts with the probes held fixed ignores that they were fitted on the
    # same prompts (measured 74% at 100 replications)
    assert old_d <= 0.85 and old_r2 <= 0.85, (old_r2, old_d)


def test_with_nothing_to_find_the_interval_rarely_excludes_zero_and_covers_the_expected_r2():
    pop = Population("null", seed=1)
    truth = expected_r2(pop, 48, ["resid"], GRID, draws=20)
    reps = interval_replications(pop, 60, 40, GRID)
    excludes = np.mean([r["new_delta"].lo > 0 or r["new_delta"].hi < 0 for r in reps])
    assert excludes <= 0.06
    assert np.mean([_covers(r["new_r2"], truth["resid"]) for r in reps]) >= 0.88
    # broken variant: the pooled R^2 over the sample's own SST sits (1 - R^2)/n below the expected R^2, and the
    # bootstrap of fixed predictions is narrow around it: it covers almost never
    assert np.mean([_covers(r["old_r2"], truth["resid"]) for r in reps]) <= 0.5


TEXT = dict(seed=1, vocab=20, words=4, relevant=2, text_share=0.3, act_noise=0.3)
#: PCA sizes up to the number of words: a baseline cut to fewer components than the text has words reads less of
#: the text than the activations can, and then "beyond the baseline" is not "beyond the text"
TEXT_GRID = Grid(pca=(2, 4, 8, 16, 32), alphas=GRID.alphas, outer=5, inner=5)


def test_beyond_text_known_answers():
    """Activations that hold only the prompt's words: the beyond-text Delta is not above 0 (about 0 against the whole
    designs; about -0.17 since issue 39's screened ceilings, which read the two relevant words with a few coefficients
    where the noisy activations cannot) and its Freedman-Lane p is rarely small, while the paper's Delta against
    TF-IDF with its plain permutation test calls them "significant" (the broken variant). A hidden plan in the
    activations: p at its floor in every data set."""
    words = beyond_text_replications(Population("text-only", **TEXT), 80, 30, TEXT_GRID, n_perm=99)
    p_fl = np.array([r["p_fl"] for r in words])
    assert np.mean(p_fl <= 0.05) <= 0.1 and np.mean([r["beyond"] for r in words]) < 0.05
    assert np.mean([r["p_paper"] <= 0.05 for r in words]) >= 0.5
    plan = beyond_text_replications(Population("planted", **TEXT), 80, 8, TEXT_GRID, n_perm=199)
    assert all(r["p_fl"] < 0.01 and r["beyond"] > 0.1 for r in plan)
