"""`ambench repair RUN`: drop what a run directory can no longer trust, and what was made from it, so that the
next run recomputes exactly that.

A run refuses to use a row that is edited, corrupted or torn in the middle of a file (`experiments.rundir`:
checked rows), naming the file and line; this is the way out it names. Under the run's lock:
- every JSONL file of the run keeps its whole, checked rows and loses the others (not JSON, no checksum, a
  failed checksum, a torn line);
- rows derived from an attempt that generations.jsonl no longer holds (continuations, cuts, patching,
  attention, translation and judge scores) are dropped with it: the next run generates the attempt again
  (its seed is in its key) and recomputes them;
- store parts (renders, activations) that fail to open or to verify are moved aside (`*.corrupt`), as the
  stages themselves do; their rows are recomputed.
Nothing else changes: results computed from whole files (probes, tables, the report) are rewritten by the
next run from the rows. A repaired study rerun with the same command ends with the files of an
uninterrupted run (tests/experiments/test_finished_study.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from experiments.rundir import AttemptKey, RunDir, lenient_rows, need_run

#: every JSONL file of a run
JSONL = (RunDir.GENERATIONS, RunDir.PROMPTS, RunDir.TRANSLATION_SCORES, RunDir.JUDGE_SCORES, RunDir.JUDGE_CACHE, RunDir.PROBES,
         RunDir.SELECTIVITY, RunDir.ATTENTION, RunDir.CUTS, RunDir.INTERVENTIONS, RunDir.PATCHING, RunDir.STEERING,
         RunDir.CONSISTENCY, RunDir.TRAJECTORY, RunDir.CAUSAL)
#: the files whose rows are made from one attempt (its whole key in the row)
DERIVED = (RunDir.CUTS, RunDir.INTERVENTIONS, RunDir.PATCHING, RunDir.ATTENTION, RunDir.TRANSLATION_SCORES, RunDir.JUDGE_SCORES)
_KEY = ("model", "task", "protocol", "prompt_id", "sample")


def repair_run(run: str | Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Repair `run` (see the module docstring); returns what was dropped or moved aside, per file. What it cannot
    repair is refused in one sentence before the lock is taken (issue 31: a folder that is not a run once got "nothing
    to repair", exit 0 and a .lock; a garbage config.json "nothing to repair" while `ambench run` refused the study)."""
    need_run(Path(run), "rows to repair")
    RunDir(run).config()  # nothing rebuilds a damaged settings record: said, exit 2, before the lock
    with RunDir.writer(run, "ambench repair", create=False) as rd:
        return _repair(rd, say)


def _repair(rd: RunDir, say: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in JSONL:
        path = rd.file(name)
        if not path.is_file():
            continue
        good, bad = lenient_rows(path, path.read_bytes())
        if bad:
            rd.write_rows(name, good)
            out[name] = {"dropped_lines": [n for n, _, _ in bad]}
            for n, why, _ in bad:
                say(f"{name}: dropped line {n} ({why})")
    keys = {AttemptKey.of(r) for r in rd.rows(RunDir.GENERATIONS)}
    for name in DERIVED:
        rows = rd.rows(name)
        keep = [r for r in rows if not all(k in r for k in _KEY) or AttemptKey.of(r) in keys]
        if len(keep) < len(rows):
            rd.write_rows(name, keep)
            out.setdefault(name, {})["dropped_dependants"] = len(rows) - len(keep)
            say(f"{name}: dropped {len(rows) - len(keep)} rows made from attempts that {RunDir.GENERATIONS} no longer holds")
    moved = _stores(rd, say)
    if moved:
        out["stores"] = moved
    say(f"{rd.path}: " + ("repaired; the next run (the same `ambench run`, or the stage's own command) recomputes what was "
                          "dropped" if out else "nothing to repair"))
    return out


def _stores(rd: RunDir, say: Callable[[str], None]) -> list[str]:
    """Move aside the store parts that fail to open or to verify (their rows are recomputed by the next run)."""
    from activations.renders import RenderStore
    from activations.store import repair_store
    from experiments.stages.render import render_store

    moved: list[str] = []
    for folder in rd.activation_stores():
        if not (folder / "meta.json").is_file():
            say(f"{folder} has no meta.json: the next capture rebuilds it from its parts")
            continue
        moved += [str(p) for p in repair_store(folder, say)]
    for folder in rd.render_stores():
        medium = RenderStore.medium_of(folder)
        if medium is None:
            say(f"{folder} has no meta.json: the next render stage rebuilds it from its parts")
            continue
        moved += [str(p) for p in render_store(rd, medium, say).repair()]
    return moved


__all__ = ["repair_run"]
