"""Continued-drawing rates with their prompt-clustered interval: the one function behind every rate's CI in the
intervention, dose-response and patching tables.

The promise: a rate comes with a 95% CI that resamples prompts (continuations of one prompt are not independent),
or with no interval at all where there is one prompt: every resample of one prompt is that prompt, so a bootstrap
"interval" would be a point ("95% CI [0.333, 0.333]"), which reads as certainty where nothing is known of the spread.
"""

from __future__ import annotations

import numpy as np


def cluster_ci(per_prompt: dict[str, list[float]], n_boot: int, seed: int) -> list[float | None]:
    """Prompt-clustered percentile 95% CI of the mean over all values (prompts resampled with replacement, seeded);
    [None, None] with fewer than two prompts."""
    from interp.probes import bootstrap_counts

    keys = sorted(per_prompt)
    if len(keys) < 2:
        return [None, None]
    sums = np.array([np.sum(per_prompt[k]) for k in keys], dtype=float)
    counts = np.array([len(per_prompt[k]) for k in keys], dtype=float)
    w = bootstrap_counts(len(keys), n_boot, seed)
    means = (w @ sums) / (w @ counts)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return [float(lo), float(hi)]


__all__ = ["cluster_ci"]
