"""The paper's two DINO appendix analyses on a run directory: concept consistency (E.2) and the entropy confound (E.3).

Inputs: `RUN/generations.jsonl` (attempts, with their logged per-token entropy) and the render store
`RUN/renders/` (pixels, outcome, triviality, background; `consistency_stage` renders what is missing
first, as the probe stage does). The analysis set of a (model, arm) is every attempt of the
task (layout by default) whose render is valid (`outcome == "ok"`) and non-trivial, as the paper's
"valid, non-trivial generations"; greedy and sampled attempts alike. An arm is the generation
protocol, prefixed by the medium when it is not the paper's canvas (`AttemptKey.arm`); each (model,
arm) is analysed on its own, and the entropy confound is fitted across the models of one arm.

- `dino_consistency(run, dino, settings)`: per (model, arm) and tier (`all`, `T1`, `T2`, `T3`):
  d_intra, d_inter, ratio, silhouette (CLS embeddings, cosine) and the foreground-masked
  local-structure distance (last-layer patch-key self-similarity), over the prompts with at least
  `min_attempts` (2) such renders; plus a 2-D map of all its renders (definitions:
  `interp.consistency`; preprocessing: `interp.dino`).
- `entropy_confound(run, rows, settings)`: per arm, Spearman rho between each model's mean per-token
  entropy (the mean over the analysis set of each attempt's `mean_entropy`, so both numbers describe
  the same generations) and its local-structure distance (tier `all`), the OLS line across models and
  each model's residual (observed - fitted); fewer than 3 models give None with a note.
- `plot_consistency(run, rows)`: `RUN/consistency/map-<model>-<arm>.png` (colour = subcategory,
  marker = tier) and `RUN/consistency/entropy-<arm>.png`.
- `consistency_stage(run, dino_folder, settings)`: all of the above, rows to `RUN/consistency.jsonl`
  (one `settings` row first: the DINO checkpoint's identity and digest, the settings, the counts).

`run` is a run directory path or a `RunDir`; the first three only read it, the last two write (under
the run's lock: the caller's when it holds it, else their own).

Nothing here is random except the map's layout, seeded by `settings.seed` (recorded in its row).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from bench.layout.prompts import SUBCATEGORIES, by_id
from bench.layout.prompts import TIERS as TIER_NAMES
from experiments.rundir import AttemptKey, RunDir, RunError, reading, safe_name, writing
from experiments.stages.render import read_renders, render_stage, row_key

if TYPE_CHECKING:
    from interp.dino import Dino

CONSISTENCY = RunDir.CONSISTENCY
CONSISTENCY_PLOTS = RunDir.CONSISTENCY_PLOTS
TIERS = tuple(TIER_NAMES)  #: T1, T2, T3
#: the paper's appendix E.3 (8 models, layout, canvas): the numbers our rows are read beside
PAPER = {"rho": 0.93, "p": "< 0.001", "n_models": 8, "residual": {"Gemma 2 27B": -0.014, "CodeLlama 34B": 0.013}}
DIGITS = 6


@dataclass(frozen=True)
class ConsistencySettings:
    """How the DINO consistency analyses run; nothing but the map's layout is random."""

    task: str = "layout"  #: the task whose renders are analysed (the paper: layout)
    models: tuple[str, ...] | None = None  #: only these models (None: every model in the run)
    arms: tuple[str, ...] | None = None  #: only these arms, e.g. "few-shot-2" or "svg/few-shot-2" (None: all)
    min_attempts: int = 2  #: valid non-trivial renders a prompt needs to enter the coherence and local numbers
    projection: str = "umap"  #: the 2-D map: "umap" (umap-learn, as the paper) or "tsne" (scikit-learn)
    neighbors: int = 15  #: UMAP's n_neighbors (shrunk when a model has fewer renders)
    seed: int = 0  #: the map's random state
    batch_size: int = 32  #: renders per DINO forward pass
    device: str = "cpu"  #: torch device of the DINO model

    def __post_init__(self) -> None:
        if self.projection not in ("umap", "tsne"):
            raise RunError(f"unknown projection {self.projection!r}: use umap or tsne")
        if self.min_attempts < 2 or self.batch_size < 1 or self.neighbors < 2:
            raise RunError("min attempts must be >= 2 (a prompt needs an attempt pair), batch size >= 1, neighbors >= 2")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Render:
    key: AttemptKey
    tier: str
    subcategory: str
    pixels: np.ndarray
    background: np.ndarray
    mean_entropy: float | None


