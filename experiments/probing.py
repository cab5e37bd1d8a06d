"""The probe stage: consensus targets from a run's renders, per-layer probes on its activations, controls.

For every model with `RUN/activations/<model>.h5`:
- targets: consensus occupancy over the model's valid, non-trivial attempts under the protocol the
  capture used (`min_attempts` or more, else the prompt is dropped and counted); split-half targets
  from even and odd attempts for the reliability ceiling;
- rows (`RUN/probes.jsonl`, one per model x target x features x layer x position):
  `features` = `resid` (layer 0 is the embedding-layer control) or `text` (TF-IDF of the prompt);
  `target` = `own`, `shared`, `specific` (with two or more models) or `model:<other>` (cross-model
  selectivity: this model's activations, another model's targets);
  `layer` = an index, or `best` (layer chosen inside the folds); r2 (outer pooled), ci (prompt
  bootstrap), p_perm and q (Benjamini-Hochberg over every resid row of the run), the chosen
  hyperparameters per outer fold, the seed.
- plots `RUN/probes/<model>.png`: R^2 per layer for each position with CI bands, the text baseline
  and the split-half ceiling; `RUN/probes/<model>-shared.png` for shared vs specific.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from experiments.generation import GENERATIONS, read_rows, safe_name
from experiments.render import read_renders, render_stage, row_key
from interp.probes import (Grid, benjamini_hochberg, bootstrap_ci, nested_cv, nested_cv_layers, occupancy,
                           permutation_test, split_half_ceiling, tfidf_features)
from interp.prompts import items_by_id

PROBES = "probes.jsonl"


class ProbeError(ValueError):
    """A run that cannot be probed as asked."""


@dataclass(frozen=True)
class ProbeSettings:
    min_attempts: int = 3
    n_perm: int = 20
    n_boot: int = 1000
    seed: int = 0
    pca: tuple[int, ...] = (4, 8, 16, 32, 64)
    alphas: tuple[float, ...] = tuple(float(a) for a in np.logspace(-2, 5, 15))
    outer: int = 5
    inner: int = 5

    @property
    def grid(self) -> Grid:
        return Grid(self.pca, self.alphas, self.outer, self.inner)


def consensus(run: Path, model: str, protocol: str, min_attempts: int) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """prompt id -> {own, half_a, half_b, n}; and counts of prompts kept and dropped."""
    renders = read_renders(run)
    per: dict[str, list[tuple[int, np.ndarray]]] = {}
    seen: set[str] = set()
    for r in read_rows(run / GENERATIONS):
        if r["model"] != model or r["protocol"] != protocol:
            continue
        seen.add(r["prompt_id"])
        x = renders.get(row_key(r))
        if x is None or x["outcome"] != "ok" or x["trivial"]:
            continue
        per.setdefault(r["prompt_id"], []).append((r["sample"], occupancy(x["pixels"], x["background"])))
    out = {}
    for pid, grids in per.items():
        if len(grids) < min_attempts:
            continue
        grids.sort(key=lambda t: t[0])
        g = np.stack([t[1] for t in grids])
        halves = (g[0::2].mean(axis=0).ravel(), g[1::2].mean(axis=0).ravel()) if len(grids) >= 2 else (None, None)
        out[pid] = {"own": g.mean(axis=0).ravel(), "half_a": halves[0], "half_b": halves[1], "n": len(grids)}
    return out, {"prompts_seen": len(seen), "kept": len(out), "dropped": len(seen) - len(out)}


def _row(model: str, target: str, features: str, layer: Any, position: str, y: np.ndarray, res: Any,
         s: ProbeSettings, n_perm_for: Callable[[], tuple[float, list[float]]] | None) -> dict[str, Any]:
    import warnings

    with warnings.catch_warnings():  # a target without variance (e.g. specific = 0) has no R^2: None
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = bootstrap_ci(y, res.pred, s.n_boot, s.seed)

    def num(v: float) -> float | None:
        return None if v != v else round(float(v), 6)

    row = {"model": model, "target": target, "features": features, "layer": layer, "position": position,
           "r2": num(res.r2), "ci": [num(lo), num(hi)], "n_prompts": int(y.shape[0]),
           "chosen": res.chosen, "seed": s.seed}
    if n_perm_for is not None:
        p, null = n_perm_for()
        row["p_perm"] = p
        row["null_mean"] = round(float(np.mean(null)), 6)
    return row


def probe_stage(run: Path, models: list[str] | None = None, s: ProbeSettings = ProbeSettings(),
                progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    from activations.store import ActivationStore

    files = sorted((run / "activations").glob("*.h5")) if (run / "activations").is_dir() else []
    if not files:
        raise ProbeError(f"{run} has no activations: run `ambench capture --out {run}` first")
    render_stage(run)
    stores = {}
    for f in files:
        st = ActivationStore(f)
        name = st.meta["model"]["name"]
        if models is None or name in models or safe_name(name) in models:
            stores[name] = st
    if not stores:
        raise ProbeError(f"none of {models} has activations in {run}")
    grid = s.grid
    rows: list[dict[str, Any]] = []
    targets: dict[str, dict[str, dict[str, Any]]] = {}
    for name, st in stores.items():
        cons, counts = consensus(run, name, st.meta["protocol"], s.min_attempts)
        targets[name] = cons
        if progress:
            progress(f"{name}: {counts['kept']} prompts with >= {s.min_attempts} valid non-trivial attempts "
                     f"({counts['dropped']} of {counts['prompts_seen']} dropped)")
        rows.append({"model": name, "kind": "targets", **counts, "min_attempts": s.min_attempts,
                     "protocol": st.meta["protocol"]})
    for name, st in stores.items():
        ids = [p for p in st.prompt_ids if p in targets[name]]
        if len(ids) < 2 * grid.outer:
            if progress:
                progress(f"{name}: only {len(ids)} prompts with targets and activations; "
                         f"{2 * grid.outer} needed for {grid.outer}-fold nested CV: no probes")
            rows.append({"model": name, "kind": "skipped", "reason": f"{len(ids)} prompts < {2 * grid.outer}"})
            continue
        index = [st.prompt_ids.index(p) for p in ids]
        y_own = np.stack([targets[name][p]["own"] for p in ids])
        two = [p for p in ids if targets[name][p]["half_b"] is not None]
        if len(two) >= 3:
            ceiling = split_half_ceiling(np.stack([targets[name][p]["half_a"] for p in two]),
                                         np.stack([targets[name][p]["half_b"] for p in two]))
            rows.append({"model": name, "kind": "ceiling", "n_prompts": len(two), **{k: round(v, 6) for k, v in ceiling.items()}})
        known = items_by_id()
        text_x = tfidf_features([known[p].text if p in known else p for p in ids])
        text = nested_cv(text_x, y_own, grid, s.seed)
        rows.append(_row(name, "own", "text", None, "-", y_own, text, s, None))
        tsets = {"own": y_own}
        others = [m for m in stores if m != name and all(p in targets[m] for p in ids)]
        if others:
            shared = np.stack([np.mean([targets[m][p]["own"] for m in others], axis=0) for p in ids])
            tsets["shared"] = shared
            tsets["specific"] = y_own - shared
            for m in others:
                tsets[f"model:{m}"] = np.stack([targets[m][p]["own"] for p in ids])
        n_sites = st.shape[1]
        for pos in st.positions:
            xs = [st.layer(layer, pos)[index] for layer in range(n_sites)]
            for tname, y in tsets.items():
                if progress:
                    progress(f"{name}: {tname} target, position {pos}, {n_sites} layers")
                for layer, x in enumerate(xs):
                    res = nested_cv(x, y, grid, s.seed)
                    perm = (lambda x=x, y=y, r=res.r2: permutation_test(x, y, r, grid, s.n_perm, s.seed)) \
                        if (tname == "own" and s.n_perm) else None
                    rows.append(_row(name, tname, "resid", layer, pos, y, res, s, perm))
                best = nested_cv_layers(xs, y, grid, s.seed, layer_names=list(range(n_sites)))
                rows.append(_row(name, tname, "resid", "best", pos, y, best, s, None))
    tested = [r for r in rows if "p_perm" in r]
    for r, q in zip(tested, benjamini_hochberg([r["p_perm"] for r in tested])):
        r["q_bh"] = round(q, 6)
    path = run / PROBES
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    tmp.replace(path)
    plot_probes(run, rows)
    for st in stores.values():
        st.close()
    return rows


def plot_probes(run: Path, rows: list[dict[str, Any]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    folder = run / "probes"
    folder.mkdir(exist_ok=True)
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model and r.get("features") == "resid" and isinstance(r.get("layer"), int)]
        if not mine:
            continue
        for kind, targets in (("", ("own",)), ("-shared", ("shared", "specific"))):
            sel = [r for r in mine if r["target"] in targets]
            if not sel:
                continue
            fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
            for (t, pos) in sorted({(r["target"], r["position"]) for r in sel}):
                pts = sorted((r for r in sel if r["target"] == t and r["position"] == pos), key=lambda r: r["layer"])
                xs = [r["layer"] for r in pts]
                label = pos if kind == "" else f"{t} ({pos})"
                nan = float("nan")
                ax.plot(xs, [nan if r["r2"] is None else r["r2"] for r in pts], marker="o", ms=3, label=label)
                ax.fill_between(xs, [nan if r["ci"][0] is None else r["ci"][0] for r in pts],
                                [nan if r["ci"][1] is None else r["ci"][1] for r in pts], alpha=0.15)
            if kind == "":
                text = [r for r in rows if r["model"] == model and r.get("features") == "text"]
                if text:
                    ax.axhline(text[0]["r2"], ls="--", color="gray", label="TF-IDF text baseline")
                ceil = [r for r in rows if r["model"] == model and r.get("kind") == "ceiling"]
                if ceil and ceil[0]["ceiling"] == ceil[0]["ceiling"]:
                    ax.axhline(ceil[0]["ceiling"], ls=":", color="black", label="split-half ceiling")
            ax.axhline(0, color="black", lw=0.5)
            ax.set_xlabel("layer L = input of block L (0 = embeddings); last = final residual, before the final norm")
            ax.set_ylabel("outer pooled R^2 (nested CV)")
            ax.set_title(f"{model}: occupancy probe{' - shared vs specific' if kind else ''}")
            ax.legend(fontsize=7)
            fig.tight_layout()
            p = folder / f"{safe_name(model)}{kind}.png"
            fig.savefig(p, metadata={"Software": None})
            plt.close(fig)
            out.append(p)
    return out
