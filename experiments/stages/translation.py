"""The translation stage: score attempts against reference geometries (PIoU), resumable on content.

`score_attempts(refs, attempts, out)` reads an attempts file (any JSONL of {ref_id or prompt_id, text};
a run's generations.jsonl works as is) and writes one score row per attempt. Every score row carries
`input`, a hash of the reference, the attempt's text and the scorer version; a rerun keeps the rows
whose inputs match line by line and recomputes from the first that does not, so scoring new attempts
into an old `--out` never reports the old scores. Scoring runs inside the sandbox workers, under their
CPU and memory limits. Input files are validated before anything is written (one sentence per problem).
"""

from __future__ import annotations

import json
import os
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


SCORER = "piou/1"  #: the scorer's version, part of every score row's input hash


def read_jsonl(path: Path, what: str) -> list[dict[str, Any]]:
    """Rows of a user's JSONL file, each a JSON object; one sentence for anything else."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} {path} is a folder, not a JSONL file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} file not found: {path}") from None
    except OSError as e:
        raise InputError(f"cannot read {what} {path}: {e.strerror}") from None
    rows = []
    for n, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(f"{what} {path}: line {n} is not UTF-8 text") from None
        except json.JSONDecodeError as e:
            raise InputError(f"{what} {path}: line {n} is not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise InputError(f"{what} {path}: line {n} is not a JSON object")
        rows.append({k: v for k, v in row.items() if k != "_crc"})
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
    """Score every attempt into `out_path` (resumed on content: see the module docstring); returns the summary."""
    from experiments.rundir import RunError, atomic_write, content_hash, encode_row, parse_rows

    out_path = Path(out_path)
    if out_path.is_dir():
        raise InputError(f"--out {out_path} is a folder; give a file for the scores")
    refs = load_reference_file(refs_path)
    # a run's generations.jsonl works as is: its translation rows name the reference by prompt_id
    attempts = [a for a in read_jsonl(attempts_path, "attempts") if a.get("task", "translation") == "translation"]
    if not attempts:  # an empty file once "scored" 0 attempts and passed for a result
        raise InputError(f"attempts {attempts_path} holds no translation attempts: give one {{ref_id, text}} object per line")
    for n, a in enumerate(attempts, 1):
        if "ref_id" not in a and "prompt_id" in a:
            a["ref_id"] = a["prompt_id"]
        if not isinstance(a.get("ref_id"), str) or not isinstance(a.get("text"), str):
            raise InputError(f"attempts {attempts_path}: line {n} needs 'ref_id' and 'text' as strings")
        if not isinstance(a.get("prefix", ""), str):
            raise InputError(f"attempts {attempts_path}: line {n} has a 'prefix' that is not a string")
        if a["ref_id"] not in refs:
            raise InputError(f"attempts {attempts_path}: line {n} names unknown reference {a['ref_id']!r}")
    ref_json = {rid: json.dumps(r.to_json(), sort_keys=True) for rid, r in refs.items()}
    inputs = [content_hash(SCORER, ref_json[a["ref_id"]], a.get("prefix", "") + a["text"]) for a in attempts]
    done, torn = [], False
    if out_path.exists():
        data = out_path.read_bytes()
        try:
            done, good = parse_rows(out_path, data)
        except RunError as e:
            raise InputError(f"{e}; use a new --out") from None
        torn = good < len(data) or (bool(data) and not data.endswith(b"\n"))
    keep = 0
    while keep < min(len(done), len(attempts)) and done[keep].get("input") == inputs[keep]:
        keep += 1
    if keep < len(done) or torn:  # stale rows (other attempts or references) or a torn tail: keep the matching prefix
        atomic_write(out_path, "".join(encode_row(d) for d in done[:keep]))
    if keep and progress:
        progress(keep)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with SandboxPool(workers=workers) as pool, open(out_path, "a", encoding="utf-8") as out:
        for start in range(keep, len(attempts), CHUNK):
            batch = attempts[start : start + CHUNK]
            # scored inside the workers, under their CPU and memory limits: two interleaved 1,000-tooth
            # combs once stalled the host for minutes; no geometry comes back to the host at all
            jobs = [Job(a.get("prefix", "") + a["text"], geometry=False, reference=refs[a["ref_id"]]) for a in batch]
            results = pool.run_jobs(jobs)
            lines = []
            for i, (a, r) in enumerate(zip(batch, results)):
                s = r.score
                row = {k: v for k, v in a.items() if k not in ("text", "prefix", "code", "entropy", "input")}
                row.update({
                    "outcome": r.outcome, "reason": r.reason, "piou": round(s.piou, 6), "piou_pen": round(s.piou_pen, 6),
                    "overpaint": round(s.overpaint, 6), "piou_color": round(s.piou_color, 6),
                    "part_iou": [round(x, 6) for x in s.part_iou], "input": inputs[start + i],
                })
                lines.append(encode_row(row))
            out.write("".join(lines))  # one write per chunk: a kill leaves at most a torn last line
            out.flush()
            os.fsync(out.fileno())
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