def _mean_entropy(row: dict[str, Any]) -> float | None:
    v = row.get("mean_entropy")
    if isinstance(v, (int, float)) and np.isfinite(v):
        return float(v)
    ent = row.get("entropy")
    if isinstance(ent, list) and ent and all(isinstance(e, (int, float)) for e in ent):
        return float(np.mean(ent))
    return None


def analysis_set(run: Any, s: ConsistencySettings = ConsistencySettings()
                 ) -> tuple[dict[tuple[str, str], list[_Render]], dict[str, int]]:
    """(model, arm) -> its valid, non-trivial renders of the task, in file order; and the counts of
    attempts left out (invalid, trivial, not rendered). Read-only."""
    rd = reading(run)
    if not rd.file(RunDir.GENERATIONS).is_file():
        raise RunError(f"{rd.path} has no {RunDir.GENERATIONS}: run `ambench generate --task {s.task} --out {rd.path}` first")
    if not rd.file(RunDir.RENDERS).is_dir():
        raise RunError(f"{rd.path} has no renders: run `ambench renders --run {rd.path}` first")
    meta = by_id() if s.task == "layout" else {}
    renders = read_renders(rd)
    groups: dict[tuple[str, str], list[_Render]] = {}
    counts = {"attempts": 0, "invalid": 0, "trivial": 0, "not_rendered": 0, "used": 0}
    for r in rd.rows(RunDir.GENERATIONS):
        if r.get("task") != s.task:
            continue
        try:
            key = AttemptKey.of(r)
        except (KeyError, TypeError, ValueError):
            raise RunError(f"{rd.file(RunDir.GENERATIONS)} has a {s.task} row without the attempt fields (model, protocol, "
                           "prompt_id, sample); the file was edited or corrupted") from None
        if (s.models and key.model not in s.models) or (s.arms and key.arm not in s.arms):
            continue
        counts["attempts"] += 1
        x = renders.get(row_key(r))
        if x is None:
            counts["not_rendered"] += 1
            continue
        if x["outcome"] != "ok":
            counts["invalid"] += 1
            continue
        if x["trivial"]:
            counts["trivial"] += 1
            continue
        counts["used"] += 1
        p = meta.get(key.prompt_id)
        groups.setdefault((key.model, key.arm), []).append(
            _Render(key, p.tier if p else "?", p.subcategory if p else "?", x["pixels"], x["background"], _mean_entropy(r)))
    return groups, counts


def _r(v: float | None) -> float | None:
    return None if v is None else round(float(v), DIGITS)


def _chunks(prompts: list[list[int]], batch: int) -> Iterable[list[list[int]]]:
    """Consecutive prompt groups packed into forward passes of about `batch` renders (a prompt is never split)."""
    cur: list[list[int]] = []
    size = 0
    for g in prompts:
        if cur and size + len(g) > batch:
            yield cur
            cur, size = [], 0
        cur.append(g)
        size += len(g)
    if cur:
        yield cur


