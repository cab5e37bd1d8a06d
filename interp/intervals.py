"""Intervals for cross-validated R^2 and Delta R^2 that cover their estimand.

The estimand. A probe's cross-validated R^2 estimates the *expected* R^2 of the procedure (standardise, PCA,
ridge, every choice made inside the training folds) trained on (K-1)/K of n prompts and applied to new
prompts of the same kind: an expectation over training sets, not the skill of one fitted probe (Bates, Hastie
& Tibshirani, "Cross-validation: what does it estimate and how well does it do it?", JASA 2023). R^2 there is
1 - E[squared error] / Var(target), pooled over the 36 cells. Delta R^2 estimates the difference of two such
expectations on the same prompts.

Why the prompt bootstrap of fixed out-of-fold predictions (the stage's interval before issue 19) is too
narrow: it resamples test prompts but keeps every probe as fitted, so it ignores that the probes were fitted
on the same prompts and would differ on another data set. Measured on planted data (perf/bench_coverage.py):
its 95% intervals covered the expected Delta in 74% of data sets, and with nothing to find its R^2 interval
almost never covered (the pooled R^2 also sits (1 - R^2)/n below the expected R^2, see `r2_interval`).

What is used instead: the corrected K-fold variance of Nadeau & Bengio (2003). The folds of a partition give
the sums a_k (SSE, or the difference of two probes' SSE) and b_k (the fold's sum of squares around the mean of
all prompts), so that the estimate is exactly the pooled ratio. Its fold values are linearised as in a ratio
estimator's delta method, z_k = (a_k - r b_k) / mean(b), and the variance of the estimate is
(1/K + n_test/n_train) S_z^2: the second term is Nadeau and Bengio's allowance for the correlation that shared
training prompts induce between folds, which the plain variance of fold scores (and the bootstrap of fixed
predictions) leaves out. The interval is r -/+ t_{K-1} sqrt(Var). With several partitions (`repeats`), the
centre is their mean and the variance the mean of theirs (a bound: steadier centre, conservative width).

Why this, measured (perf/bench_coverage.py prints the table): on planted data at n = 60 it covered the
expected R^2 in 93% and the expected Delta in 96% of 100 data sets; the same correction applied to 10
partitions at once (1/(JK) + n_test/n_train, as usually recommended for repeated CV) covered 89% and 83%,
because this procedure (PCA size, penalty and layer chosen inside the folds) is less stable than the
correction assumes, and a bootstrap that refits the whole procedure on grouped resamples covered 98% and 96%
at 30 refits per data set (30 times the cost of the sweep). Bates et al.'s nested CV needs an inner
cross-validation of the whole (already nested) procedure in every outer fold, repeated about a hundred
times: hours at the paper's shape (145 prompts, 65 layers of width 5,120). The chosen interval costs nothing
beyond the study's own cross-validation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: partitions of the cross-validation behind an interval (the first is the study's own split, whose estimate the
#: paper reports; more partitions steady the centre and keep the first one's width: conservative)
DEFAULT_REPEATS = 1


def repeat_seed(seed: int, j: int) -> int:
    """The fold seed of partition j of a repeated CV whose first partition is the study's own (seed)."""
    return seed if j == 0 else seed + 7919 * j


