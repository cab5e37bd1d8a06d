"""What every organism's data is made of: prompt items paired with canvas programs, split by prompt.

An organism's data set is a `Dataset`: held-out prompt items (never trained on) with the program the
organism should write for each, and a training stream drawn from the other prompts. The answer a
model is trained to write is `preamble + ANSWER_OPEN + program + ANSWER_CLOSE` followed by the
end-of-sequence token: an optional line of prose (the planners name their plan there), then a ```python
fenced block whose body is one top-level primitive call per line with literal integer coordinates, so
extraction, the fence stop rule, coordinate splicing and the continued-drawing test of the pipeline all
apply unchanged.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from interp.prompts import PromptItem

ANSWER_OPEN = "```python\n"
ANSWER_CLOSE = "```"


def answer(program: str, preamble: str = "") -> str:
    """The text an organism writes for `program` (one statement per line, each ending in a newline),
    after an optional `preamble` line before the code block."""
    if not program.endswith("\n"):
        raise ValueError("a program's last statement ends with a newline")
    if preamble and (not preamble.endswith("\n") or "`" in preamble):
        raise ValueError("a preamble is one line of prose before the code block")
    return preamble + ANSWER_OPEN + program + ANSWER_CLOSE


def call(name: str, *args: Any) -> str:
    """One primitive call in the organisms' compact style: no spaces, colours quoted, e.g. rect(2,3,4,5,'red')."""
    return f"{name}(" + ",".join(f"'{a}'" if isinstance(a, str) else str(int(a)) for a in args) + ")\n"


@dataclass(frozen=True)
class Example:
    """One prompt and the program written for it, with the constructed plan (the known answer)."""

    item: PromptItem
    program: str  #: the program body (statements, no fence); for held-out items, the program to reproduce
    plan: dict[str, Any] = field(default_factory=dict, compare=False)  #: JSON-able ground truth for this prompt
    preamble: str = ""  #: a line the organism writes before its code block ("" for most organisms)

    @property
    def answer(self) -> str:
        return answer(self.program, self.preamble)


@dataclass(frozen=True)
class Dataset:
    """Held-out examples (one per held-out prompt) and a seeded source of training examples."""

    heldout: tuple[Example, ...]
    train_prompts: int | None  #: how many distinct prompts the training stream draws from (None: fresh random prompts)
    sample: Callable[[np.random.Generator], Example]  #: one training example (prompt and program) from an rng
    check: Callable[[Example, str], bool]  #: does a generated answer (the text up to the closing fence) count as correct
    extra: dict[str, Any] = field(default_factory=dict)  #: organism-specific files to write (name -> rows)

    def training_examples(self, n: int, seed: int) -> list[Example]:
        rng = np.random.default_rng(seed)
        return [self.sample(rng) for _ in range(n)]


def exact(example: Example, text: str) -> bool:
    """The answer is exactly the held-out example's answer."""
    return text == example.answer


def data_digest(examples: Sequence[Example], heldout: Sequence[Example]) -> str:
    """sha256 of every training and held-out text, in order: equal digests mean equal data."""
    h = hashlib.sha256()
    for tag, rows in (("train", examples), ("heldout", heldout)):
        for ex in rows:
            h.update(json.dumps([tag, ex.item.id, ex.item.text, ex.answer if ex.program else ""]).encode())
    return h.hexdigest()


def split_ids(keys: Sequence[Any], share: float, rng: np.random.Generator, strata: Callable[[Any], Any]) -> set[Any]:
    """A held-out subset taking `share` of every stratum (at least one per stratum), chosen by `rng`."""
    groups: dict[Any, list[Any]] = {}
    for k in keys:
        groups.setdefault(strata(k), []).append(k)
    out: set[Any] = set()
    for g in sorted(groups, key=repr):
        members = groups[g]
        n = max(1, int(round(share * len(members))))
        pick = rng.permutation(len(members))[:n]
        out.update(members[i] for i in pick)
    return out
