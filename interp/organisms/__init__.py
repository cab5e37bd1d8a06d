"""Model organisms: small Llamas trained here on canvas programs whose plan we constructed (known answers).

Each organism (see `interp.organisms.zoo.ORGANISMS` and docs/organisms.md) is a data generator in a
small controlled language, a character-level tokenizer with a chat template, and a deterministic CPU
training run that writes an ordinary Hugging Face folder. The pipeline loads it like any model:
`--model organism:NAME` (or `organism:NAME@SEED`) resolves, through `interp.models`, to

1. the committed folder `interp/organisms/weights/NAME` when the seed is the default and the folder
   was built by the current code (its `training.json` records the code version), else
2. `$AMBENCH_CACHE/models/organism-NAME-s{SEED}-{code version}`, trained on first use (minutes on
   two cores) under a file lock and renamed into place when complete, so a killed build leaves only a
   `.partial-*` folder that the next build removes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Callable

PREFIX = "organism:"
WEIGHTS = Path(__file__).parent / "weights"
_NAME = re.compile(r"^organism:([a-z0-9-]+)(?:@(\d{1,9}))?$")


class OrganismError(ValueError):
    """An organism name that cannot be resolved, with what to do about it."""


def parse(model: str) -> tuple[str, int]:
    """('xor-planner', 0) from 'organism:xor-planner'; ('tracker', 3) from 'organism:tracker@3'."""
    from interp.organisms.zoo import DEFAULT_SEED, ORGANISMS

    m = _NAME.match(model)
    if not m or m.group(1) not in ORGANISMS:
        raise OrganismError(f"unknown organism {model!r}: use organism:NAME or organism:NAME@SEED with NAME one of "
                            f"{', '.join(ORGANISMS)}")
    return m.group(1), int(m.group(2)) if m.group(2) is not None else DEFAULT_SEED


def record(folder: Path) -> dict | None:
    """The folder's training.json, or None when it has none (or an unreadable one)."""
    try:
        return json.loads((folder / "training.json").read_text())
    except (OSError, ValueError):
        return None


def committed(name: str) -> Path | None:
    """The committed folder of `name` when it exists and was built by the current code, else None."""
    from interp.organisms.zoo import DEFAULT_SEED, code_version

    folder = WEIGHTS / name
    rec = record(folder)
    if rec is None or rec.get("seed") != DEFAULT_SEED or rec.get("code_version") != code_version(name):
        return None
    return folder


def cache_folder(name: str, seed: int) -> Path:
    from interp.models import cache_dir
    from interp.organisms.zoo import code_version

    return cache_dir() / f"organism-{name}-s{seed}-{code_version(name)}"


def build_folder(name: str, out: Path, seed: int, progress: Callable[[int, float], None] | None = None) -> dict:
    """Train organism `name` with `seed` into the new folder `out`; returns its training record."""
    from interp.organisms.build import train_organism
    from interp.organisms.zoo import code_version, get

    spec = get(name)
    return train_organism(name, spec.dataset(), spec.config, out, seed, code_version(name), progress,
                          known_answer={"kind": spec.constructs, "statement": spec.known_answer})


def folder_for(model: str, progress: Callable[[int, float], None] | None = None) -> Path:
    """The folder of `organism:NAME[@SEED]`: committed, cached, or trained now (see the module docstring)."""
    import fcntl

    name, seed = parse(model)
    from interp.organisms.zoo import DEFAULT_SEED

    if seed == DEFAULT_SEED and (found := committed(name)) is not None:
        return found
    out = cache_folder(name, seed)
    if record(out) is not None:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per organism at a time; a second caller waits and reuses it
        if record(out) is not None:
            return out
        # under the lock, a partial folder is what a killed build left behind
        for stale in out.parent.glob(f"{out.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if out.exists():  # a folder without a readable training.json was not finished by us
            shutil.rmtree(out)
        build_folder(name, out, seed, progress)
    return out
