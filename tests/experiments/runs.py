"""Preparing run directories in tests: rows appended under the run's lock, as the stages write them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from experiments.rundir import RunDir, read_rows

GENERATIONS = RunDir.GENERATIONS

__all__ = ["GENERATIONS", "append", "read_rows"]


def append(run: Path, rows: Sequence[Mapping[str, Any]], name: str = RunDir.GENERATIONS) -> None:
    with RunDir.writer(run, "test fixture") as rd:
        rd.append(name, rows)
