"""Layout tables without a judge: validity and triviality per model, protocol, tier and subcategory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.layout.prompts import by_id
from bench.layout.scoring import TRIVIAL_SHARE
from experiments.rundir import RunDir, arm_of, reading
from experiments.stages.render import read_renders, row_key


#: the tier and subcategory of a layout prompt that is not one of the benchmark's 150 (a custom prompt set)
CUSTOM = "custom"


def layout_group(rd: RunDir, level: str) -> Any:
    """prompt id -> its tier (or subcategory): the benchmark's for its own prompts, `custom` for any other
    (a prompt set of `--prompts`, or a built-in id recorded with another text), so tables cover every prompt set."""
    prompts = by_id()
    recorded = rd.prompts()

    def group(pid: str) -> str:
        p = prompts.get(pid)
        item = recorded.get(("layout", pid))
        if p is None or (item is not None and item.text != p.text):
            return CUSTOM
        return p.tier if level == "tier" else p.subcategory

    return group


def layout_table(run: Any, level: str = "tier") -> list[dict[str, Any]]:
    """One row per (model, protocol, tier or subcategory): attempts, valid, trivial (of all and of valid). Prompts
    outside the benchmark's 150 form the group `custom`."""
    if level not in ("tier", "subcategory"):
        raise ValueError("level is tier or subcategory")
    rd = reading(run)
    group_of = layout_group(rd, level)
    renders = read_renders(rd)
    groups: dict[tuple[str, str, str], dict[str, int]] = {}
    for r in rd.rows(RunDir.GENERATIONS):
        if r["task"] != "layout":
            continue
        rend = renders.get(row_key(r))
        if rend is None:
            continue  # not rendered yet
        group = group_of(r["prompt_id"])
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
    from experiments.rundir import parse_arm

    metrics = _arm_scores(reading(run))
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


# --------------------------------------------------------------------------- the T2/T3 gap across media (issue 16)


