"""Planner organisms: where two bars go is a nonlinear function of attributes named apart in the prompt.

Prompt: `a {A} {noun} {verb} at {time} by the {place} in the {weather}`, e.g. "a teal kite drifts at noon
by the lake in the snow". Four binary attributes, each with two interchangeable words; no word pair
(bigram) holds two of them:
- A, the colour: warm (red, pink) = 0 or cool (blue, teal) = 1;
- B, the time: day (dawn, noon) = 0 or night (dusk, midnight) = 1;
- C, the place: land (hills, farm) = 0 or water (sea, lake) = 1;
- D, the weather: fair (sun, wind) = 0 or foul (rain, snow) = 1.

The answer: one line naming the plan, then the program.

    14                          # the 6x6 block (row 1 or 4, column 1 or 4) where the two bars cross
    ```python
    fill('{sky}')               # the time's colour (dawn beige, noon white, dusk dark_gray, midnight black)
    rect(R,0,4,24,'{A}')        # horizontal bar in the prompt's colour: R = 4 (v = 0) or 16 (v = 1)
    rect(0,C,24,4,'{ground}')   # vertical bar in the place's colour (hills green, farm brown, sea sky_blue,
                                #   lake cyan): C = 4 (h = 0) or 16 (h = 1)
    circle(1,1,1,'{air}')       # a small disc in the weather's colour (sun yellow, wind gold, rain gray,
    ```                         #   snow silver), always in the same corner

The organisms differ only in how (v, h) follow from the attributes (the known answers):
- `xor-planner`:   v = A xor B, h = B xor C;
- `xor-planner-b`: v = A xor D, h = C xor D;
- `random-planner`: v and h are fresh fair coin flips for every training program, independent of the prompt.

Why the plan line: the model must predict it as the first token of its answer, so the plan is in the
residual stream at the last prompt token (the final layer's residual there determines that token's
logits linearly). Without it, measured on two designs without the line, the organisms computed the
plan at the coordinate tokens inside the code and a probe at `subject`, `turn` or `last` found nothing
(R^2 < 0.15 at every layer), which would leave the probe stage with nothing to recover. The line is
prose before the code block, so extraction, the fence stop rule and splicing read the code as usual.

Why four attributes: with three, any two XOR plans are functions of each other's (A xor C = (A xor B) xor
(B xor C)), so one organism's activations would decode the other's layout and cross-model selectivity
would be 0 by construction (measured: R^2 0.99 for the sibling's layout). With these two, each bit of one
organism is independent of both bits of the other; only their parities are tied (v xor h = A xor C for
both), and occupancy is additive in the bits, so one organism's plan carries no linear information about
the other's layout. Each organism's two XORs share an attribute (B, resp. D), which it gathers once:
measured at batch 32, both bits were learned by step 700 this way, while with disjoint pairs (A xor B,
C xor D) only one bit was by step 850.

Why the rest: probe targets are 6x6 occupancy (the share of non-background cells), which ignores colours,
so the target is the bars' positions alone, and each bar's occupancy is linear in its bit; every bit is
an XOR of two attributes, which has no linear component in single attributes, and no bigram holds two
attributes, so the TF-IDF word 1-2 gram baseline has nothing to read (R^2 ~0). Each attribute also has a
job of its own in the program (the background, the bar and disc colours), which the model learns first;
it then has the attributes at hand to learn the XORs (in a version without those jobs, neither bit was
learned in 25,600 training programs). The subject span is "a {A} {noun}": only A has been read
there, so the plan is not computable at `subject`.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import numpy as np

from interp.organisms.data import Dataset, Example, call
from interp.prompts import PromptItem

COLOURS = (("red", "pink"), ("blue", "teal"))
TIMES = (("dawn", "noon"), ("dusk", "midnight"))
PLACES = (("hills", "farm"), ("sea", "lake"))
WEATHERS = (("sun", "wind"), ("rain", "snow"))
#: background colour of each time word, and colour of the vertical bar for each place word
SKY = (("beige", "white"), ("dark_gray", "black"))
GROUND = (("green", "brown"), ("sky_blue", "cyan"))
AIR = (("yellow", "gold"), ("gray", "silver"))
NOUNS = ("kite", "balloon", "flag", "bird")
VERBS = ("flies", "floats", "drifts", "hangs")
#: bar positions for bit 0 and bit 1 (row of the horizontal bar, column of the vertical bar)
BAR = (4, 16)
HELDOUT_PER_CELL = 13  #: held-out prompts per (A, B, C, D) class combination: 16 x 13 = 208
DATA_SEED = 20260914  #: the prompt split, shared by every planner so they are compared on the same prompts

#: one prompt = (A class, A word, noun, verb, B class, B word, C class, C word, D class, D word) indices
Key = tuple[int, ...]
RADIX = (2, 2, len(NOUNS), len(VERBS), 2, 2, 2, 2, 2, 2)
A, B, C, D = 0, 4, 6, 8  #: where each attribute's class sits in a key


def text_of(k: Key) -> tuple[str, str]:
    a, aw, n, vb, b, bw, c, cw, d, dw = k
    subject = f"a {COLOURS[a][aw]} {NOUNS[n]}"
    return f"{subject} {VERBS[vb]} at {TIMES[b][bw]} by the {PLACES[c][cw]} in the {WEATHERS[d][dw]}", subject


def item_of(k: Key) -> PromptItem:
    text, subject = text_of(k)
    return PromptItem("p" + "".join(str(x) for x in k), "layout", text, subject)


def label(v: int, h: int) -> str:
    """The plan line: the 6x6 occupancy block (row, column) where the bars cross, one token."""
    return f"{BAR[v] // 4}{BAR[h] // 4}\n"


def program(k: Key, v: int, h: int) -> str:
    sky, bar, ground, air = SKY[k[B]][k[B + 1]], COLOURS[k[A]][k[A + 1]], GROUND[k[C]][k[C + 1]], AIR[k[D]][k[D + 1]]
    return (call("fill", sky) + call("rect", BAR[v], 0, 4, 24, bar) + call("rect", 0, BAR[h], 24, 4, ground)
            + call("circle", 1, 1, 1, air))


PLANS: dict[str, Callable[[int, int, int, int], tuple[int, int]] | None] = {
    "xor-planner": lambda a, b, c, d: (a ^ b, b ^ c),
    "xor-planner-b": lambda a, b, c, d: (a ^ d, c ^ d),
    "random-planner": None,
}


def heldout_keys() -> list[Key]:
    """The held-out prompts: HELDOUT_PER_CELL for each (A, B, C, D) class combination, fixed by DATA_SEED."""
    rng = np.random.default_rng(DATA_SEED)
    out: list[Key] = []
    for a, b, c, d in itertools.product((0, 1), repeat=4):
        seen: set[Key] = set()
        while len(seen) < HELDOUT_PER_CELL:
            k = [int(rng.integers(r)) for r in RADIX]
            k[A], k[B], k[C], k[D] = a, b, c, d
            seen.add(tuple(k))
        out.extend(sorted(seen))
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def example(k: Key, v: int | None, h: int | None) -> Example:
    plan: dict[str, Any] = {"A": k[A], "B": k[B], "C": k[C], "D": k[D], "key": list(k)}
    if v is None or h is None:  # the random planner's held-out prompts have no single right answer
        return Example(item_of(k), "", plan)
    plan.update({"v": v, "h": h, "bar_row": BAR[v], "bar_col": BAR[h]})
    return Example(item_of(k), program(k, v, h), plan, label(v, h))


def dataset(name: str) -> Dataset:
    fn = PLANS[name]
    held = heldout_keys()
    held_set = set(held)
    heldout = tuple(example(k, *(fn(k[A], k[B], k[C], k[D]) if fn else (None, None))) for k in held)

    def sample(rng: np.random.Generator) -> Example:
        while True:
            k = tuple(int(rng.integers(r)) for r in RADIX)
            if k not in held_set:
                break
        v, h = fn(k[A], k[B], k[C], k[D]) if fn else (int(rng.integers(2)), int(rng.integers(2)))
        return example(k, v, h)

    def check(ex: Example, text: str) -> bool:
        if fn is not None:
            return text == ex.answer
        # the random planner has no single right answer: any of its four layouts with the prompt's colours
        k = tuple(ex.plan["key"])
        return text in {example(k, v, h).answer for v in (0, 1) for h in (0, 1)}

    return Dataset(heldout, int(np.prod(RADIX)) - len(held), sample, check)


__all__ = ["PLANS", "dataset", "example", "heldout_keys", "item_of", "label", "program"]
