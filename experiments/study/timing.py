"""Where a study's time goes: wall and CPU seconds per stage, printed at the end of `ambench run`.

The CPU column is what makes times on a shared machine comparable: wall time grows with the other jobs
on the cores, CPU time much less. It counts this process (every torch thread) and the child processes
that ended during the stage (the sandbox workers of the render and scoring stages). Timings never enter
result files (a run's files are byte-identical across runs); `ambench run --timings FILE` appends them
as JSON lines as each stage ends, which the main job (scripts/main_job.sh) prints as one table at its end.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have ended."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class StageTimes:
    """Wall and CPU seconds of each stage of a study, in the order they ran; `prefix` names the study
    (a part of the organisms preset) in front of every stage. With `path`, each stage is appended there as a
    JSON line (labelled `step`) as soon as it ends, so a killed run keeps the times of what it did."""

    def __init__(self, prefix: str = "", path: Path | None = None, step: str = "") -> None:
        self.prefix = prefix
        self.path = path
        self.step = step
        self.rows: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        w0, c0 = time.perf_counter(), cpu_seconds()
        try:
            yield
        finally:
            row = {"stage": f"{self.prefix}{name}", "wall_s": round(time.perf_counter() - w0, 2),
                   "cpu_s": round(cpu_seconds() - c0, 2), "load": round(os.getloadavg()[0], 2)}
            self.rows.append(row)
            if self.path is not None:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"step": self.step, **row}, sort_keys=True) + "\n")

    def table(self) -> str:
        return format_table(self.rows)


def format_table(rows: list[dict[str, Any]], total: list[dict[str, Any]] | None = None) -> str:
    """Stages as an aligned text table with a total line (seconds, rounded for people) summed over `total`
    (default: every row)."""
    if not rows:
        return ""
    width = max(len(r["stage"]) for r in rows)
    lines = [f"{'stage':<{width}}  {'wall s':>8}  {'CPU s':>8}  {'load':>5}"]
    for r in rows:
        lines.append(f"{r['stage']:<{width}}  {r['wall_s']:>8.1f}  {r['cpu_s']:>8.1f}  {r.get('load', float('nan')):>5.1f}")
    summed = rows if total is None else total
    lines.append(f"{'total':<{width}}  {sum(r['wall_s'] for r in summed):>8.1f}  {sum(r['cpu_s'] for r in summed):>8.1f}")
    return "\n".join(lines)


__all__ = ["StageTimes", "cpu_seconds", "format_table"]
