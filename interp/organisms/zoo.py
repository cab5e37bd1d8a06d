"""The organisms by name: each one's data set, training settings and known answer, and its code version.

`code_version(name)` hashes what decides an organism's weights: the tokenizer, the data and training
modules, its own generator module, its name and its training config. A built organism records it; a
cached or committed folder built by other code is not used for `organism:NAME`. Changing the tracker's
generator therefore leaves the planners' committed weights valid.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from interp.organisms import decoy, planners, tracker, translator
from interp.organisms.data import Dataset
from interp.organisms.train import TrainConfig

DEFAULT_SEED = 0
#: the modules whose source decides every organism's weights (each organism adds its generator module)
COMMON = ("data.py", "tokenizer.py", "train.py")


@dataclass(frozen=True)
class Organism:
    """A model organism: a named data set, how to train on it, and what the pipeline must find in it."""

    name: str
    task: str  #: the task label of its prompts (translation or layout)
    summary: str  #: one line on what it does
    known_answer: str  #: what a method must recover on it (docs/organisms.md has the full statement)
    dataset: Callable[[], Dataset]  #: builds the data set (prompt split fixed by the family's DATA_SEED)
    config: TrainConfig  #: model size and optimisation
    module: str  #: file name of its generator module (part of its code version)
    #: the kind of known answer it constructs, which decides its verdict rule (experiments/organisms.py, KINDS)
    constructs: str = ""
    #: other modules its generator reads (hashed into its code version too: the decoy builds on planners.py)
    uses: tuple[str, ...] = ()


ORGANISMS: dict[str, Organism] = {o.name: o for o in (
    Organism(
        "translator", "translation",
        "transcribes 1-4 exactly stated shapes (rect, disc, line) into calls",
        "held-out PIoU ~1; the described occupancy is in the prompt, so probes compete with the text",
        translator.dataset, TrainConfig(steps=1500), "translator.py", "stated-geometry"),
    Organism(
        "xor-planner", "layout",
        "two bars placed by v = A xor B (horizontal bar) and h = B xor C (vertical bar)",
        "probe R^2 high after the last attribute, ~0 at the embeddings and at `subject`; TF-IDF R^2 ~0",
        lambda: planners.dataset("xor-planner"), TrainConfig(steps=1000), "planners.py", "hidden-plan"),
    Organism(
        "xor-planner-b", "layout",
        "the same prompts and bars, placed by v = A xor D and h = C xor D",
        "as xor-planner; shares v with it and differs in h: cross-model selectivity > 0",
        lambda: planners.dataset("xor-planner-b"), TrainConfig(steps=1000), "planners.py", "hidden-plan"),
    Organism(
        "random-planner", "layout",
        "the same prompts and bars, placed by fair coin flips independent of the prompt",
        "nothing to find: probe R^2 <= 0 with p_perm not significant; split-half ceiling ~0",
        lambda: planners.dataset("random-planner"), TrainConfig(steps=500), "planners.py", "no-plan"),
    Organism(
        "tracker", "layout",
        "covers a region with squares, each on the first slot less than half painted so far",
        "moved-unused continues far more than null-asis and more than moved-used",
        lambda: tracker.dataset("tracker"), TrainConfig(steps=1500, max_positions=768), "tracker.py", "state-tracking"),
    Organism(
        "fixed-plan", "layout",
        "covers a region with one square per slot in order, whatever the earlier squares drew",
        "moved arms continue as often as null-asis (every moved-arm Delta ~0)",
        lambda: tracker.dataset("fixed-plan"), TrainConfig(steps=1000), "tracker.py", "fixed-plan"),
    Organism(
        "decoy-planner", "layout",
        "announces the xor-planner's layout in its first line, then draws the xor-planner-b's",
        "the announced layout is readable at the last prompt token and drives the line, but the drawing does not "
        "read it: interchange and erasure there change the line, not what is drawn",
        decoy.dataset, TrainConfig(steps=3000), "decoy.py", "readable-unused", uses=("planners.py",)),
)}


def get(name: str) -> Organism:
    if name not in ORGANISMS:
        raise KeyError(f"unknown organism {name!r}: use one of {', '.join(ORGANISMS)}")
    return ORGANISMS[name]


def code_version(name: str) -> str:
    """sha256 (16 hex digits) of the sources, name and config that decide organism `name`'s weights."""
    spec = get(name)
    h = hashlib.sha256(json.dumps([name, spec.config.as_dict()], sort_keys=True).encode())
    here = Path(__file__).parent
    for fname in COMMON + (spec.module,) + spec.uses:
        h.update(b"\0" + fname.encode() + b"\0" + (here / fname).read_bytes())
    return h.hexdigest()[:16]