def _model_rows(model: str, arm: str, items: list[_Render], dino: "Dino", s: ConsistencySettings,
                digest: str) -> list[dict[str, Any]]:
    from interp.consistency import foreground, local_distances, project_2d, prompt_coherence

    by_prompt: dict[str, list[int]] = {}
    for i, it in enumerate(items):
        by_prompt.setdefault(it.key.prompt_id, []).append(i)
    groups = list(by_prompt.values())
    cls = np.zeros((len(items), dino.info.hidden_size), np.float32)
    local: dict[str, tuple[float, int]] = {}  # prompt -> (mean d_loc over its pairs, pairs)
    for chunk in _chunks(groups, s.batch_size):
        idx = [i for g in chunk for i in g]
        c, keys = dino.embed(np.stack([items[i].pixels for i in idx]), batch_size=s.batch_size)
        cls[idx] = c
        at = {i: j for j, i in enumerate(idx)}
        for g in chunk:
            if len(g) < s.min_attempts:
                continue
            fg = np.stack([foreground(items[i].pixels, items[i].background) for i in g])
            d = local_distances(keys[[at[i] for i in g]], fg)
            if d:
                local[items[g[0]].key.prompt_id] = (float(np.mean(d)), len(d))
    kept = {pid: g for pid, g in by_prompt.items() if len(g) >= s.min_attempts}
    rows = []
    for tier in ("all",) + TIERS:
        pids = [p for p in kept if tier == "all" or items[kept[p][0]].tier == tier]
        if tier != "all" and not any(it.tier == tier for it in items):
            continue
        idx = [i for p in pids for i in kept[p]]
        coh = prompt_coherence(cls[idx], [items[i].key.prompt_id for i in idx])
        loc = [local[p] for p in pids if p in local]
        dropped = len({it.key.prompt_id for it in items if tier == "all" or it.tier == tier}) - len(pids)
        rows.append({
            "kind": "coherence", "task": s.task, "model": model, "arm": arm, "tier": tier,
            "n_renders": coh["n_renders"], "n_prompts": coh["n_prompts"], "prompts_dropped": dropped,
            "d_intra": _r(coh["d_intra"]), "d_inter": _r(coh["d_inter"]), "ratio": _r(coh["ratio"]),
            "silhouette": _r(coh["silhouette"]),
            "local_distance": _r(np.mean([v for v, _ in loc])) if loc else None,
            "local_prompts": len(loc), "local_pairs": int(sum(n for _, n in loc)), "dino": digest,
        })
    m: dict[str, Any] = {"kind": "map", "task": s.task, "model": model, "arm": arm, "projection": s.projection,
                         "seed": s.seed, "neighbors": s.neighbors, "n_renders": len(items), "dino": digest}
    if len(items) >= 4:
        xy = project_2d(cls, s.projection, s.seed, s.neighbors)
        m.update(points=[[round(float(a), 4), round(float(b), 4)] for a, b in xy],
                 prompt_ids=[it.key.prompt_id for it in items], samples=[it.key.sample for it in items],
                 tiers=[it.tier for it in items], subcategories=[it.subcategory for it in items], note=None)
    else:
        m.update(points=None, note=f"a map needs at least 4 renders (has {len(items)})")
    rows.append(m)
    return rows


def dino_consistency(run: Any, dino: "Dino", s: ConsistencySettings = ConsistencySettings()) -> list[dict[str, Any]]:
    """Concept consistency (appendix E.2) of every (model, arm) of the run: `coherence` rows per tier
    and one `map` row each (module docstring); (model, arm) pairs without renders get a `skipped` row."""
    groups, _ = analysis_set(run, s)
    rows: list[dict[str, Any]] = []
    for (model, arm) in sorted(groups):
        rows += _model_rows(model, arm, groups[(model, arm)], dino, s, dino.info.digest)
    for model in sorted(set(s.models or ()) - {m for m, _ in groups}):
        rows.append({"kind": "skipped", "task": s.task, "model": model, "arm": None,
                     "reason": f"no valid, non-trivial {s.task} renders of {model} in the run"})
    return rows


