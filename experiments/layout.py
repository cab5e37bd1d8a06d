"""Layout tables without a judge: validity and triviality per model, protocol, tier and subcategory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.layout.prompts import by_id
from bench.layout.scoring import TRIVIAL_SHARE
from experiments.generation import GENERATIONS, read_rows
from experiments.render import read_renders, row_key
from experiments.rundir import arm_of


def layout_table(run: Path, level: str = "tier") -> list[dict[str, Any]]:
    """One row per (model, protocol, tier or subcategory): attempts, valid, trivial (of all and of valid)."""
    if level not in ("tier", "subcategory"):
        raise ValueError("level is tier or subcategory")
    prompts = by_id()
    renders = read_renders(run)
    groups: dict[tuple[str, str, str], dict[str, int]] = {}
    for r in read_rows(run / GENERATIONS):
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
