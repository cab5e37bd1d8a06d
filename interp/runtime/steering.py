"""Dose-response of a steering vector: one table row per strength (alpha, metric, interval, n) and a plot of it.

`dose_response(measure, alphas)` calls `measure(alpha)` for every strength; `measure` returns one value per
sampling unit (a prompt, or a prompt's continuation), and the row is their mean with a Student-t interval over
those units. `logit_dose_response(rt, inputs, name, direction, alphas, metric, positions=...)` is the common case:
`rt.forward` with `hooks.steer.add_direction(alpha * direction, positions)` at hook `name`, and `metric(logits)`
one value per prompt. `plot_dose_response(table)` draws it with its intervals and n (a matplotlib Figure).

The promises: every mean carries its interval and n, and where there is none (n = 1, or values with no
spread information) the row says so (`low`/`high` NaN, `note` "n = 1, no interval") instead of a zero-width
interval that reads as certainty. The interval's estimand is the mean of the metric over the population the
units were drawn from, at that strength; its coverage is checked by simulation in
tests/interp/test_steering.py (0.95 nominal; the normal quantile in place of t under-covers at n = 8, and the
test fails for it).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float, int]:
    """(mean, low, high, n) with a Student-t interval over the values; NaN bounds when n < 2 (no interval).

    Args:
        values: numbers (None and NaN are left out and not counted).
        level: the interval's level, in (0, 1).

    Example::

        mean_interval([1.0, 2.0, 3.0])   # (2.0, low, high, 3)
    """
    from scipy import stats

    v = np.asarray([x for x in values if x is not None and not math.isnan(float(x))], dtype=np.float64)
    n = int(v.size)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    mean = float(v.mean())
    if n < 2:
        return mean, float("nan"), float("nan"), n
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * v.std(ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half, n


def check_strengths(alphas: Any, level: float) -> list[float]:
    """The strengths as floats, and the level, checked before any forward: one sentence naming the argument (issue 40:
    alpha NaN or inf and level 1.5 gave silent NaN rows)."""
    if isinstance(alphas, (str, bytes)) or not hasattr(alphas, "__iter__"):
        raise TypeError(f"alphas must be a sequence of numbers, not {type(alphas).__name__}")
    out = []
    for a in alphas:
        if isinstance(a, bool) or not isinstance(a, (int, float, np.integer, np.floating)):
            raise TypeError(f"alphas must be numbers; got {a!r}")
        if not math.isfinite(float(a)):
            raise ValueError(f"alphas must be finite numbers; got {a!r}")
        out.append(float(a))
    if not out:
        raise ValueError("alphas is empty: give at least one steering strength")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < float(level) < 1:
        raise ValueError(f"level must lie strictly between 0 and 1 (e.g. 0.95); got {level!r}")
    return out


def dose_response(measure: Callable[[float], Sequence[float]], alphas: Sequence[float], level: float = 0.95) -> pd.DataFrame:
    """A table with one row per strength: alpha, metric (the mean), low, high, n, level, note. `alphas` are finite
    numbers, `level` lies in (0, 1); anything else is one sentence before `measure` is called.

    Args:
        measure: measure(alpha) -> one finite value per prompt or unit (e.g. a metric of generated text).
        alphas: the strengths.
        level: the intervals' level.

    Example::

        table = dose_response(lambda a: [a * 2 + x for x in (0.1, -0.1, 0.0)], [0, 1, 2])
        table[["alpha", "metric", "low", "high", "n"]]
    """
    import pandas as pd

    alphas = check_strengths(alphas, level)
    rows = []
    if not callable(measure):
        raise TypeError(f"measure must be a function of the strength returning one value per unit, not "
                        f"{type(measure).__name__}")
    for a in alphas:
        got = measure(float(a))
        if got is None or isinstance(got, (str, bytes, dict)):
            raise TypeError(f"measure({a}) returned {type(got).__name__}: it must return a list or array of numbers "
                            "(one per prompt or unit)")
        try:
            arr = np.asarray(got.detach().float().cpu() if hasattr(got, "detach") else got, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise TypeError(f"measure({a}) returned {type(got).__name__}, not a list or array of numbers") from None
        if arr.size == 0:
            raise ValueError(f"measure({a}) returned no values: it must return one value per prompt or unit")
        if not np.isfinite(arr).all():
            raise ValueError(f"measure({a}) returned NaN or inf for {int((~np.isfinite(arr)).sum())} of {arr.size} "
                             "units: a mean with an interval needs finite values")
        values = [float(x) for x in arr]
        mean, lo, hi, n = mean_interval(values, level)
        rows.append({"alpha": float(a), "metric": mean, "low": lo, "high": hi, "n": n, "level": level,
                     "note": "" if n >= 2 else f"n = {n}, no interval"})
    return pd.DataFrame(rows, columns=["alpha", "metric", "low", "high", "n", "level", "note"])


def logit_dose_response(rt: Any, inputs: Any, name: str, direction: Any, alphas: Sequence[float],
                        metric: Callable[..., Any], positions: Any = None, level: float = 0.95) -> pd.DataFrame:
    """`dose_response` of `metric(logits)` (one value per prompt) with `alpha * direction` added at hook `name`
    at `positions` (hooks.steer.add_direction): one teacher-forced pass of every prompt per strength."""
    from hooks.steer import add_direction

    if not isinstance(name, str):
        raise TypeError(f"name must be one hook name (a string), not {type(name).__name__}")
    rt.check_names([name])
    if isinstance(positions, str) and positions == "generated":
        raise ValueError("positions='generated' steers tokens a model generates, and a dose-response is one teacher-forced "
                         "forward with none: give 'prompt', None (every position), a slice or token indices")
    try:
        if isinstance(direction, (str, bytes)):
            raise TypeError
        vec = np.asarray(direction.detach().cpu() if hasattr(direction, "detach") else direction, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(f"direction must be a vector of d_model = {rt.info.d_model} numbers, not "
                        f"{type(direction).__name__}") from None
    if vec.shape != (rt.info.d_model,):
        raise ValueError(f"the direction must have d_model = {rt.info.d_model} entries, not shape {vec.shape}")
    if not np.all(np.isfinite(vec)):
        raise ValueError("the direction holds NaN or inf: every entry must be a finite number")

    def measure(alpha: float) -> Sequence[float]:
        hooks = [(name, add_direction(alpha * vec, positions))] if alpha else []
        out = metric(rt.forward(inputs, hooks=hooks))
        out = np.asarray(out.detach().float().cpu() if hasattr(out, "detach") else out, dtype=np.float64)
        if out.ndim != 1:
            raise ValueError(f"the metric must return one value per prompt, got shape {out.shape}")
        return out

    return dose_response(measure, alphas, level)


def plot_dose_response(table: pd.DataFrame, ax: Any = None, label: str | None = None, ylabel: str | None = None) -> Figure:
    """The table as a line with its intervals (error bars) and n (in the legend when every row has the same n,
    else beside each point); rows without an interval are drawn hollow and say so in the legend. A dashed line
    marks the unsteered value. Call again with `ax=` to overlay another table. Returns the Figure.

    Args:
        table: what `dose_response` returns (alpha, metric, low, high, n, level).
        ax: a matplotlib Axes to draw on (default: a new Figure).
        label: the line's label in the legend.
        ylabel: the y axis's label.

    Example::

        fig = plot_dose_response(dose_response(lambda a: [a + 0.1, a - 0.1, a], [0, 1, 2]), label="toy")
    """
    import pandas as pd

    need = ("alpha", "metric", "low", "high", "n", "level")
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"table must be the DataFrame dose_response returns, not {type(table).__name__}")
    missing = [c for c in need if c not in table.columns]
    if missing or table.empty:
        raise ValueError(f"table lacks the columns {missing} of a dose-response table ({', '.join(need)})" if missing
                         else "table has no rows: nothing to draw")
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(6, 4))  # no pyplot: no global figure state, any backend (a notebook shows it inline)
        ax = fig.subplots()
        ax.set_ylabel(ylabel or "metric")
    else:
        fig = ax.figure
        if ylabel:
            ax.set_ylabel(ylabel)
    t = table.sort_values("alpha")
    has = t["low"].notna()
    ns = sorted(set(int(n) for n in t["n"]))
    level = int(round(100 * float(t["level"].iloc[0])))
    text = ", ".join(x for x in (label, f"{level}% CI" if has.any() else "", f"n = {ns[0]}" if len(ns) == 1 else "") if x)
    line = ax.plot(t["alpha"], t["metric"], "-", label=text or None)[0]
    color = line.get_color()
    if has.any():
        sub = t[has]
        ax.errorbar(sub["alpha"], sub["metric"], yerr=[sub["metric"] - sub["low"], sub["high"] - sub["metric"]],
                    fmt="o", color=color, capsize=3)
    if (~has).any():
        sub = t[~has]
        ax.plot(sub["alpha"], sub["metric"], "o", mfc="none", color=color, label="no interval (n < 2)")
    if len(ns) > 1:
        for a, m, n in zip(t["alpha"], t["metric"], t["n"]):
            ax.annotate(f"n={n}", (a, m), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    zero = t["alpha"].abs().idxmin()
    if not any(getattr(x, "get_label", lambda: "")() in ("unsteered", "weakest strength") for x in ax.lines):
        ax.axhline(float(t.loc[zero, "metric"]), color="grey", lw=0.8, ls="--",
                   label="unsteered" if float(t.loc[zero, "alpha"]) == 0 else "weakest strength")
    ax.set_xlabel("steering strength alpha")
    ax.legend(fontsize=8)
    return fig


__all__ = ["dose_response", "logit_dose_response", "mean_interval", "plot_dose_response"]
