"""How a stage stores a statistic in a row: rounded to 6 places (None when not finite), a percentile or repeated-CV
interval, a permutation p with the reason it is missing, and the share of rows a permutation moved."""

from __future__ import annotations

from typing import Any

import numpy as np

from interp.grouping import moved_share
from interp.intervals import Interval
from interp.probes import p_missing, perm_p


def json_number(v: float) -> float | None:
    """A statistic as stored in a row: rounded to 6 places, None when not finite."""
    return None if not np.isfinite(v) else round(float(v), 6)


def percentile_ci(stats: np.ndarray) -> list[float | None]:
    """The 95% percentile interval of the finite bootstrap statistics, as stored in a row."""
    finite = stats[np.isfinite(stats)]
    if not finite.size:
        return [None, None]
    lo, hi = np.quantile(finite, [0.025, 0.975])
    return [json_number(lo), json_number(hi)]


def _interval_fields(iv: Interval, value: str) -> dict[str, Any]:
    """The row fields of an interval: the repeated-CV estimate it is centred on, the interval, its standard error."""
    return {f"{value}_mean": json_number(iv.value), "ci": [json_number(iv.lo), json_number(iv.hi)], "se": json_number(iv.se)}


def p_fields(name: str, null: np.ndarray, observed: float) -> dict[str, Any]:
    """A row's p-value fields: `name` = the permutation p, or None with `<name>_missing` saying why (a NaN in the
    null or the statistic is a missing value, never a p-value: issue 28)."""
    p = perm_p(null, observed)
    if np.isfinite(p):
        return {name: p}
    return {name: None, f"{name}_missing": p_missing(null, observed)}


def _null_mean(null: np.ndarray) -> float | None:
    return json_number(float(np.mean(null))) if len(null) and np.all(np.isfinite(null)) else None


def _moved(groups: np.ndarray | None, perms: np.ndarray) -> dict[str, Any]:
    """The row field with the share of rows a permutation moved to another group (grouped rows only)."""
    share = moved_share(groups, perms)
    return {} if share is None else {"perm_moved_share": json_number(share)}
