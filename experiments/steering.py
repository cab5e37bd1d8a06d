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
summary is the mean occupancy of R per strength over valid renders, beside the unsteered (s = 0) one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from experiments.generation import append_rows, derive_seed, read_rows, safe_name
from experiments.probing import consensus
from hooks.steer import add_direction
from interp.probes import Grid, _pca_scores, _standardise, nested_cv

STEERING = "steering.jsonl"
REGIONS = {
    "left": (slice(0, 6), slice(0, 3)), "right": (slice(0, 6), slice(3, 6)),
    "top": (slice(0, 3), slice(0, 6)), "bottom": (slice(3, 6), slice(0, 6)),
}


def region_mask(name: str) -> np.ndarray:
    if name not in REGIONS:
        raise ValueError(f"unknown region {name!r}: use {', '.join(REGIONS)}")
    m = np.zeros((6, 6), bool)
    m[REGIONS[name]] = True
    return m.ravel()


def probe_direction(x: np.ndarray, y: np.ndarray, region: str, k: int, alpha: float) -> np.ndarray:
    """Unit vector in residual space along which the probe's predicted occupancy of `region` grows fastest."""
    z, _ = _standardise(x, x[:1])
    sd = x.std(axis=0)
    sd[sd == 0] = 1.0
    u, s, _ = _pca_scores(z, z[:1], k)
    # ridge on PCA scores: beta = S/(S^2+alpha) U^T y_c; V_k = z^T U_k / S_k
    coef = (s / (s ** 2 + alpha))[:, None] * (u.T @ (y - y.mean(axis=0)))
    v = (z.T @ u) / s
    w = v @ coef  # [d, 36]: standardised input -> occupancy
    g = (w @ region_mask(region).astype(float)) / sd
    n = np.linalg.norm(g)
    if n == 0:
        raise ValueError("the probe has a zero gradient for this region")
    return g / n


def chosen_hyperparameters(run: Path, model: str, layer: int, position: str, x: np.ndarray, y: np.ndarray,
                           seed: int) -> tuple[int, float]:
    path = run / "probes.jsonl"
    if path.exists():
        for r in read_rows(path):
            if (r.get("model") == model and r.get("features") == "resid" and r.get("target") == "own"
                    and r.get("layer") == layer and r.get("position") == position):
                ks = [c["k"] for c in r["chosen"]]
                alphas = [c["alpha"] for c in r["chosen"]]
                return max(set(ks), key=ks.count), max(set(alphas), key=alphas.count)
    if x.shape[0] < 10:  # too few prompts to choose by nested CV: a small, fixed probe
        return min(4, x.shape[0] - 1), 1.0
    res = nested_cv(x, y, Grid(), seed)
    ks = [c["k"] for c in res.chosen]
    alphas = [c["alpha"] for c in res.chosen]
    return max(set(ks), key=ks.count), max(set(alphas), key=alphas.count)


def steer_stage(rt: Any, run: Path, layer: int, region: str = "left", strengths: tuple[float, ...] = (0.0, 0.25, 0.5),
                position: str = "last", samples: int = 2, temperature: float = 0.7, max_new_tokens: int = 128,
                seed: int = 0, limit: int | None = None, model: str | None = None,
                progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    from activations.store import ActivationStore
    from bench.sandbox.pool import SandboxPool
    from experiments.generation import answer_text
    from experiments.intervention import protocol_from_label
    from interp.prompts import items_by_id
    from experiments.render import background_of
    from interp.probes import occupancy
    from interp.prompts import build
    from interp.runtime import Sampling, StopRule

    model = model or rt.info.name
    with ActivationStore(run / "activations" / f"{safe_name(model)}.h5") as st:
        protocol = st.meta["protocol"]
        cons, _ = consensus(run, model, protocol, 1)
        ids = [p for p in st.prompt_ids if p in cons]
        if len(ids) < 4:
            raise ValueError(f"only {len(ids)} prompts have targets: too few to fit a steering probe")
        index = [st.prompt_ids.index(p) for p in ids]
        x = st.layer(layer, position)[index].astype(np.float64)
    y = np.stack([cons[p]["own"] for p in ids])
    k, alpha = chosen_hyperparameters(run, model, layer, position, x, y, seed)
    k = min(k, len(ids) - 1)
    direction = probe_direction(x, y, region, k, alpha)
    norm = float(np.linalg.norm(x, axis=1).mean())
    items = items_by_id()
    proto = protocol_from_label(protocol)
    prompts = ids[:limit] if limit else ids
    hook_name = rt.hook_names([layer])[0]
    path = run / STEERING
    done = {(r["prompt_id"], r["sample"], r["strength"], r["region"], r["layer"]) for r in read_rows(path)}
    mask = region_mask(region).reshape(6, 6)
    with SandboxPool(workers=None) as pool:
        for pid in prompts:
            built = build(items[pid], proto, rt.tokenizer, chat=rt.info.chat)
            for s in strengths:
                todo = [j for j in range(samples) if (pid, j, s, region, layer) not in done]
                if not todo:
                    continue
                seeds = [derive_seed(seed, model, pid, "steer", layer, region, j) for j in todo]  # same seeds for every strength
                hooks = [(hook_name, add_direction(direction * s * norm))] if s else []
                gens = rt.generate([built.tokens] * len(todo),
                                   [Sampling(0.0 if j == 0 else temperature, sd) for j, sd in zip(todo, seeds)],
                                   StopRule(max_new_tokens=max_new_tokens, open_fence=built.open_fence), hooks=hooks)
                texts = [answer_text({"prefix": built.opener, "text": g.text}) for g in gens]
                results = pool.run(texts)
                rows = []
                for j, sd, g, res in zip(todo, seeds, gens, results):
                    occ = occupancy(res.pixels, background_of(res)) if res.valid else None
                    rows.append({"model": model, "prompt_id": pid, "layer": layer, "position": position, "region": region,
                                 "strength": s, "sample": j, "seed": sd, "k": int(k), "alpha": float(alpha),
                                 "valid": bool(res.valid), "text": g.text,
                                 "region_occupancy": None if occ is None else round(float(occ[mask].mean()), 6),
                                 "other_occupancy": None if occ is None else round(float(occ[~mask].mean()), 6)})
                append_rows(path, rows)
            if progress:
                progress(1)
    return summarise_steering(read_rows(path))


def summarise_steering(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for key in sorted({(r["model"], r["layer"], r["region"], r["strength"]) for r in rows}):
        sel = [r for r in rows if (r["model"], r["layer"], r["region"], r["strength"]) == key]
        valid = [r for r in sel if r["valid"]]
        out.append({"model": key[0], "layer": key[1], "region": key[2], "strength": key[3], "attempts": len(sel),
                    "valid": len(valid),
                    "region_occupancy": float(np.mean([r["region_occupancy"] for r in valid])) if valid else None,
                    "other_occupancy": float(np.mean([r["other_occupancy"] for r in valid])) if valid else None})
    return out


__all__ = ["REGIONS", "STEERING", "probe_direction", "region_mask", "steer_stage", "summarise_steering"]
