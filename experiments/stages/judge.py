"""Judging a run's layout attempts, and the analyses over verdicts (pass@k, judge agreement, T2/T3 inversion)."""

from __future__ import annotations

import json
from math import comb
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bench.canvas.png import png_bytes, scale_for
from bench.layout.judge import DIMENSIONS, PASS, RUBRIC_VERSION, Judge, VerdictCache, cache_key
from experiments.rundir import RunDir, reading, writing
from experiments.stages.render import read_renders, render_stage, row_key
from experiments.rundir import AttemptKey, arm_of

JUDGE_SCORES = RunDir.JUDGE_SCORES
JUDGE_CACHE = "judge_cache.jsonl"
#: the side of the image a judge sees: the paper canvas upscaled x16; a 48-cell render is upscaled x8, so
#: every medium reaches the judge at one size and only its cells differ
JUDGE_IMAGE_SIDE = 384


def judge_stage(run: Any, judge: Judge, progress: Callable[[int], None] | None = None) -> dict[str, int]:
    """Judge every valid layout attempt (cached), then rewrite RUN/judge_scores.jsonl for this judge.

    Invalid attempts are not sent: they score 0 on every dimension and fail."""
    with writing(run) as rd:
        return _judge(rd, judge, progress)


def _judge(rd: RunDir, judge: Any, progress: Callable[[int], None] | None) -> dict[str, int]:
    from experiments.stages.layout import layout_group

    render_stage(rd)
    tier_of, subcategory_of = layout_group(rd, "tier"), layout_group(rd, "subcategory")
    renders = read_renders(rd)
    cache = VerdictCache(rd.file(RunDir.JUDGE_CACHE))
    # every layout attempt, of the benchmark's prompts or of a custom prompt set (its text as the run recorded it)
    rows = [r for r in rd.rows(RunDir.GENERATIONS) if r["task"] == "layout"]
    texts = {pid: rd.prompt_item("layout", pid).text for pid in sorted({r["prompt_id"] for r in rows})}
    out, asked, cached = [], 0, 0
    for r in rows:
        rend = renders[row_key(r)]
        base = {k: r[k] for k in ("model", "task", "protocol", "prompt_id", "sample")}
        base["medium"] = AttemptKey.of(r).medium
        base.update(judge=judge.name, rubric=RUBRIC_VERSION, tier=tier_of(r["prompt_id"]),
                    subcategory=subcategory_of(r["prompt_id"]))
        if rend["outcome"] != "ok":
            out.append(dict(base, valid=False, scores={d: 0 for d in DIMENSIONS}, overall=0.0, passed=False))
        else:
            png = png_bytes(rend["pixels"], scale_for(rend["pixels"], JUDGE_IMAGE_SIDE))
            key = cache_key(png, texts[r["prompt_id"]], judge.name)
            v = cache.get(key)
            if v is None:
                v = judge.judge(texts[r["prompt_id"]], png)
                cache.put(key, v)
                asked += 1
            else:
                cached += 1
            out.append(dict(base, valid=True, scores=v.scores, overall=round(v.overall, 6), passed=v.passed))
        if progress:
            progress(1)
    keep = [x for x in rd.rows(JUDGE_SCORES) if x["judge"] != judge.name]
    rd.write_rows(JUDGE_SCORES, keep + out)
    return {"attempts": len(out), "asked": asked, "cached": cached}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), for n attempts with c passes."""
    if k > n:
        raise ValueError(f"k={k} > n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_at_k_table(rows: Iterable[dict[str, Any]], ks: Iterable[int] = (1, 3, 5, 10)) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, str], dict[str, list[bool]]] = {}
    for r in rows:
        groups.setdefault((r["judge"], r["model"], arm_of(r)), {}).setdefault(r["prompt_id"], []).append(r["passed"])
    out = []
    for (judge, model, arm), per_prompt in sorted(groups.items()):
        n_min = min(len(v) for v in per_prompt.values())
        row: dict[str, Any] = {"judge": judge, "model": model, "protocol": arm, "prompts": len(per_prompt)}
        for k in ks:
            if k <= n_min:
                row[f"pass@{k}"] = float(np.mean([pass_at_k(len(v), sum(v), k) for v in per_prompt.values()]))
        out.append(row)
    return out


def judge_agreement(rows: Iterable[dict[str, Any]], a: str, b: str) -> dict[str, Any]:
    """Spearman between two judges' overall scores, at model level and at sample level."""
    from scipy.stats import spearmanr

    by: dict[str, dict[tuple, float]] = {a: {}, b: {}}
    for r in rows:
        if r["judge"] in by:
            k = AttemptKey.of({**r, "task": r.get("task", "layout")})
            by[r["judge"]][(k.model, k.protocol, k.medium, k.prompt_id, k.sample)] = r["overall"]
    common = sorted(set(by[a]) & set(by[b]))
    if len(common) < 3:
        raise ValueError(f"judges {a} and {b} share {len(common)} attempts; need at least 3")
    sample = spearmanr([by[a][k] for k in common], [by[b][k] for k in common])
    models = sorted({k[0] for k in common})
    ma = [np.mean([by[a][k] for k in common if k[0] == m]) for m in models]
    mb = [np.mean([by[b][k] for k in common if k[0] == m]) for m in models]
    model_rho = float(spearmanr(ma, mb).statistic) if len(models) >= 3 else None
    return {"judges": [a, b], "attempts": len(common), "sample_rho": float(sample.statistic), "sample_p": float(sample.pvalue),
            "models": len(models), "model_rho": model_rho}


def inversion_table(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean overall score on T2 (icons) and T3 (compositions) per judge, model and arm; inverted when T3 > T2."""
    acc: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for r in rows:
        if r["tier"] in ("T2", "T3"):
            acc.setdefault((r["judge"], r["model"], arm_of(r)), {"T2": [], "T3": []})[r["tier"]].append(r["overall"])
    out = []
    for (judge, model, arm), t in sorted(acc.items()):
        if t["T2"] and t["T3"]:
            t2, t3 = float(np.mean(t["T2"])), float(np.mean(t["T3"]))
            out.append({"judge": judge, "model": model, "protocol": arm, "T2": t2, "T3": t3, "inverted": t3 > t2})
    return out


__all__ = ["JUDGE_SCORES", "PASS", "inversion_table", "judge_agreement", "judge_stage", "pass_at_k", "pass_at_k_table"]