def entropy_confound(run: Any, rows: list[dict[str, Any]] | None = None,
                     s: ConsistencySettings = ConsistencySettings()) -> list[dict[str, Any]]:
    """The entropy confound (appendix E.3) per arm: one `entropy` row per model (mean entropy, local
    distance, fitted, residual) and one `confound` row (rho, p, the line, a note when it cannot be fitted).

    `rows` are `dino_consistency`'s (read from RUN/consistency.jsonl when None). The entropy is taken
    over the same renders as the local distance: valid, non-trivial, of prompts with >= min_attempts."""
    from interp.consistency import entropy_fit

    rd = reading(run)
    if rows is None:
        if not rd.file(CONSISTENCY).is_file():
            raise RunError(f"{rd.path} has no {CONSISTENCY}: run `ambench consistency --run {rd.path} --dino-folder DIR` first")
        rows = rd.rows(CONSISTENCY)
    local = {(r["model"], r["arm"]): r for r in rows if r.get("kind") == "coherence" and r.get("tier") == "all"
             and r.get("task", s.task) == s.task}
    groups, _ = analysis_set(rd, s)
    out: list[dict[str, Any]] = []
    for arm in sorted({a for _, a in local}):
        per = []
        for (model, a), r in sorted(local.items()):
            if a != arm:
                continue
            items = groups.get((model, arm), [])
            n_by = {}
            for it in items:
                n_by[it.key.prompt_id] = n_by.get(it.key.prompt_id, 0) + 1
            ent = [it.mean_entropy for it in items if n_by[it.key.prompt_id] >= s.min_attempts]
            have = [e for e in ent if e is not None]
            per.append({"kind": "entropy", "task": s.task, "model": model, "arm": arm,
                        "mean_entropy": _r(np.mean(have)) if have else None, "entropy_attempts": len(have),
                        "entropy_missing": len(ent) - len(have), "local_distance": r.get("local_distance"),
                        "fitted": None, "residual": None})
        usable = [p for p in per if p["mean_entropy"] is not None and p["local_distance"] is not None]
        fit = entropy_fit([p["mean_entropy"] for p in usable], [p["local_distance"] for p in usable])
        for p, f, res in zip(usable, fit["fitted"], fit["residual"]):
            p["fitted"], p["residual"] = _r(f), _r(res)
        left_out = sorted(p["model"] for p in per if p not in usable)
        note = fit["note"]
        if left_out:
            extra = f"left out for lack of an entropy or a local distance: {', '.join(left_out)}"
            note = f"{note}; {extra}" if note else extra
        out += per
        out.append({"kind": "confound", "task": s.task, "arm": arm, "n_models": fit["n_models"],
                    "models": [p["model"] for p in usable], "rho": _r(fit["rho"]), "p": _r(fit["p"]),
                    "p_method": fit["p_method"], "slope": _r(fit["slope"]), "intercept": _r(fit["intercept"]),
                    "regression": "OLS of local_distance on mean_entropy across models; residual = observed - fitted",
                    "note": note, "paper": PAPER})
    return out


MARKERS = {"T1": "o", "T2": "s", "T3": "^", "?": "x"}


def plot_consistency(run: Any, rows: list[dict[str, Any]]) -> list[Path]:
    """The maps (one per model and arm) and the entropy scatter (one per arm) as PNGs under RUN/consistency/."""
    with writing(run) as rd:
        return _plot(rd, rows)