def tier_gap(t2: Any, t3: Any, n_boot: int = 10_000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """mean(t3) - mean(t2) over per-prompt values, with a tier-stratified prompt bootstrap CI.

    `t2`, `t3`: one value per prompt of each tier (a prompt's mean over its attempts, or, for a contrast
    between media, the prompt's per-medium difference). Each resample draws n2 T2 prompts from the T2
    prompts and n3 T3 prompts from the T3 prompts, with replacement (a seeded generator); the CI is the
    percentile interval. Stratified because tier membership is fixed by the design (the prompt set has
    fifty of each): the statistic is a difference of two tier means, and letting the tier sizes vary
    would add variance the design does not have."""
    import numpy as np

    x2, x3 = np.asarray(t2, dtype=float), np.asarray(t3, dtype=float)
    if len(x2) < 2 or len(x3) < 2:
        raise ValueError("need at least 2 prompts in each of T2 and T3")
    rng = np.random.default_rng(seed)
    i2 = rng.integers(0, len(x2), size=(n_boot, len(x2)))
    i3 = rng.integers(0, len(x3), size=(n_boot, len(x3)))
    boots = x3[i3].mean(axis=1) - x2[i2].mean(axis=1)
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
    return {"T2": float(x2.mean()), "T3": float(x3.mean()), "gap": float(x3.mean() - x2.mean()), "ci": [float(lo), float(hi)],
            "n_T2": len(x2), "n_T3": len(x3), "level": level, "n_boot": n_boot, "seed": seed}


def _arm_scores(rd: Any) -> dict[str, dict[tuple[str, str], dict[str, list[float]]]]:
    """metric -> (model, arm) -> prompt id -> per-attempt scores: valid-and-non-trivial (0/1) for every
    rendered layout attempt, and each judge's overall score where verdicts exist."""
    from experiments.rundir import AttemptKey

    renders = read_renders(rd)
    metrics: dict[str, dict[tuple[str, str], dict[str, list[float]]]] = {"valid and non-trivial": {}}
    for r in rd.rows(RunDir.GENERATIONS):
        x = renders.get(row_key(r)) if r["task"] == "layout" else None
        if x is not None:
            good = float(x["outcome"] == "ok" and not x["trivial"])
            metrics["valid and non-trivial"].setdefault((r["model"], arm_of(r)), {}).setdefault(r["prompt_id"], []).append(good)
    for r in rd.rows(RunDir.JUDGE_SCORES):
        k = AttemptKey.of({**r, "task": r.get("task", "layout")})
        metrics.setdefault(f"judge {r['judge']} overall", {}).setdefault((k.model, k.arm), {}) \
            .setdefault(k.prompt_id, []).append(r["overall"])
    return metrics


def _by_tier(scores: dict[str, float], tiers: dict[str, str]) -> tuple[list[float], list[float]]:
    """(T2 values, T3 values) of per-prompt scores, in prompt-id order."""
    keys = sorted(scores)
    return [scores[p] for p in keys if tiers[p] == "T2"], [scores[p] for p in keys if tiers[p] == "T3"]


def _gap(scores: dict[str, float], tiers: dict[str, str]) -> float:
    t2, t3 = _by_tier(scores, tiers)
    return sum(t3) / len(t3) - sum(t2) / len(t2)


def tier_gap_table(run: Any, n_boot: int = 10_000, seed: int = 0) -> list[dict[str, Any]]:
    """Is the T2/T3 inversion a property of the 24x24 medium? Per metric, model (and `pooled` over the
    models) and protocol, for every medium the run has:
    - `kind: gap`: T3 - T2 of the per-prompt score (a prompt's mean over its attempts; tiers from the
      built-in prompt set), with a tier-stratified prompt bootstrap CI (`tier_gap`); positive = the
      paper's inversion;
    - `kind: contrast` (each medium B against the paper's canvas A = `v1` of the same protocol): the
      difference of the two gaps over the prompts both media scored, gap(B) - gap(A) =
      mean_T3(s_B - s_A) - mean_T2(s_B - s_A), paired by prompt (a resampled prompt brings both media's
      scores, so what a prompt does to both media cancels) and stratified by tier like the gap.
    `pooled` averages, per prompt, the per-prompt scores of the models that have it. Empty unless the
    run has layout attempts of one protocol in at least two media."""
    from bench.layout.prompts import by_id
    from experiments.rundir import DEFAULT_MEDIUM, parse_arm

    tiers = {pid: p.tier for pid, p in by_id().items() if p.tier in ("T2", "T3")}
    out: list[dict[str, Any]] = []
    for metric, arms in _arm_scores(reading(run)).items():
        by_protocol: dict[str, dict[str, dict[str, dict[str, float]]]] = {}  # protocol -> medium -> model -> prompt -> mean
        for (model, arm), prompts in arms.items():
            medium, protocol = parse_arm(arm)
            means = {p: float(sum(v) / len(v)) for p, v in prompts.items() if p in tiers}
            by_protocol.setdefault(protocol, {}).setdefault(medium, {})[model] = means
        for protocol, media in sorted(by_protocol.items()):
            if len(media) < 2:
                continue
            names = sorted({m for models in media.values() for m in models})
            names += ["pooled"] if len(names) > 1 else []
            for models in media.values() if len(names) > 1 else []:  # per prompt, the mean over the models that have it
                pool: dict[str, list[float]] = {}
                for means in models.values():
                    for p, v in means.items():
                        pool.setdefault(p, []).append(v)
                models["pooled"] = {p: float(sum(v) / len(v)) for p, v in pool.items()}
            base = {"metric": metric, "protocol": protocol}
            order = sorted(media, key=lambda m: (m != DEFAULT_MEDIUM, m))
            for model in names:
                for medium in order:
                    s = media[medium].get(model)
                    try:
                        res = tier_gap(*_by_tier(s, tiers), n_boot, seed) if s else None
                    except ValueError:
                        res = None
                    if res is not None:
                        out.append({**base, "kind": "gap", "model": model, "medium": medium, **res, "inverted": res["gap"] > 0})
                a = media.get(DEFAULT_MEDIUM, {}).get(model)
                for medium in order[1:] if a else []:
                    b = media[medium].get(model) or {}
                    common = sorted(set(a) & set(b))
                    try:
                        res = tier_gap(*_by_tier({p: b[p] - a[p] for p in common}, tiers), n_boot, seed)
                    except ValueError:
                        continue
                    out.append({**base, "kind": "contrast", "model": model, "a": DEFAULT_MEDIUM, "b": medium,
                                "gap_a": _gap({p: a[p] for p in common}, tiers), "gap_b": _gap({p: b[p] for p in common}, tiers),
                                "difference": res["gap"], "ci": res["ci"], "n_T2": res["n_T2"], "n_T3": res["n_T3"],
                                "level": res["level"], "n_boot": n_boot, "seed": seed})
    return out
