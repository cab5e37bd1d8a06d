"""Inference on per-pair effects: the mean over prompt pairs, a grouped interval and a sign-flip p against "no effect".

A patching result in a paper is a mean over many clean/corrupt pairs with its spread. `pair_inference(effects,
groups)` takes one effect per pair and site ([pairs, sites]) and returns, per site, the mean effect, an interval
and a two-sided p-value, with prompt groups honoured as in the probe stage (pairs that share a template are not
independent: the group is the unit of resampling).

**Estimand.** The mean effect per pair over the population of groups the pairs were drawn from (pair-weighted:
a group of 12 pairs counts 12 times a group of 1, as in the pooled mean that is reported). Without groups every
pair is its own group, and the estimand is the mean over pairs like these.

**Interval.** mean -/+ t_{G-1} x the cluster-robust standard error (CR1: G/(G-1) x sum over groups of the
squared group total of the centred effects, / N^2; Cameron & Miller 2015), G the number of groups. Its coverage
is measured by simulation in `perf/bench_pair_effects.py` on equal, unequal, few and no groups, normal,
heavy-tailed and skewed effects (docs/runtime.md has the table).

**p-value.** A sign-flip test on group totals (Fisher's randomisation test for a paired design; the group is
flipped whole, so pairs of one group move together): under "no effect", each group's total effect is symmetric
about 0, so its sign is exchangeable. With 2^G <= `n_flips` + 1 every sign vector is enumerated (exact);
otherwise `n_flips` random ones from `seed` with p = (1 + #{|T*| >= |T|}) / (1 + n_flips). Comparisons carry a
tolerance of 1e-9 of the statistic's scale, so a tie never depends on the last bits of a float. With G groups
the smallest p is 2 / 2^G (G = 4: 0.125), which the rows state; the p of a site whose every effect is exactly 0
is 1 (no interval width, nothing to detect: a site before the first token where the prompts differ).

**Several sites.** `q` is the Benjamini-Hochberg adjustment of the sites' p-values (`interp.probes.benjamini_hochberg`,
the probe stage's), one family per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

#: groups below which no interval is given (one group has no spread between groups)
MIN_INTERVAL_GROUPS = 2
DEFAULT_FLIPS = 9999
TOLERANCE = 1e-9


@dataclass
class PairInference:
    """Per site: mean effect, interval (lo, hi), sign-flip p, BH q; plus the design it ran on."""

    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    p: np.ndarray
    q: np.ndarray
    n_pairs: int
    n_groups: int
    grouping: str  #: "groups" (flips and interval by group) or "pairs" (every pair its own group)
    flips: str  #: "exact (2^G sign vectors)" or "B random sign vectors, seed S"
    min_p: float  #: the smallest p this design can give
    level: float
    seed: int


def group_index(groups: Sequence[Any] | None, n: int) -> tuple[np.ndarray, str]:
    """Integer group of every pair (first-seen order) and the grouping's name; None: every pair its own group."""
    if groups is None:
        return np.arange(n), "pairs"
    labels = list(groups)
    if len(labels) != n:
        raise ValueError(f"groups: one label per pair ({n} pairs), got {len(labels)}")
    if any(g is None or (isinstance(g, float) and not np.isfinite(g)) for g in labels):
        raise ValueError("groups: every pair needs a label (None or NaN found)")
    try:
        seen: dict[Any, int] = {}
        idx = np.array([seen.setdefault(g, len(seen)) for g in labels])
    except TypeError:
        raise TypeError("groups: labels must be hashable (strings or numbers)") from None
    return idx, "groups"


def _signs(G: int, n_flips: int, seed: int) -> tuple[np.ndarray, bool]:
    """Sign vectors [B, G]: all 2^G when that is at most n_flips + 1 (exact), else n_flips random ones."""
    if G <= 20 and 2 ** G <= n_flips + 1:
        grid = ((np.arange(2 ** G)[:, None] >> np.arange(G)[None, :]) & 1).astype(float)
        return 1.0 - 2.0 * grid, True
    rng = np.random.default_rng(seed)
    return rng.choice(np.array([-1.0, 1.0]), size=(n_flips, G)), False


def pair_inference(effects: np.ndarray, groups: Sequence[Any] | None = None, level: float = 0.95,
                   n_flips: int = DEFAULT_FLIPS, seed: int = 0) -> PairInference:
    """Mean, grouped interval and sign-flip p of per-pair effects ([pairs] or [pairs, sites]); see the module.

    Args:
        effects: one row per pair (per-pair effects at one or more sites), finite.
        groups: one label per pair (its template or family); None: every pair its own group.
        level: the interval's level, in (0, 1).
        n_flips: random sign vectors when 2^G exceeds n_flips + 1 (else all are enumerated).
        seed: the random sign vectors' seed (recorded in `flips`).

    Example::

        inf = pair_inference([0.9, 1.2, 0.8, 1.1, 1.0, 0.7], groups=["a", "a", "b", "b", "c", "c"])
        inf.mean, inf.lo, inf.hi, inf.p
    """
    from scipy import stats

    e = np.asarray(effects, dtype=float)
    one = e.ndim == 1
    e = e[:, None] if one else e.reshape(e.shape[0], -1)
    n = e.shape[0]
    if n < 1:
        raise ValueError("no pairs: pair_inference needs at least one pair's effects")
    if not np.isfinite(e).all():
        raise ValueError("effects hold NaN or inf: a metric returned a non-finite value for some pair")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    if isinstance(n_flips, bool) or not isinstance(n_flips, (int, np.integer)) or n_flips < 1:
        raise ValueError(f"n_flips must be a positive integer, got {n_flips!r}")
    g, grouping = group_index(groups, n)
    G = int(g.max()) + 1
    totals = np.zeros((G, e.shape[1]))
    np.add.at(totals, g, e)
    mean = totals.sum(0) / n
    lo = np.full_like(mean, np.nan)
    hi = np.full_like(mean, np.nan)
    if G >= MIN_INTERVAL_GROUPS:
        centred = np.zeros_like(totals)
        np.add.at(centred, g, e - mean)
        se = np.sqrt(G / (G - 1) * (centred ** 2).sum(0)) / n
        half = stats.t.ppf(0.5 + level / 2, G - 1) * se
        lo, hi = mean - half, mean + half
    signs, exact = _signs(G, int(n_flips), seed)
    observed = np.abs(totals.sum(0))
    tol = TOLERANCE * (np.abs(totals).sum(0) + 1e-300)
    flipped = np.abs(signs @ totals)  # [B, sites]
    hits = (flipped >= observed - tol).sum(0)
    p = hits / len(signs) if exact else (1 + hits) / (1 + len(signs))
    p = np.where(np.abs(totals).sum(0) == 0, 1.0, p)
    min_p = 2.0 / 2 ** G if exact else 1.0 / (1 + len(signs))
    flips = f"exact ({2 ** G} sign vectors)" if exact else f"{len(signs)} random sign vectors, seed {seed}"
    from interp.probes import benjamini_hochberg

    q = np.asarray(benjamini_hochberg(list(p)), dtype=float)
    out = PairInference(mean, lo, hi, p, q, n, G, grouping, flips, min_p, level, seed)
    if one:
        for k in ("mean", "lo", "hi", "p", "q"):
            setattr(out, k, getattr(out, k)[0])
    return out


__all__ = ["PairInference", "group_index", "pair_inference"]
