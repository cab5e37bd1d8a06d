"""Model names and the model cache folder: the floor below `interp.models` (embedded models) and `interp.organisms`.

`resolve` in interp.models and the organisms' own folders both need the cache folder and the parsing of an
`organism:NAME[@SEED]` name. With those inside `interp.models`, which also dispatches an organism name to
`interp.organisms`, the two modules imported each other (an import circle, found by scripts/import_cycles.py):
here they import neither.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Callable


class ModelError(RuntimeError):
    """A model name or folder that cannot be used, with what to do about it."""


class OrganismError(ValueError):
    """An organism name that cannot be resolved, with what to do about it."""


ORGANISM_PREFIX = "organism:"
_ORGANISM = re.compile(r"^organism:([a-z0-9-]+)(?:@(\d{1,9}))?$")


def cache_dir() -> Path:
    """Where converted embedded models and organisms trained on first use live (`$AMBENCH_CACHE/models`)."""
    return Path(os.environ.get("AMBENCH_CACHE", Path.home() / ".cache" / "ambench")) / "models"


def parse_organism(model: str) -> tuple[str, int]:
    """('xor-planner', 0) from 'organism:xor-planner'; ('tracker', 3) from 'organism:tracker@3'."""
    from interp.organisms.zoo import DEFAULT_SEED, ORGANISMS

    m = _ORGANISM.match(model)
    if not m or m.group(1) not in ORGANISMS:
        raise OrganismError(f"unknown organism {model!r}: use organism:NAME or organism:NAME@SEED with NAME one of "
                            f"{', '.join(ORGANISMS)}")
    return m.group(1), int(m.group(2)) if m.group(2) is not None else DEFAULT_SEED


__all__ = ["ORGANISM_PREFIX", "ModelError", "OrganismError", "cache_dir", "parse_organism"]


def build_once(out: Path, done: Callable[[], bool], build: Callable[[], None]) -> None:
    """Build the folder `out` unless `done()`, one process at a time (`flock` on a lock file beside it): a second
    caller (a parallel test worker, a second study) waits, then finds it done. Under the lock, the `.partial-*`
    folders beside `out` are what a killed build left, and are removed before `build()` runs."""
    import fcntl

    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done():
            return
        for stale in out.parent.glob(f"{out.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        build()
