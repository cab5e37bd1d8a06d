"""A probe sweep as a table and its plot: R^2 with its interval at every (layer, position), from Python.

`probe_sweep(acts, y, texts=...)` fits the study's nested-CV probe (standardise -> PCA -> ridge, k and alpha chosen
inside the folds: `interp.probes.LayerSweep`) at every layer and token position of captured activations and returns
a pandas DataFrame, one row per (position, layer):

    position, layer, n, r2, r2_mean, lo, hi, se, k, alpha, text_r2, text_lo, text_hi, delta, delta_lo, delta_hi

- `r2`: the outer pooled R^2 of the study's own partition (what the paper reports and `ambench probe` writes);
- `r2_mean`, `lo`, `hi`, `se`: the documented interval (interp/intervals.py: Nadeau-Bengio corrected K-fold
  variance, its estimand the expected R^2 of the procedure trained on (K-1)/K of the prompts), centred on the mean
  over `repeats` partitions; `hi` is clipped at 1 (no R^2 exceeds 1);
- `k`, `alpha`: the PCA size and ridge penalty chosen inside each outer fold (tuples, one per fold);
- `text_*`: the text baseline (TF-IDF of `texts`, or any `baseline` features) on the same folds, and `delta*`
  = R^2 - text R^2 with the paired interval of `interp.intervals.delta_interval`.
`table.attrs` records n, the seed, the grid, the repeats and the ceiling (when given).

`plot_sweep(table)` draws it on a matplotlib Figure (or given Axes): one line per position with its interval as a
band, the text baseline dashed with its band, the reliability ceiling dotted, 0 as a thin line. The report's probe
figures (`experiments/stages/probe.py`) and the notebooks call this same function.

The bug this prevents: every user wrote the same "sweep every layer, compute the interval from the source, plot
it" loop by hand, read the undocumented fold list off the sweep, and drew R^2 without its uncertainty; the plot of
the report was reachable only through a run directory.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from interp.intervals import DEFAULT_REPEATS, cluster_sums, delta_interval, fold_sums, r2_interval, repeat_seed
from interp.probes import Grid, LayerSweep, tfidf_features

COLUMNS = ("position", "layer", "n", "r2", "r2_mean", "lo", "hi", "se", "k", "alpha", "text_r2", "text_lo", "text_hi",
           "delta", "delta_lo", "delta_hi")


def _positions(acts: Any, positions: Sequence[Any] | None) -> dict[Any, list[np.ndarray]]:
    """position name -> per-layer feature matrices [n, d], from [n, layers, d], [n, layers, positions, d] (what
    `Runtime.capture` returns) or a mapping position -> [n, layers, d] (or a list of [n, d] per layer)."""
    if isinstance(acts, Mapping):
        out = {}
        for pos, a in acts.items():
            layers = [np.asarray(x) for x in a] if isinstance(a, (list, tuple)) else list(np.moveaxis(np.asarray(a), 1, 0))
            out[pos] = layers
        return out
    a = np.asarray(acts.detach().cpu().float() if hasattr(acts, "detach") else acts)
    if a.ndim == 3:
        a = a[:, :, None, :]
    if a.ndim != 4:
        raise ValueError(f"activations of shape {a.shape}: expected [prompts, layers, d_model] or "
                         "[prompts, layers, positions, d_model]")
    names = list(positions) if positions is not None else list(range(a.shape[2]))
    if len(names) != a.shape[2]:
        raise ValueError(f"{len(names)} position names for {a.shape[2]} positions")
    return {p: [a[:, li, pi, :] for li in range(a.shape[1])] for pi, p in enumerate(names)}


def probe_sweep(acts: Any, y: Any, *, texts: Sequence[str] | None = None, baseline: Any = None,
                positions: Sequence[Any] | None = None, layers: Sequence[Any] | None = None, grid: Grid = Grid(),
                seed: int = 0, repeats: int = DEFAULT_REPEATS, ceiling: float | None = None, level: float = 0.95,
                groups: Sequence[Any] | None = None) -> Any:
    """R^2 of the nested-CV probe at every (position, layer), with its interval, as a pandas DataFrame (the columns:
    this module's docstring).

    acts: [prompts, layers, d_model], [prompts, layers, positions, d_model] (`Runtime.capture`'s output, a tensor
    or an array) or {position: [prompts, layers, d_model]}; y: targets [prompts, outputs] (or [prompts]);
    texts: the prompts' texts, for the TF-IDF baseline; baseline: other baseline features [prompts, d] instead;
    positions / layers: names for the positions and layers (default: their indices); repeats: partitions of the
    repeated cross-validation behind the interval (the first, seeded `seed`, gives `r2`); ceiling: the target's
    reliability ceiling (e.g. `interp.probes.split_half_ceiling`), kept in `table.attrs` for the plot;
    groups: one label per prompt (e.g. a layout prompt's subcategory) when prompts come in families: folds, outer
    and inner, then keep a group's prompts together and the interval's variance is the groups' (interp/intervals.py,
    `cluster_sums`), so the estimand is the R^2 on new prompts of *new* groups (docs/probes.md, issue 28). Without
    it the prompts are taken as exchangeable, which overstates R^2 and narrows its interval when they are not.
    Every fold and choice is seeded by `seed` (recorded in `table.attrs`), so the same call gives the same table.

    Example::

        acts = rt.capture(tokens, [[p.positions["last"]] for p in built])   # [prompts, sites, 1, d_model]
        table = probe_sweep(acts, y, texts=[it.text for it in items], positions=["last"])
        table[["layer", "r2", "lo", "hi", "text_r2"]]
        plot_sweep(table)
    """
    import pandas as pd

    y = np.asarray(y, dtype=np.float64)
    if y.ndim == 1:
        y = y[:, None]
    feats = _positions(acts, positions)
    n = y.shape[0]
    for pos, xs in feats.items():
        if any(x.shape[0] != n for x in xs):
            raise ValueError(f"position {pos!r}: {xs[0].shape[0]} prompts of activations for {n} targets")
    if texts is not None and baseline is not None:
        raise ValueError("give the text baseline as texts or as baseline features, not both")
    if texts is not None:
        if len(texts) != n:
            raise ValueError(f"{len(texts)} texts for {n} targets")
        baseline = tfidf_features(list(texts))
    base = None if baseline is None else np.asarray(baseline, dtype=np.float64)
    n_layers = len(next(iter(feats.values())))
    names = list(layers) if layers is not None else list(range(n_layers))
    if len(names) != n_layers:
        raise ValueError(f"{len(names)} layer names for {n_layers} layers")
    repeats = max(1, int(repeats))
    g = None
    dsg = None
    if groups is not None:
        from interp.grouping import MIN_GROUPS, design

        g = np.asarray(list(groups))
        if g.shape[0] != n:
            raise ValueError(f"{g.shape[0]} group labels for {n} targets")
        dsg = design(g, grid)
        if dsg.groups is None:
            raise ValueError(f"{np.unique(g).size} prompt groups: a grouped probe needs at least {MIN_GROUPS} (with fewer "
                             "no fold can hold out a group and leave enough to choose on); give no groups to take the "
                             "prompts as independent")
        grid = dsg.grid  # outer and inner folds no more than the groups can fill
    folds_k = None if g is None else grid.outer

    def sums(pred: np.ndarray, folds: Any) -> tuple[np.ndarray, np.ndarray]:
        return fold_sums(y, pred, folds) if g is None else cluster_sums(y, pred, g)

    sse: dict[Any, list[np.ndarray]] = {}  # (position, layer) or "text" -> per partition, the folds' SSE
    sst: list[np.ndarray] = []
    first: dict[Any, Any] = {}  # the first partition's results (the reported R^2 and choices)
    ratio = 0.0
    for j in range(repeats):
        s = repeat_seed(seed, j)
        outer = None
        for pos, xs in feats.items():
            sw = LayerSweep(xs, grid, s, groups=g)
            outer = sw.outer
            for li in range(n_layers):
                res = sw.layer(y, li)
                a, b = sums(res.pred, outer)
                sse.setdefault((pos, li), []).append(a)
                if j == 0:
                    first[(pos, li)] = res
        assert outer is not None
        a, b = sums(np.broadcast_to(y.mean(axis=0), y.shape), outer)
        sst.append(b)
        if base is not None:
            res = LayerSweep([base], grid.with_full(), s, folds=outer, groups=g).layer(y, 0)
            sse.setdefault("text", []).append(sums(res.pred, outer)[0])
            if j == 0:
                first["text"] = res
        ratio = float(np.mean([len(te) for _, te in outer]) / np.mean([len(tr) for tr, _ in outer]))
    st = np.stack(sst)
    text_iv = r2_interval(np.stack(sse["text"]), st, n, ratio, level, folds=folds_k) if base is not None else None
    rows = []
    nan = float("nan")
    for pos in feats:
        for li in range(n_layers):
            res = first[(pos, li)]
            iv = r2_interval(np.stack(sse[(pos, li)]), st, n, ratio, level, folds=folds_k)
            row = {"position": pos, "layer": names[li], "n": n, "r2": float(res.r2), "r2_mean": iv.value, "lo": iv.lo,
                   "hi": iv.hi, "se": iv.se, "k": tuple(c["k"] for c in res.chosen),
                   "alpha": tuple(c["alpha"] for c in res.chosen), "text_r2": nan, "text_lo": nan, "text_hi": nan,
                   "delta": nan, "delta_lo": nan, "delta_hi": nan}
            if text_iv is not None:
                d = (dsg.delta_interval(np.stack(sse[(pos, li)]), np.stack(sse["text"]), st, n, ratio, level)
                     if dsg is not None else
                     delta_interval(np.stack(sse[(pos, li)]), np.stack(sse["text"]), st, n, ratio, level, folds=folds_k))
                row.update(text_r2=float(first["text"].r2), text_lo=text_iv.lo, text_hi=text_iv.hi,
                           delta=float(res.r2 - first["text"].r2), delta_lo=d.lo, delta_hi=d.hi)
            rows.append(row)
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table.attrs.update({"n": n, "seed": seed, "repeats": repeats, "level": level, "ceiling": ceiling,
                        "grid": {"pca": list(grid.pca), "alphas": list(grid.alphas), "outer": grid.outer,
                                 "inner": grid.inner},
                        "baseline": "tf-idf" if texts is not None else ("features" if base is not None else None),
                        "groups": None if g is None else int(np.unique(g).size),
                        "grouping": None if dsg is None else dsg.fields(),
                        "estimand": ("the expected R^2 of the probe procedure trained on (K-1)/K of the prompts"
                                     + ("" if g is None else ", on prompts of groups it was not trained on"))})
    return table


def plot_sweep(table: Any, ax: Any = None, *, ceiling: float | Mapping[str, float] | None = None,
               title: str | None = None, lines: Sequence[str] | None = None, xlabel: str | None = None) -> Any:
    """The per-layer R^2 of a sweep table with its interval as a band, the text baseline (dashed, with its band) and
    the ceiling (dotted); returns the matplotlib Figure (drawn on `ax` when given, else on a new 10 x 4.5 in one).

    table: `probe_sweep`'s DataFrame, or any with columns layer, r2, lo, hi (and text_r2, text_lo, text_hi,
    position, target when there are); lines: the columns that name one line (default: those of target and
    position that vary); ceiling: a value, or one per target (default: `table.attrs["ceiling"]`). Rows without a
    numeric layer are left out. Works with any matplotlib backend; nothing is saved or shown."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    t = table.copy()
    t = t[t["layer"].map(lambda v: isinstance(v, (int, np.integer)) and not isinstance(v, bool))]
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 4.5), dpi=110)
    else:
        fig = ax.figure
    if lines is None:
        lines = [c for c in ("target", "position") if c in t.columns and t[c].nunique() > 1] or \
                [c for c in ("position",) if c in t.columns]
    groups = t.groupby(list(lines), sort=True, dropna=False) if lines else [((), t)]
    for key, g in groups:
        g = g.sort_values("layer")
        key = key if isinstance(key, tuple) else (key,)
        label = ", ".join(str(k) for k in key) if key else "probe"
        xs = g["layer"].astype(int).to_numpy()
        (line,) = ax.plot(xs, g["r2"].astype(float), marker="o", ms=3, label=f"{label}")
        if {"lo", "hi"} <= set(g.columns):
            ax.fill_between(xs, g["lo"].astype(float), g["hi"].astype(float), color=line.get_color(), alpha=0.15, lw=0)
    targets = list(t["target"].unique()) if "target" in t.columns else [None]
    x0, x1 = ax.get_xlim()
    for tg in targets:
        sel = t if tg is None else t[t["target"] == tg]
        suffix = "" if tg is None or len(targets) == 1 else f" ({tg})"
        if "text_r2" in sel.columns and sel["text_r2"].notna().any():
            r = sel[sel["text_r2"].notna()].iloc[0]
            ax.axhline(float(r["text_r2"]), ls="--", color="gray", label=f"text baseline{suffix}")
            if {"text_lo", "text_hi"} <= set(sel.columns) and np.isfinite(float(r["text_lo"])):
                ax.fill_between([x0, x1], float(r["text_lo"]), float(r["text_hi"]), color="gray", alpha=0.1, lw=0)
    ceil = table.attrs.get("ceiling") if ceiling is None else ceiling
    items = ceil.items() if isinstance(ceil, Mapping) else ([(None, ceil)] if ceil is not None else [])
    for tg, v in items:
        if v is not None and np.isfinite(v):
            ax.axhline(float(v), ls=":", color="black", label="split-half ceiling" + (f" ({tg})" if tg else ""))
    ax.set_xlim(x0, x1)
    ax.axhline(0, color="black", lw=0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole numbers: no 0.5 ticks
    ax.set_xlabel(xlabel or "layer (0 = embeddings)")
    level = table.attrs.get("level", 0.95)
    ax.set_ylabel(f"outer pooled R² (nested CV), {round(100 * level)}% interval")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


__all__ = ["COLUMNS", "plot_sweep", "probe_sweep"]
