"""The translation pipeline: score model attempts against references (resumable JSONL in, JSONL out)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bench.sandbox.job import Job
from bench.sandbox.pool import SandboxPool
from bench.translation.baseline import TAU, passes_gate
from bench.translation.references import Reference

CHUNK = 512


class InputError(ValueError):
    """A references or attempts file that cannot be used as given."""


def read_jsonl(path: Path, what: str) -> list[dict[str, Any]]:
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise InputError(f"{what} {path}: line {n} is not JSON ({e.msg})") from None
    except FileNotFoundError:
        raise InputError(f"{what} file not found: {path}") from None
    return rows


def load_reference_file(path: Path) -> dict[str, Reference]:
    refs = {}
    for row in read_jsonl(path, "references"):
        try:
            ref = Reference.from_json(row)
        except (KeyError, TypeError) as e:
            raise InputError(f"references {path}: a row is missing {e}") from None
        refs[ref.id] = ref
    return refs


def score_attempts(
    refs_path: Path, attempts_path: Path, out_path: Path, workers: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Score every attempt; appends to `out_path` and resumes after the lines already there."""
    refs = load_reference_file(refs_path)
    # a run's generations.jsonl works as is: its translation rows name the reference by prompt_id
    attempts = [a for a in read_jsonl(attempts_path, "attempts") if a.get("task", "translation") == "translation"]
    for a in attempts:
        if "ref_id" not in a and "prompt_id" in a:
            a["ref_id"] = a["prompt_id"]
    for n, a in enumerate(attempts, 1):
        if "ref_id" not in a or "text" not in a:
            raise InputError(f"attempts {attempts_path}: line {n} needs 'ref_id' and 'text'")
        if a["ref_id"] not in refs:
            raise InputError(f"attempts {attempts_path}: line {n} names unknown reference {a['ref_id']!r}")
    done = read_jsonl(out_path, "scores") if out_path.exists() else []
    for n, (d, a) in enumerate(zip(done, attempts), 1):
        if d.get("ref_id") != a["ref_id"]:
            raise InputError(f"{out_path} line {n} does not belong to {attempts_path}; use a new --out")
    if len(done) > len(attempts):
        raise InputError(f"{out_path} has more lines than {attempts_path}; use a new --out")
    if done and progress:
        progress(len(done))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with SandboxPool(workers=workers) as pool, open(out_path, "a", encoding="utf-8") as out:
        for start in range(len(done), len(attempts), CHUNK):
            batch = attempts[start : start + CHUNK]
            # scored inside the workers, under their CPU and memory limits: two interleaved 1,000-tooth
            # combs once stalled the host for minutes; no geometry comes back to the host at all
            jobs = [Job(a.get("prefix", "") + a["text"], geometry=False, reference=refs[a["ref_id"]]) for a in batch]
            results = pool.run_jobs(jobs)
            lines = []
            for a, r in zip(batch, results):
                s = r.score
                row = {k: v for k, v in a.items() if k not in ("text", "prefix", "code", "entropy")}
                row.update({
                    "outcome": r.outcome, "reason": r.reason, "piou": round(s.piou, 6), "piou_pen": round(s.piou_pen, 6),
                    "overpaint": round(s.overpaint, 6), "piou_color": round(s.piou_color, 6),
                    "part_iou": [round(x, 6) for x in s.part_iou],
                })
                lines.append(json.dumps(row) + "\n")
            out.writelines(lines)
            out.flush()
            if progress:
                progress(len(batch))
    return summarise(read_jsonl(out_path, "scores"))


def summarise(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    rows = list(rows)
    p = np.array([r["piou"] for r in rows]) if rows else np.zeros(0)
    return {
        "attempts": len(rows),
        "valid_rate": float(np.mean([r["outcome"] == "ok" for r in rows])) if rows else 0.0,
        "piou_mean": float(p.mean()) if rows else 0.0,
        "piou_median": float(np.median(p)) if rows else 0.0,
        "piou_pen_mean": float(np.mean([r["piou_pen"] for r in rows])) if rows else 0.0,
        "piou_color_mean": float(np.mean([r["piou_color"] for r in rows])) if rows else 0.0,
        "pass_rate": float((p >= TAU).mean()) if rows else 0.0,
        "gate_tau": TAU,
        "passes_gate": passes_gate(p.tolist()),
    }
