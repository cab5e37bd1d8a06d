"""Cross-model selectivity at scale (issue 16): a model x model decoding table and the own-minus-others gap
with a prompt-clustered bootstrap CI, into `RUN/selectivity.jsonl`.

The probe stage fits, for every model M, probes from M's activations to every model's consensus targets
(`target: own` and `target: model:<other>`, `layer: best`: layer, PCA size and ridge penalty chosen
inside the folds). A model that encodes *its own* picture, beyond what the prompt implies for every
model, decodes its own targets better than the others' (the paper: a mean gap of +0.015 over eight
models, own best for only one; "models decode one another's layouts about as well as their own").

This stage refits those best-layer probes, with the probe stage's own targets (`consensus`,
`target_sets`), folds, grid and seed, so each cell's R^2 is the probe stage's `layer: best` row's
(a test checks it), and keeps their out-of-fold predictions, which the gap's CI needs and which
`probes.jsonl` does not hold. It is its own stage rather than more rows of the probe stage for two
reasons: the probe stage reruns every permutation test when asked again (thousands of refits), this
stage none; and `probes.jsonl` keeps exactly the rows it had (the golden study pins them). The cost
is one more layer sweep per model and position (the decompositions, no permutations).

Per task (layout by default) and captured position, rows of `RUN/selectivity.jsonl`:
- `kind: cell`: activations of `model`, targets of `target` (`own` true on the diagonal): outer pooled
  R^2 over the prompts both have, and its 95% CI;
- `kind: gap`: per model, R^2(own) - mean over the other models of R^2(other's targets), the CI,
  whether its own targets are the best decoded (`own_best`);
- `kind: mean_gap`: the mean of the per-model gaps over the models (the paper's +0.015), and its CI;
- `kind: skipped`: a task or model that could not be done, with the reason.
Every CI is a percentile interval over the same prompt-clustered resamples: prompts (the union over
the models' prompt lists) are drawn with replacement, and each cell's R^2 is recomputed on the drawn
prompts it has (`interp.probes.weighted_r2`). Resampling prompts jointly across every cell keeps the
dependence the gap has (a prompt enters the own and the other cells, and every model's) inside the CI.
The resamples' seed derives from the run seed, the task and the position, and is recorded.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from experiments.rundir import RunDir, derive_seed, writing
from experiments.stages.probe import (ProbeSettings, prompt_groups, consensus, json_number, open_stores,
                                      percentile_ci, target_sets)
from experiments.stages.render import read_renders, render_stage
from interp.grouping import design
from interp.probes import Grid, LayerSweep, bootstrap_counts, weighted_r2

_PROBE = ProbeSettings()


@dataclass(frozen=True)
class SelectivitySettings:
    """How the selectivity table is made. Targets, grid, folds and seed must be the probe stage's for the
    cells to equal its `layer: best` rows (`StudyConfig.selectivity_settings` builds both from one set)."""

    tasks: tuple[str, ...] = ("layout",)  #: tasks to tabulate (layout is the paper's question)
    min_attempts: int = 1  #: valid attempts a prompt needs for a consensus target (as the probe stage)
    exclude_trivial: bool = False  #: drop trivial renders from the consensus (as the probe stage)
    target_attempts: str = "all"  #: which attempts form the consensus (as the probe stage)
    n_boot: int = 10_000  #: prompt-clustered bootstrap resamples of every CI
    seed: int = 0  #: the probes' folds (as the probe stage) and, derived, the resamples
    pca: tuple[int, ...] = _PROBE.pca  #: PCA sizes chosen among inside the folds (as the probe stage)
    alphas: tuple[float, ...] = _PROBE.alphas  #: ridge penalties likewise
    outer: int = _PROBE.outer  #: outer folds
    inner: int = _PROBE.inner  #: inner folds

    @property
    def grid(self) -> Grid:
        return Grid(self.pca, self.alphas, self.outer, self.inner)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _nanmean(arrays: list[np.ndarray]) -> np.ndarray:
    """Elementwise mean over the arrays, ignoring nan (nan where every one is nan: a resample that lacks
    the prompts of every cell it averages)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.stack(arrays), axis=0)


