"""Steering along a probe direction: add it to the residual stream while the model writes, and measure
where it draws.

1. Fit the occupancy probe on every prompt with targets at one layer and position (standardise ->
   PCA(k) -> ridge(alpha); k and alpha are the values the nested CV chose most often at that layer in
   `probes.jsonl`, else chosen here by nested CV, or k = 4, alpha = 1 with fewer than 10 prompts).
2. The direction for a region R of the 6x6 grid (e.g. the left half) is the gradient of the probe's
   predicted occupancy of R with respect to the residual vector: (V_k beta_R) / sd, unit length.
3. For each strength s (in units of the layer's mean residual norm at that position), generate every
   prompt with `hooks/steer.add_direction` adding s x norm x direction to resid_pre of the layer at
   every position, render, and measure the share of R that is painted.
Rows go to `RUN/steering.jsonl` (prompt, sample, seed, strength, region, valid, occupancy of R); the
summary is the mean occupancy of R per strength over valid renders, beside the unsteered (s = 0) one;
`steering_table` adds the prompts and a prompt-clustered 95% CI (seeded), the table the report shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from bench.canvas.regions import region_mask
from bench.sandbox.boundary import clean_text
from experiments.rates import cluster_ci
from experiments.rundir import RunDir, answer_text, derive_seed, reading, writing
from experiments.stages.probe import consensus
from hooks.steer import add_direction
from interp.probes import GRID_SIZE, FittedProbe, Grid, nested_cv

STEERING = RunDir.STEERING


def probe_direction(x: np.ndarray, y: np.ndarray, region: str, k: int, alpha: float) -> np.ndarray:
    """Unit vector in residual space along which the probe's predicted occupancy of `region` grows fastest."""
    return FittedProbe.fit(x, y, k, alpha).direction(region_mask(region, GRID_SIZE))


def chosen_hyperparameters(run: Any, model: str, task: str, layer: int, position: str, x: np.ndarray, y: np.ndarray,
                           seed: int) -> tuple[int, float]:
    for r in reading(run).rows(RunDir.PROBES):
        if (r.get("model") == model and r.get("task") == task and r.get("features") == "resid"
                and r.get("target") == "own" and r.get("layer") == layer and r.get("position") == position):
            ks = [c["k"] for c in r["chosen"]]
            alphas = [c["alpha"] for c in r["chosen"]]
            return max(set(ks), key=ks.count), max(set(alphas), key=alphas.count)
    if x.shape[0] < 10:  # too few prompts to choose by nested CV: a small, fixed probe
        return min(4, x.shape[0] - 1), 1.0
    res = nested_cv(x, y, Grid(), seed)
    ks = [c["k"] for c in res.chosen]
    alphas = [c["alpha"] for c in res.chosen]
    return max(set(ks), key=ks.count), max(set(alphas), key=alphas.count)


@dataclass(frozen=True)
class SteerSettings:
    """Steering along a probe direction (beyond the paper)."""

    layer: int  #: the block whose resid_pre is steered and whose probe gives the direction
    task: str = "layout"  #: probes, and so steering, are per task
    region: str = "left"  #: a region of `bench.canvas.regions.REGIONS` whose predicted occupancy the direction raises
    strengths: tuple[float, ...] = (0.0, 0.25, 0.5)  #: multiples of the layer's mean residual norm
    position: str = "last"  #: token position of the probe's features
    samples: int = 2  #: attempts per prompt and strength (sample 0 greedy), the same seeds at every strength
    temperature: float = 0.7
    max_new_tokens: int = 128
    seed: int = 0
    limit: int | None = None  #: only the first N prompts
    batch_size: int = 8  #: prompts per generation batch (a work unit: fixed chunks of the prompt list, per strength)


def steer_stage(rt: Any, run: Any, s: SteerSettings, model: str | None = None,
                progress: Callable[[int], None] | None = None, shard: tuple[int, int] | None = None) -> list[dict[str, Any]]:
    """Steered attempts per prompt and strength into RUN/steering.jsonl; work units are fixed chunks of
    `s.batch_size` prompts per strength, each one batched generation (resumable, shardable: `shard=(i, n)` runs the
    units whose index is i mod n). `progress(k)` counts prompts x strengths. Returns the summary per strength."""
    with writing(run) as rd:
        return _steer(rt, rd, s, model or rt.info.name, progress, shard)