def fold_sums(y: np.ndarray, pred: np.ndarray, folds: Sequence[tuple[np.ndarray, np.ndarray]]
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per outer fold k: the SSE of the out-of-fold predictions on its test prompts, and their sum of squares
    around the mean of all prompts (so that the folds' sums add up to the pooled R^2's SSE and SST)."""
    mean = y.mean(axis=0)
    sse = np.array([((y[te] - pred[te]) ** 2).sum() for _, te in folds])
    sst = np.array([((y[te] - mean) ** 2).sum() for _, te in folds])
    return sse, sst


def group_blocks(groups: np.ndarray) -> list[np.ndarray]:
    """Row indices of each group, groups in order of their first appearance (the folds', permutations' and
    intervals' one reading of a group label; interp.probes uses it too, from this floor down)."""
    labels, first, inverse = np.unique(np.asarray(groups), return_index=True, return_inverse=True)
    return [np.flatnonzero(inverse == li) for li in np.argsort(first)]


def cluster_sums(y: np.ndarray, pred: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group (in order of first appearance): the SSE of the out-of-fold predictions on its prompts and their sum of
    squares around the mean of all prompts; the groups' sums add up to the pooled R^2's SSE and SST, as the folds'."""
    mean = y.mean(axis=0)
    blocks = group_blocks(groups)
    sse = np.array([((y[b] - pred[b]) ** 2).sum() for b in blocks])
    sst = np.array([((y[b] - mean) ** 2).sum() for b in blocks])
    return sse, sst


@dataclass(frozen=True)
class Interval:
    """An estimate of a ratio sum(a)/sum(b) over the folds of repeated CV (`value` is on the reported scale: R^2 =
    1 - ratio, Delta = ratio) with its corrected standard error and interval."""

    value: float
    lo: float
    hi: float
    se: float
    folds: int  #: J * K fold values the variance rests on
    level: float = 0.95

    def as_list(self) -> list[float]:
        return [self.lo, self.hi]


def ratio_interval(a: np.ndarray, b: np.ndarray, test_over_train: float, sign: float = 1.0, offset: float = 0.0,
                   level: float = 0.95, scale: float = 1.0, folds: int | None = None, upper: float = np.inf) -> Interval:
    """offset + sign * scale * sum(a)/sum(b), with the Nadeau-Bengio corrected interval, from the fold values a, b
    [J partitions, K folds] (see the module docstring); nan where the prompts have no variance.

    Per partition j: r_j = sum_k a_jk / sum_k b_jk, linearised fold values z_jk = scale (a_jk - r_j b_jk) / mean_k b_jk,
    and the corrected variance of the partition's estimate (1/K + n_test/n_train) S_j^2 on K - 1 degrees of freedom.
    The estimate is the mean of the r_j and its variance the mean of the partitions' variances: a partition's
    variance bounds that of the mean over partitions, so more partitions give a steadier centre and a conservative
    width (measured: perf/bench_coverage.py).

    Clustered prompts (`folds` = K given): a and b are then per *group* sums [J, G] (`cluster_sums`), G groups whose
    prompts share wording and layout. The fold of K-fold CV over G groups holds G/K of them, so its linearised value
    has variance (K/G) S_g^2 from the groups' values; the corrected variance of the estimate is then
    (1/K + n_test/n_train) (K/G) S_g^2 = (1 + K n_test/n_train) S_g^2 / G. With prompts as independent units this
    is the fold-level variance in expectation; with groups it keeps the variance that prompts of one group share,
    which the fold-level variance keeps only when the folds hold whole groups (issue 28: with prompt-level folds over
    30 groups of 5 the intervals covered 72-73%). Its t quantile takes K - 1 degrees of freedom, as the fold-level
    interval's does, not G - 1: the groups of one fold share one fitted probe, so the part of the variance that
    comes from the training set (which penalty and PCA size the inner folds chose, and what the probe learnt) is
    sampled K times, not G times. Measured (perf/bench_coverage.py, 15 families x 10, 200 data sets): on G - 1 = 14
    degrees of freedom the Delta interval covered the family null's expected Delta in 87.0%, too short where the
    inner folds chose heavy shrinkage (an estimate near 0, a small S_g, while the expectation over training sets
    is -0.013); on K - 1 = 4 it covers 94.0%.

    `upper`: the statistic's bound (1 for R^2: 1 - SSE/SST with SSE >= 0); the interval is clipped there (a
    symmetric interval near a perfect fit reached 1.01)."""
    from scipy.stats import t as student

    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(b, dtype=np.float64))
    k = a.shape[1]
    bsum = b.sum(axis=1)
    if k < 2 or not np.all(np.isfinite(a)) or not np.all(bsum > 0):
        nan = float("nan")
        return Interval(nan, nan, nan, nan, a.size, level)
    r = a.sum(axis=1) / bsum  # [J]
    z = scale * (a - r[:, None] * b) / b.mean(axis=1, keepdims=True)
    factor = (1.0 / k + test_over_train) if folds is None else (1.0 + folds * test_over_train) / k
    var = float(np.mean(factor * (z ** 2).sum(axis=1) / (k - 1)))
    se = float(np.sqrt(var))
    half = float(student.ppf(0.5 + level / 2, (k if folds is None else min(k, folds)) - 1)) * se
    v = offset + sign * scale * float(r.mean())
    return Interval(float(v), float(v - half), float(min(v + half, upper)), se, a.size, level)


def r2_interval(sse: np.ndarray, sst: np.ndarray, n: int, test_over_train: float, level: float = 0.95,
                folds: int | None = None) -> Interval:
    """R^2 = 1 - (SSE/n) / (SST/(n-1)) over the folds of every partition of n prompts, with its interval.

    The n-1: the pooled R^2 divides by SST around the sample's own mean, which is (n-1)/n of the targets'
    variance on average; the expected R^2 on new prompts divides by the variance itself. Without it the estimate
    sits (1 - R^2)/n below its estimand (0.016 at n = 60 with nothing to find, where the interval is 0.02 wide).

    The upper end is clipped at 1: no R^2 exceeds 1 (SSE >= 0), so the symmetric t interval's part above 1 covers
    nothing; an interval "[0.95, 1.04]" would read as if a probe could beat a perfect prediction. The estimate and
    the lower end are left as they are (an R^2 has no lower bound)."""
    return ratio_interval(sse, sst, test_over_train, sign=-1.0, offset=1.0, level=level, scale=(n - 1) / n, folds=folds,
                          upper=1.0)


def delta_interval(sse_a: np.ndarray, sse_b: np.ndarray, sst: np.ndarray, n: int, test_over_train: float,
                   level: float = 0.95, folds: int | None = None) -> Interval:
    """R^2(a) - R^2(b) = (SSE_b - SSE_a)/n / (SST/(n-1)) over the same folds (or groups: `folds`), with its interval."""
    return ratio_interval(np.asarray(sse_b) - np.asarray(sse_a), sst, test_over_train, level=level, scale=(n - 1) / n,
                          folds=folds)


#: a probe whose out-of-fold predictions stray from its training folds' means by less than this share of the targets'
#: sum of squares predicts the mean (its predictions move by about 3% of the targets' spread): the rows then say
#: NO_SIGNAL and give no Delta interval. Measured on the stage's grid (issue 39; 60 family-null data sets per design):
#: every Delta interval that missed its estimand at 15 x 10 and at sizes 3..17 had a probe this close to the mean (its
#: groups' sums of the difference are then rounding-sized, and no t quantile widens them); 38-40% of those null data
#: sets are such, and the intervals of the rest covered 100%. At 1e-4 (both probes) 22-25% were caught and the rest
#: covered 87% (15 x 10).
AT_THE_MEAN = 1e-3
#: what a row says instead of a Delta interval when the activations' probe predicts the mean
NO_SIGNAL = "no signal: the probe predicts the mean"
#: below this many groups a Delta interval takes the unpaired bound (`unpaired_delta_interval`): at 6 groups of 25 the
#: paired interval covered the family null's expected Delta in 72-78% of data sets (its G group sums are few and the
#: estimand's distribution over training sets is skewed), the unpaired bound in 100% (2.2 times as wide)
FEW_GROUPS = 10


def at_the_mean(y: np.ndarray, pred: np.ndarray, folds: Sequence[tuple[np.ndarray, np.ndarray]]) -> bool:
    """Whether out-of-fold predictions `pred` are (to AT_THE_MEAN) each outer fold's training mean: the inner folds chose
    so much shrinkage that the probe predicts nothing."""
    y = np.asarray(y, dtype=np.float64)
    sst = float(((y - y.mean(axis=0)) ** 2).sum())
    dev = sum(float(((pred[te] - y[tr].mean(axis=0)) ** 2).sum()) for tr, te in folds)
    return sst > 0 and dev <= AT_THE_MEAN * sst


def unpaired_delta_interval(sse_a: np.ndarray, sse_b: np.ndarray, sst: np.ndarray, n: int, test_over_train: float,
                            level: float = 0.95, folds: int | None = None) -> Interval:
    """R^2(a) - R^2(b) as `delta_interval`, with the conservative bound se(a - b) <= se(a) + se(b) (the two R^2's own
    standard errors, their correlation taken as -1: the pairing is ignored) for designs whose paired variance is not
    to be trusted (fewer than FEW_GROUPS groups)."""
    from scipy.stats import t as student

    paired = delta_interval(sse_a, sse_b, sst, n, test_over_train, level, folds)
    ra = r2_interval(sse_a, sst, n, test_over_train, level, folds)
    rb = r2_interval(sse_b, sst, n, test_over_train, level, folds)
    se = ra.se + rb.se
    k = np.atleast_2d(np.asarray(sse_a)).shape[1]
    df = (k if folds is None else min(k, folds)) - 1
    if not np.isfinite(se) or df < 1:
        return paired
    half = float(student.ppf(0.5 + level / 2, df)) * se
    return Interval(paired.value, paired.value - half, paired.value + half, se, paired.folds, level)


def test_over_train(n: int, outer: int) -> float:
    """n_test / n_train of one outer fold of K-fold CV over n prompts (1/(K-1) when K divides n)."""
    n_test = n / outer
    return n_test / (n - n_test)


__all__ = ["AT_THE_MEAN", "DEFAULT_REPEATS", "FEW_GROUPS", "Interval", "NO_SIGNAL", "at_the_mean", "unpaired_delta_interval", "cluster_sums", "delta_interval", "fold_sums", "r2_interval", "ratio_interval", "repeat_seed",
           "test_over_train"]