def selectivity_stage(run: Any, s: SelectivitySettings = SelectivitySettings(), models: list[str] | None = None,
                      progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Write RUN/selectivity.jsonl (see the module docstring) and return its rows."""
    from experiments.stages.probe import ProbeError
    from interp.prompts import TASKS

    bad = [t for t in s.tasks if t not in TASKS]
    if bad:  # checked before the run is opened (an unknown task once replaced selectivity.jsonl)
        raise ProbeError(f"unknown task {bad[0]!r}: selectivity is per task, {' or '.join(TASKS)}")
    with writing(run) as rd:
        return _selectivity(rd, s, models, progress or (lambda m: None))


def _selectivity(rd: RunDir, s: SelectivitySettings, models: list[str] | None,
                 say: Callable[[str], None]) -> list[dict[str, Any]]:
    stores = open_stores(rd, models)
    render_stage(rd)
    renders = read_renders(rd)
    rows: list[dict[str, Any]] = []
    try:
        for task in s.tasks:
            targets = {}
            for name, st in stores.items():
                cons, counts = consensus(rd, name, task, st.meta["protocol"], st.meta.get("medium", "v1"), s.min_attempts,
                                         s.exclude_trivial, renders, s.target_attempts, s.seed)
                if counts["prompts_seen"]:
                    targets[name] = cons
            if len(targets) < 2:
                rows.append({"kind": "skipped", "task": task, "reason": f"{len(targets)} model(s) with {task} targets; "
                             "selectivity needs at least 2"})
                continue
            rows += _task(task, targets, stores, s, say, rd)
    finally:
        for st in stores.values():
            st.close()
    rd.write_rows(RunDir.SELECTIVITY, rows)
    return rows


def _task(task: str, targets: dict[str, dict[str, dict[str, Any]]], stores: dict[str, Any], s: SelectivitySettings,
          say: Callable[[str], None], rd: Any = None) -> list[dict[str, Any]]:
    """Every row of one task: the probes' out-of-fold predictions per (model, target, position), then the
    cells, gaps and mean gap per position from one set of resamples."""
    grid = s.grid
    rows: list[dict[str, Any]] = []
    fits: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}  # position -> (model, target) -> fit
    for name in targets:
        st = stores[name]
        rowmap = st.rows_of(task)
        ids = [p for p in rowmap if p in targets[name]]
        if len(ids) < 2 * grid.outer:
            rows.append({"kind": "skipped", "task": task, "model": name,
                         "reason": f"{len(ids)} prompts with targets and activations < {2 * grid.outer}"})
            continue
        tsets = [t for t in target_sets(name, ids, targets)[0] if t.name == "own" or t.name.startswith("model:")]
        sweeps: dict[tuple[str, str], LayerSweep] = {}
        for t in tsets:
            if len(t.ids) < 2 * grid.outer:
                continue
            for pos in st.positions:
                say(f"{name} {task}: {t.name} targets, position {pos}")
                key = (tuple(t.ids), pos)
                if key not in sweeps:  # one set of decompositions per prompt list and position
                    index = [rowmap[p] for p in t.ids]
                    # the probe stage's folds: grouped when its prompts have enough groups (issue 28), so that a
                    # cell equals the stage's `layer: best` row
                    dsg = design(prompt_groups(rd, task, t.ids) if rd is not None else None, grid)
                    sweeps[key] = LayerSweep([st.layer(layer, pos)[index] for layer in range(st.shape[1])], dsg.grid,
                                             s.seed, groups=dsg.groups)
                best = sweeps[key].best(t.y)
                target = name if t.name == "own" else t.name.split(":", 1)[1]
                fits.setdefault(pos, {})[(name, target)] = {"ids": t.ids, "y": t.y, "pred": best.pred, "r2": best.r2,
                                                            "layers": [c["layer"] for c in best.chosen]}
    for pos, cells in fits.items():
        rows += _tables(task, pos, cells, s)
    return rows


def _tables(task: str, pos: str, cells: dict[tuple[str, str], dict[str, Any]], s: SelectivitySettings) -> list[dict[str, Any]]:
    """Cells, per-model gaps and the mean gap at one position, every CI from the same prompt resamples."""
    union = sorted({p for c in cells.values() for p in c["ids"]})
    at = {p: i for i, p in enumerate(union)}
    seed = derive_seed(s.seed, task, pos, "selectivity")
    w = bootstrap_counts(len(union), s.n_boot, seed)
    base = {"task": task, "position": pos, "n_boot": s.n_boot, "boot_seed": seed}
    boot = {k: weighted_r2(c["y"], c["pred"], w[:, [at[p] for p in c["ids"]]]) for k, c in cells.items()}
    rows = [{**base, "kind": "cell", "model": m, "target": t, "own": m == t, "n_prompts": len(c["ids"]), "r2": json_number(c["r2"]),
             "ci": percentile_ci(boot[(m, t)]), "chosen_layers": c["layers"]} for (m, t), c in sorted(cells.items())]
    gaps, gap_boot = [], []
    for m in sorted({m for m, _ in cells}):
        others = sorted(t for mm, t in cells if mm == m and t != m)
        if (m, m) not in cells or not others:
            continue
        other_r2 = [cells[(m, t)]["r2"] for t in others]
        gap = cells[(m, m)]["r2"] - float(np.mean(other_r2))
        b = boot[(m, m)] - _nanmean([boot[(m, t)] for t in others])
        gaps.append(gap)
        gap_boot.append(b)
        rows.append({**base, "kind": "gap", "model": m, "others": others, "own_r2": json_number(cells[(m, m)]["r2"]),
                     "others_mean_r2": json_number(float(np.mean(other_r2))), "gap": json_number(gap), "ci": percentile_ci(b),
                     "own_best": bool(cells[(m, m)]["r2"] > max(other_r2))})
    if gaps:
        mb = _nanmean(gap_boot)
        rows.append({**base, "kind": "mean_gap", "models": sorted({m for m, _ in cells}), "n_models": len(gaps),
                     "n_prompts": len(union), "gap": json_number(float(np.mean(gaps))), "ci": percentile_ci(mb),
                     "own_best": sum(r["own_best"] for r in rows if r["kind"] == "gap")})
    return rows


__all__ = ["SelectivitySettings", "selectivity_stage"]
