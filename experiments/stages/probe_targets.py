"""The probe targets: each prompt's consensus occupancy over a model's valid attempts, the own, shared, specific
and cross-model target sets built from them, and the prompts' texts and groups they are probed with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from experiments.rundir import RunDir, derive_seed, reading
from experiments.stages.render import read_renders, row_key
from interp.probes import occupancy
from interp.prompts import items_by_id


class ProbeError(ValueError):
    """A run that cannot be probed as asked."""


TARGET_ATTEMPTS = {
    "all": "every valid attempt, greedy and sampled (the paper's consensus)",
    "sampled": "sampled attempts only: the greedy attempt (temperature 0) is left out, so a decision made by tiny logit "
               "differences at one token is not part of the target (the negative control's target)",
}


def consensus(run: Any, model: str, task: str, protocol: str, medium: str = "v1", min_attempts: int = 1,
              exclude_trivial: bool = False, renders: dict[str, dict[str, Any]] | None = None,
              attempts: str = "all", seed: int = 0) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """prompt id -> {own, half_a, half_b, n} for one model and task; and counts of prompts kept and dropped.

    `attempts`: which attempts form the consensus (TARGET_ATTEMPTS). The split halves (for the reliability ceiling)
    are a random split of each prompt's attempts, seeded by (seed, model, task, prompt): a fixed rule such as
    even/odd samples would put the greedy attempt always in one half."""
    if attempts not in TARGET_ATTEMPTS:
        raise ProbeError(f"target attempts {attempts!r}: one of {', '.join(TARGET_ATTEMPTS)}")
    rd = reading(run)
    renders = read_renders(rd) if renders is None else renders
    per: dict[str, list[tuple[int, np.ndarray]]] = {}
    seen: set[str] = set()
    for r in rd.rows(RunDir.GENERATIONS):
        if (r["model"], r["task"], r["protocol"], r.get("medium", "v1")) != (model, task, protocol, medium):
            continue
        seen.add(r["prompt_id"])
        if attempts == "sampled" and not r.get("temperature"):
            continue
        x = renders.get(row_key(r))
        if x is None or x["outcome"] != "ok" or (exclude_trivial and x["trivial"]):
            continue
        per.setdefault(r["prompt_id"], []).append((r["sample"], occupancy(x["pixels"], x["background"])))
    out = {}
    for pid in sorted(per):
        grids = per[pid]
        if len(grids) < min_attempts:
            continue
        grids.sort(key=lambda t: t[0])
        g = np.stack([t[1] for t in grids])
        halves: tuple[Any, Any] = (None, None)
        if len(grids) >= 2:
            order = np.random.default_rng(derive_seed(seed, model, task, pid, "split-half")).permutation(len(grids))
            a, b = order[: (len(grids) + 1) // 2], order[(len(grids) + 1) // 2:]
            halves = (g[a].mean(axis=0).ravel(), g[b].mean(axis=0).ravel())
        out[pid] = {"own": g.mean(axis=0).ravel(), "half_a": halves[0], "half_b": halves[1], "n": len(grids)}
    return out, {"prompts_seen": len(seen), "kept": len(out), "dropped": len(seen) - len(out)}


@dataclass
class TargetSet:
    """One probe target over a list of prompts, with what is needed for its ceiling."""

    name: str
    ids: list[str]
    y: np.ndarray  #: [n, 36]
    half_a: np.ndarray | None = None  #: [n_two, 36] half-consensus of even attempts (prompts with two halves)
    half_b: np.ndarray | None = None
    contributors: dict[str, int] | None = None  #: shared/specific: model -> prompts it contributed to


def target_sets(name: str, ids: list[str], targets: dict[str, dict[str, dict[str, Any]]]) -> tuple[list[TargetSet], dict[str, Any]]:
    """own, shared, specific and model:<other> targets of model `name` over its prompts `ids`.

    shared: per prompt the mean of the other models' consensus over those that have one (the paper's
    leave-one-model-out consensus; with uneven per-model coverage no model is dropped for lacking a
    prompt); prompts no other model covers are left out of shared and specific, and counted."""
    own = targets[name]
    out = [TargetSet("own", ids, np.stack([own[p]["own"] for p in ids]), *_halves(ids, [own]))]
    others = [m for m in targets if m != name]
    info: dict[str, Any] = {}
    if others:
        covered = [p for p in ids if any(p in targets[m] for m in others)]
        info = {"shared_prompts": len(covered), "shared_uncovered": len(ids) - len(covered)}
        if covered:
            contrib = {m: sum(p in targets[m] for p in covered) for m in others}
            contrib = {m: c for m, c in contrib.items() if c}
            shared = np.stack([np.mean([targets[m][p]["own"] for m in others if p in targets[m]], axis=0) for p in covered])
            y_own = np.stack([own[p]["own"] for p in covered])
            sa, sb = _shared_halves(covered, own, targets, others)
            out.append(TargetSet("shared", covered, shared, sa[1], sb[1], contrib))
            spec_a = spec_b = None
            if sa[0] is not None:
                spec_a, spec_b = sa[0] - sa[1], sb[0] - sb[1]
            out.append(TargetSet("specific", covered, y_own - shared, spec_a, spec_b, contrib))
        for m in others:
            both = [p for p in ids if p in targets[m]]
            if both:
                out.append(TargetSet(f"model:{m}", both, np.stack([targets[m][p]["own"] for p in both])))
    return out, info


def _halves(ids: list[str], sources: list[dict[str, dict[str, Any]]]) -> tuple[np.ndarray | None, np.ndarray | None]:
    two = [p for p in ids if sources[0][p]["half_b"] is not None]
    if len(two) < 3:
        return None, None
    return np.stack([sources[0][p]["half_a"] for p in two]), np.stack([sources[0][p]["half_b"] for p in two])


def _shared_halves(covered: list[str], own: dict[str, dict[str, Any]], targets: dict[str, dict[str, dict[str, Any]]],
                   others: list[str]) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """((own_a, shared_a), (own_b, shared_b)) over the covered prompts where every participant has two halves."""
    keep = []
    for p in covered:
        ms = [m for m in others if p in targets[m]]
        if own[p]["half_b"] is not None and all(targets[m][p]["half_b"] is not None for m in ms):
            keep.append((p, ms))
    if len(keep) < 3:
        return (None, None), (None, None)
    own_a = np.stack([own[p]["half_a"] for p, _ in keep])
    own_b = np.stack([own[p]["half_b"] for p, _ in keep])
    sh_a = np.stack([np.mean([targets[m][p]["half_a"] for m in ms], axis=0) for p, ms in keep])
    sh_b = np.stack([np.mean([targets[m][p]["half_b"] for m in ms], axis=0) for p, ms in keep])
    return (own_a, sh_a), (own_b, sh_b)


def _texts(run: Any, task: str, ids: list[str]) -> list[str]:
    recorded = reading(run).prompts()
    builtin = items_by_id()
    missing = [p for p in ids if (task, p) not in recorded and p not in builtin]
    if missing:
        raise ProbeError(f"{run} has no text for {task} prompts {missing[:3]} (no prompts.jsonl entry and not built in); "
                         "the text baseline needs them: regenerate with this version")
    return [recorded[(task, p)].text if (task, p) in recorded else builtin[p].text for p in ids]


def prompt_groups(run: Any, task: str, ids: list[str]) -> np.ndarray | None:
    """Each prompt's group label (the recorded prompt's `group`, else the built-in prompt's: a layout prompt's
    subcategory); None when no prompt has one. A prompt without a group among grouped ones is its own group."""
    recorded = reading(run).prompts()
    builtin = items_by_id()
    labels = []
    for p in ids:
        item = recorded.get((task, p))
        g = item.group if item is not None else ""
        if not g and p in builtin and builtin[p].task == task and (item is None or item.text == builtin[p].text):
            g = builtin[p].group
        labels.append(g)
    if not any(labels):
        return None
    return np.array([g if g else f"prompt:{p}" for g, p in zip(labels, ids)])
