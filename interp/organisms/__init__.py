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

Training scores the new folder on its held-out prompts through the runtime, which the caller hands in
(`evaluate`: `Runtime.load` passes `interp.runtime.evaluate_organism`): loading a model by name may train an
organism, so this package never imports the runtime, which would be an import circle
(interp.runtime -> interp.models -> interp.organisms -> interp.runtime).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

# the name parsing and the cache folder live one floor down, shared with interp.models (no import circle)
from interp.model_names import ORGANISM_PREFIX as PREFIX
from interp.model_names import OrganismError, build_once, cache_dir
from interp.model_names import parse_organism as parse

WEIGHTS = Path(__file__).parent / "weights"
#: scores a freshly built folder: evaluate(folder, dataset, batch) -> the record's "eval" (held-out accuracy)
Evaluate = Callable[[Path, Any, int], dict]


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
    from interp.organisms.zoo import code_version

    return cache_dir() / f"organism-{name}-s{seed}-{code_version(name)}"


def build_folder(name: str, out: Path, seed: int, progress: Callable[[int, float], None] | None = None,
                 evaluate: Evaluate | None = None) -> dict:
    """Train organism `name` with `seed` into the new folder `out`; returns its training record (with the held-out
    evaluation when `evaluate` is given: `interp.runtime.evaluate_organism`)."""
    from interp.organisms.build import train_organism
    from interp.organisms.zoo import code_version, get

    spec = get(name)
    return train_organism(name, spec.dataset(), spec.config, out, seed, code_version(name), progress,
                          known_answer={"kind": spec.constructs, "statement": spec.known_answer}, evaluate=evaluate)


def folder_for(model: str, progress: Callable[[int, float], None] | None = None, evaluate: Evaluate | None = None) -> Path:
    """The folder of `organism:NAME[@SEED]`: committed, cached, or trained now (see the module docstring); `evaluate`
    scores a folder trained now (`Runtime.load` passes the runtime's `evaluate_organism`)."""
    name, seed = parse(model)
    from interp.organisms.zoo import DEFAULT_SEED

    if seed == DEFAULT_SEED and (found := committed(name)) is not None:
        return found
    out = cache_folder(name, seed)
    if record(out) is not None:
        return out
    def build() -> None:
        if out.exists():  # a folder without a readable training.json was not finished by us
            shutil.rmtree(out)
        build_folder(name, out, seed, progress, evaluate)

    build_once(out, lambda: record(out) is not None, build)  # one build per organism at a time
    return out
