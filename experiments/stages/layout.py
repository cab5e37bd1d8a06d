"""Layout tables without a judge: validity and triviality per model, protocol, tier and subcategory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.layout.prompts import by_id
from bench.layout.scoring import TRIVIAL_SHARE
from experiments.rundir import RunDir, arm_of, reading
from experiments.stages.render import read_renders, row_key


def layout_table(run: Any, level: str = "tier") -> list[dict[str, Any]]:
    """One row per (model, protocol, tier or subcategory): attempts, valid, trivial (of all and of valid)."""
    if level not in ("tier", "subcategory"):
        raise ValueError("level is tier or subcategory")
    prompts = by_id()
    rd = reading(run)
    renders = read_renders(rd)
    groups: dict[tuple[str, str, str], dict[str, int]] = {}
    for r in rd.rows(RunDir.GENERATIONS):
        if r["task"] != "layout" or r["prompt_id"] not in prompts:
            continue
        rend = renders.get(row_key(r))
        if rend is None:
            continue  # not rendered yet
        p = prompts[r["prompt_id"]]
        group = p.tier if level == "tier" else p.subcategory
        for g in (group, "all"):
            c = groups.setdefault((r["model"], arm_of(r), g), {"attempts": 0, "valid": 0, "trivial": 0})
            c["attempts"] += 1
            c["valid"] += rend["outcome"] == "ok"
            c["trivial"] += rend["trivial"]
    out = []
    for (model, protocol, g), c in sorted(groups.items()):
        out.append({
            "model": model, "protocol": protocol, level: g, **c,
            "valid_rate": c["valid"] / c["attempts"],
            "trivial_rate": c["trivial"] / c["attempts"],
            "trivial_of_valid": c["trivial"] / c["valid"] if c["valid"] else None,
            "trivial_share_threshold": TRIVIAL_SHARE,
        })
    return out


def format_table(rows: list[dict[str, Any]], level: str) -> str:
    lines = [f"{'model':<24} {'protocol':<14} {level:<12} {'n':>5} {'valid':>7} {'trivial':>8} {'triv/valid':>10}"]
    for r in rows:
        tv = "-" if r["trivial_of_valid"] is None else f"{100 * r['trivial_of_valid']:.1f}%"
        lines.append(f"{r['model']:<24} {r['protocol']:<14} {r[level]:<12} {r['attempts']:>5} {100 * r['valid_rate']:6.1f}% "
                     f"{100 * r['trivial_rate']:7.1f}% {tv:>10}")
    lines.append(f"(trivial: the most frequent colour covers >= {100 * TRIVIAL_SHARE:.0f}% of the cells)")
    return "\n".join(lines)


def paired_delta(a: dict[str, list[float]], b: dict[str, list[float]], n_boot: int = 10_000, seed: int = 0,
                 level: float = 0.95) -> dict[str, Any]:
    """Mean per-prompt difference (b - a) over prompts both arms have, with a prompt-clustered bootstrap CI.

    Each arm's prompt score is the mean over its attempts; prompts (the clusters) are resampled with
    replacement `n_boot` times from a seeded generator; the CI is the percentile interval."""
    import numpy as np

    common = sorted(set(a) & set(b))
    if len(common) < 2:
        raise ValueError("need at least 2 prompts scored in both arms")
    d = np.array([np.mean(b[p]) - np.mean(a[p]) for p in common])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(d), size=(n_boot, len(d)))
    boots = d[idx].mean(axis=1)
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"prompts": len(common), "delta": float(d.mean()), "ci": [float(lo), float(hi)], "level": level,
            "n_boot": n_boot, "seed": seed}


def media_table(run: Any, n_boot: int = 10_000, seed: int = 0) -> list[dict[str, Any]]:
    """Exp. 2: every non-canvas arm (e.g. `svg/few-shot-2`) against the canvas arm of the same protocol,
    per model: the paired per-prompt delta (B - A) with a prompt-clustered bootstrap CI, on the
    valid-and-non-trivial rate and, for each judge with verdicts, on the judge's overall score."""
    from experiments.rundir import AttemptKey, parse_arm

    rd = reading(run)
    renders = read_renders(rd)
    metrics: dict[str, dict[tuple[str, str], dict[str, list[float]]]] = {"valid and non-trivial": {}}
    for r in rd.rows(RunDir.GENERATIONS):
        if r["task"] != "layout":
            continue
        x = renders.get(row_key(r))
        if x is None:
            continue
        good = float(x["outcome"] == "ok" and not x["trivial"])
        metrics["valid and non-trivial"].setdefault((r["model"], arm_of(r)), {}).setdefault(r["prompt_id"], []).append(good)
    if True:
        for r in rd.rows(RunDir.JUDGE_SCORES):
            k = AttemptKey.of({**r, "task": r.get("task", "layout")})
            metrics.setdefault(f"judge {r['judge']} overall", {}).setdefault((k.model, k.arm), {}) \
                .setdefault(k.prompt_id, []).append(r["overall"])
    out = []
    for metric, arms in metrics.items():
        for model, arm in sorted(arms):
            medium, protocol = parse_arm(arm)
            if medium == "v1" or (model, protocol) not in arms:
                continue
            try:
                res = paired_delta(arms[(model, protocol)], arms[(model, arm)], n_boot=n_boot, seed=seed)
            except ValueError:
                continue
            out.append({"model": model, "metric": metric, "a": protocol, "b": arm, **res})
    return out