def _plot(rd: RunDir, rows: list[dict[str, Any]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    out = []
    cmap = plt.get_cmap("tab20")
    colour = {sc: cmap(i % 20) for i, sc in enumerate(SUBCATEGORIES)}
    colour["?"] = (0.4, 0.4, 0.4, 1.0)
    for m in rows:
        if m.get("kind") != "map" or not m.get("points"):
            continue
        xy = np.asarray(m["points"], dtype=float)
        fig, ax = plt.subplots(figsize=(8.5, 6), dpi=110)
        for tier in sorted(set(m["tiers"])):
            for sc in sorted(set(m["subcategories"])):
                sel = [i for i, (t, c) in enumerate(zip(m["tiers"], m["subcategories"])) if t == tier and c == sc]
                if sel:
                    ax.scatter(xy[sel, 0], xy[sel, 1], s=14, marker=MARKERS.get(tier, "x"), color=colour.get(sc, colour["?"]),
                               alpha=0.8, linewidths=0.3, edgecolors="black")
        handles = [Line2D([], [], ls="none", marker="o", color=colour.get(sc, colour["?"]),
                          label=f"{sc} {SUBCATEGORIES.get(sc, 'unknown prompt')}") for sc in sorted(set(m["subcategories"]))]
        handles += [Line2D([], [], ls="none", marker=MARKERS.get(t, "x"), color="black", mfc="none", label=t)
                    for t in sorted(set(m["tiers"]))]
        ax.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
        ax.set_title(f"DINO embedding map: {m['model']} ({m['arm']}), {m['n_renders']} valid non-trivial renders\n"
                     f"{m['projection'].upper()} (cosine, seed {m['seed']}); colour = subcategory, marker = tier", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        fig.tight_layout()
        out.append(rd.save_figure(fig, f"{CONSISTENCY_PLOTS}/map-{safe_name(m['model'])}-{safe_name(m['arm'])}.png"))
        plt.close(fig)
    for c in rows:
        if c.get("kind") != "confound":
            continue
        pts = [r for r in rows if r.get("kind") == "entropy" and r["arm"] == c["arm"] and r["model"] in c["models"]]
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(6.5, 4.5), dpi=110)
        x = np.array([r["mean_entropy"] for r in pts])
        y = np.array([r["local_distance"] for r in pts])
        ax.scatter(x, y, color="tab:blue")
        for r in pts:
            ax.annotate(r["model"], (r["mean_entropy"], r["local_distance"]), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
        if c["slope"] is not None:
            xs = np.linspace(x.min(), x.max(), 2)
            ax.plot(xs, c["intercept"] + c["slope"] * xs, ls="--", color="gray", label="OLS fit across models")
            ax.legend(fontsize=7)
        rho = "n/a" if c["rho"] is None else f"{c['rho']:.2f} (p = {c['p']:.3g})"
        ax.set_title(f"entropy confound ({c['arm']}): Spearman rho = {rho}; paper: {PAPER['rho']}", fontsize=9)
        ax.set_xlabel("mean per-token entropy (nats)")
        ax.set_ylabel("local-structure distance (DINO keys)")
        fig.tight_layout()
        out.append(rd.save_figure(fig, f"{CONSISTENCY_PLOTS}/entropy-{safe_name(c['arm'])}.png"))
        plt.close(fig)
    return out


def consistency_stage(run: Any, dino_folder: str | Path, s: ConsistencySettings = ConsistencySettings(),
                      dino: "Dino | None" = None) -> dict[str, Any]:
    """Both analyses: renders what is missing, then rows to RUN/consistency.jsonl (replaced whole,
    atomically) and plots under RUN/consistency/; returns {rows, plots, counts}. `dino` skips loading (a
    caller that already holds the model); `interp.dino.DinoError` reports a bad folder."""
    from interp.dino import load_dino

    with writing(run) as rd:
        if not rd.file(RunDir.GENERATIONS).is_file():
            raise RunError(f"{rd.path} has no {RunDir.GENERATIONS}: run `ambench generate --task {s.task} --out {rd.path}` first")
        dino = dino or load_dino(dino_folder, s.device)  # a bad folder fails before any rendering
        render_stage(rd)  # a no-op when every attempt has its current render
        rows = dino_consistency(rd, dino, s)
        rows += entropy_confound(rd, rows, s)
        _, counts = analysis_set(rd, s)
        head = {"kind": "settings", "task": s.task, "settings": s.as_dict(), "dino": dino.info.as_dict(), "counts": counts,
                "paper": PAPER}
        all_rows = [head] + rows
        rd.write_rows(CONSISTENCY, all_rows)
        plots = _plot(rd, all_rows)
    return {"rows": all_rows, "plots": plots, "counts": counts}


def format_summary(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of the coherence rows and the confound, for the CLI."""
    def f(v: Any, w: int = 8) -> str:
        return f"{'-':>{w}}" if v is None else f"{v:>{w}.4f}"

    lines = [f"{'model':<28} {'arm':<18} {'tier':<4} {'renders':>7} {'prompts':>7} {'d_intra':>8} {'d_inter':>8} "
             f"{'ratio':>8} {'silh.':>8} {'local':>8}"]
    for r in rows:
        if r.get("kind") == "coherence":
            lines.append(f"{r['model'][:28]:<28} {r['arm'][:18]:<18} {r['tier']:<4} {r['n_renders']:>7} {r['n_prompts']:>7} "
                         f"{f(r['d_intra'])} {f(r['d_inter'])} {f(r['ratio'])} {f(r['silhouette'])} {f(r['local_distance'])}")
        elif r.get("kind") == "skipped":
            lines.append(f"{r['model'][:28]:<28} skipped: {r['reason']}")
    for c in [r for r in rows if r.get("kind") == "confound"]:
        lines.append("")
        rho = "n/a" if c["rho"] is None else f"{c['rho']:.3f} (p = {c['p']:.3g}, {c['p_method']})"
        lines.append(f"entropy confound, arm {c['arm']}: {c['n_models']} models, Spearman rho = {rho}; "
                     f"paper: rho = {PAPER['rho']} over {PAPER['n_models']} models")
        for r in rows:
            if r.get("kind") == "entropy" and r["arm"] == c["arm"]:
                lines.append(f"  {r['model'][:28]:<28} mean entropy {f(r['mean_entropy'])}  local {f(r['local_distance'])}"
                             f"  residual {'-' if r['residual'] is None else format(r['residual'], '+.4f')}")
        if c["note"]:
            lines.append(f"  note: {c['note']}")
    lines.append("paper residuals: " + ", ".join(f"{k} {v:+.3f}" for k, v in PAPER["residual"].items()))
    return "\n".join(lines)
