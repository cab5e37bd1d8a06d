"""The decoy planner: a plan that is readable where it is announced and unused where the bars are drawn.

The same prompts as the planners (`interp.organisms.planners`: four binary attributes A, B, C, D named apart). The
answer's first line announces a layout, (v, h) = (A xor B, B xor C), the xor-planner's: the model must compute it at
the last prompt token to write that line, so a probe reads it there exactly as on the xor-planner. The program then
draws the bars by *another* rule, (v, h) = (A xor D, C xor D) (the xor-planner-b's), which each training program
follows whatever the line said. Each bit of one rule is independent of both bits of the other (planners.py's
"Why four attributes"), so the line carries no information about the bars and the model can only place them from
the prompt's words, computed at the code's tokens.

The known answer (issue 41, "readable but unused"): at the last prompt token the announced layout is decodable (a
probe's R^2 ~1, the xor-planner's) and it drives the line (interchange along its pattern subspace makes the model
announce the source's layout; erasure sends the line to chance), but the drawing does not read it: interchange and
erasure there leave what the model draws as it was (the drawn layout matches the source's announced one only by
chance, and its own unpatched drawing throughout).
"""

from __future__ import annotations

import numpy as np

from interp.organisms import planners
from interp.organisms.data import Dataset, Example

A, B, C, D = planners.A, planners.B, planners.C, planners.D


def announced(k: tuple[int, ...]) -> tuple[int, int]:
    """The layout the first line announces: the xor-planner's rule."""
    return k[A] ^ k[B], k[B] ^ k[C]


def drawn(k: tuple[int, ...]) -> tuple[int, int]:
    """The layout the program draws: the xor-planner-b's rule, independent of `announced`."""
    return k[A] ^ k[D], k[C] ^ k[D]


def example(k: tuple[int, ...]) -> Example:
    va, ha = announced(k)
    vd, hd = drawn(k)
    base = planners.example(k, vd, hd)
    plan = {**base.plan, "announced_v": va, "announced_h": ha}
    return Example(base.item, base.program, plan, planners.label(va, ha))


def dataset(name: str = "decoy-planner") -> Dataset:
    held = planners.heldout_keys()
    held_set = set(held)
    heldout = tuple(example(k) for k in held)

    def sample(rng: np.random.Generator) -> Example:
        while True:
            k = tuple(int(rng.integers(r)) for r in planners.RADIX)
            if k not in held_set:
                return example(k)

    def check(ex: Example, text: str) -> bool:
        return text == ex.answer

    return Dataset(heldout, int(np.prod(planners.RADIX)) - len(held), sample, check)


__all__ = ["announced", "dataset", "drawn", "example"]