def _steer(rt: Any, rd: RunDir, s: SteerSettings, model: str, progress: Callable[[int], None] | None,
           shard: tuple[int, int] | None) -> list[dict[str, Any]]:
    run = rd
    from activations.store import ActivationStore
    from bench.sandbox.pool import SandboxPool
    from experiments.cuts import prompt_items, protocol_from_label
    from experiments.stages.render import background_of
    from interp.probes import occupancy
    from interp.prompts import build
    from interp.runtime import Sampling, StopRule

    with ActivationStore(rd.activations(model), rd.prompt_order()) as st:
        protocol, medium = st.meta["protocol"], st.meta.get("medium", "v1")
        cons, _ = consensus(run, model, s.task, protocol, medium, 1)
        rowmap = st.rows_of(s.task)
        ids = [p for p in rowmap if p in cons]
        if len(ids) < 4:
            raise ValueError(f"only {len(ids)} {s.task} prompts have targets: too few to fit a steering probe")
        x = st.layer(s.layer, s.position)[[rowmap[p] for p in ids]].astype(np.float64)
    y = np.stack([cons[p]["own"] for p in ids])
    k, alpha = chosen_hyperparameters(run, model, s.task, s.layer, s.position, x, y, s.seed)
    k = min(k, len(ids) - 1)
    direction = probe_direction(x, y, s.region, k, alpha)
    norm = float(np.linalg.norm(x, axis=1).mean())
    item = prompt_items(run)
    proto = protocol_from_label(protocol, medium)
    prompts = ids[: s.limit] if s.limit else ids
    hook_name = rt.hook_names([s.layer])[0]
    done = {(r["model"], r["task"], r["prompt_id"], r["sample"], r["strength"], r["region"], r["layer"], r["position"])
            for r in rd.rows(STEERING)}
    mask = region_mask(s.region, GRID_SIZE)
    built = {pid: build(item(s.task, pid), proto, rt.tokenizer, chat=rt.info.chat) for pid in prompts}
    # fixed work units: chunks of the prompt list, per strength (one batched generation each), so a resumed or
    # sharded run batches exactly like an uninterrupted one (`shard=(i, n)` runs the units whose index is i mod n)
    chunks = [prompts[i: i + s.batch_size] for i in range(0, len(prompts), s.batch_size)]
    units = [(strength, chunk) for strength in s.strengths for chunk in chunks]
    with SandboxPool(workers=None) as pool:
        for ui, (strength, chunk) in enumerate(units):
            if shard is not None and ui % shard[1] != shard[0]:
                continue
            cells = [(pid, j) for pid in chunk for j in range(s.samples)]
            if all((model, s.task, pid, j, strength, s.region, s.layer, s.position) in done for pid, j in cells):
                if progress:
                    progress(len(chunk))
                continue
            # the same seeds for every strength: the strength is the only difference between arms
            seeds = [derive_seed(s.seed, model, s.task, protocol, medium, pid, "steer", s.layer, s.position, s.region, j)
                     for pid, j in cells]
            hooks = [(hook_name, add_direction(direction * strength * norm))] if strength else []
            gens: list[Any] = [None] * len(cells)
            for flag in sorted({built[pid].open_fence for pid, _ in cells}):  # one stop rule per generation
                idx = [i for i, (pid, _) in enumerate(cells) if built[pid].open_fence == flag]
                out = rt.generate([built[cells[i][0]].tokens for i in idx],
                                  [Sampling(0.0 if cells[i][1] == 0 else s.temperature, seeds[i]) for i in idx],
                                  StopRule(max_new_tokens=s.max_new_tokens, open_fence=flag), hooks=hooks)
                for i, g in zip(idx, out):
                    gens[i] = g
            texts = [answer_text({"prefix": built[pid].opener, "text": g.text}) for (pid, _), g in zip(cells, gens)]
            results = pool.run(texts)
            rows = []
            for (pid, j), sd, g, res in zip(cells, seeds, gens, results):
                if (model, s.task, pid, j, strength, s.region, s.layer, s.position) in done:
                    continue
                occ = occupancy(res.pixels, background_of(res)) if res.valid else None
                rows.append({"model": model, "task": s.task, "protocol": protocol, "medium": medium, "prompt_id": pid,
                             "layer": s.layer, "position": s.position, "region": s.region, "strength": strength,
                             "sample": j, "seed": sd, "k": int(k), "alpha": float(alpha), "valid": bool(res.valid),
                             "text": clean_text(g.text),
                             "region_occupancy": None if occ is None else round(float(occ[mask].mean()), 6),
                             "other_occupancy": None if occ is None else round(float(occ[~mask].mean()), 6)})
            rd.append(STEERING, rows)
            if progress:
                progress(len(chunk))
    return summarise_steering(rd.rows(STEERING))


def _cell(r: dict[str, Any]) -> tuple[Any, ...]:
    """A steering row's cell of the summary and the table: (model, task, layer, position, region, strength)."""
    return (r["model"], r.get("task", "layout"), r["layer"], r.get("position", "last"), r["region"], r["strength"])


def summarise_steering(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for key in sorted({_cell(r) for r in rows}):
        sel = [r for r in rows if _cell(r) == key]
        valid = [r for r in sel if r["valid"]]
        out.append({"model": key[0], "task": key[1], "layer": key[2], "position": key[3], "region": key[4],
                    "strength": key[5], "attempts": len(sel),
                    "valid": len(valid),
                    "region_occupancy": float(np.mean([r["region_occupancy"] for r in valid])) if valid else None,
                    "other_occupancy": float(np.mean([r["other_occupancy"] for r in valid])) if valid else None})
    return out


def steering_table(rows: list[dict[str, Any]], n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Per (model, task, layer, position, region, strength): attempts, valid renders, prompts, the mean occupancy of the
    steered region over valid renders with its prompt-clustered 95% CI (none with one prompt), and of the rest."""
    out = []
    for key in sorted({_cell(r) for r in rows}):
        sel = [r for r in rows if _cell(r) == key]
        valid = [r for r in sel if r.get("valid")]
        per_prompt: dict[str, list[float]] = {}
        for r in valid:
            per_prompt.setdefault(r["prompt_id"], []).append(float(r["region_occupancy"]))
        out.append({"model": key[0], "task": key[1], "layer": key[2], "position": key[3], "region": key[4],
                    "strength": key[5], "attempts": len(sel), "valid": len(valid), "prompts": len(per_prompt),
                    "region_occupancy": float(np.mean([r["region_occupancy"] for r in valid])) if valid else None,
                    "ci": cluster_ci(per_prompt, n_boot, seed) if valid else [None, None],
                    "other_occupancy": float(np.mean([r["other_occupancy"] for r in valid])) if valid else None})
    return out


__all__ = ["STEERING", "probe_direction", "steer_stage", "steering_table", "summarise_steering"]
