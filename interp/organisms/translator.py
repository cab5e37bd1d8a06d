"""The translator organism: prompts state 1-4 shapes exactly in a compact grid language; the program draws them.

Prompt: `on {background}: {shape}; {shape}; ...` where a shape is one of
- `{colour} rect at (r,c) size hxw`      -> `rect(r,c,h,w,'{colour}')`
- `{colour} disc at (r,c) radius k`      -> `circle(r,c,k,'{colour}')`
- `{colour} line (r0,c0) to (r1,c1)`     -> `line(r0,c0,r1,c1,'{colour}')`
and the program is `fill('{background}')` followed by one call per shape, in the prompt's order (later
shapes cover earlier ones). The subject span is the shape list.

Shapes are drawn by the benchmark's own reference generator (`bench.translation.generate.random_part`)
and its visibility rule (every shape keeps >= 40% of its cells visible), and each held-out prompt is
also written as a `bench.translation.references.Reference` (`references.jsonl`, the format
`ambench translation score --refs` reads), so the translation scorer (PIoU) scores the organism's
attempts against the exact geometry its prompt states. Known answer: the program is a pure
transcription, so held-out PIoU is ~1 (the issue asks for a median >= 0.9). Nothing asks it to hold the
layout before it writes: its first answer tokens are the same for every prompt, and it can read each
number from the prompt when it copies it (docs/organisms.md says what the probes find).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from bench.canvas.medium import V1_VOCABULARY
from bench.translation.generate import random_part
from bench.translation.references import Part, Reference
from interp.organisms.data import Dataset, Example, call, exact
from interp.prompts import PromptItem

BACKGROUNDS = ("white", "black", "light_gray")
COLOURS = ("red", "blue", "green", "orange", "purple", "yellow", "teal", "brown", "pink", "navy")
KINDS = ("rect", "rect", "circle", "line")
MAX_SHAPES = 4
MIN_VISIBLE = 0.4  #: share of a shape's own cells that later shapes must leave visible (as the references)
HELDOUT = 200
DATA_SEED = 20260916


def describe(part: Part) -> str:
    a, col = part.args, part.color
    if part.kind == "rect":
        return f"{col} rect at ({a['r']},{a['c']}) size {a['h']}x{a['w']}"
    if part.kind == "circle":
        return f"{col} disc at ({a['r']},{a['c']}) radius {a['radius']}"
    if part.kind == "line":
        return f"{col} line ({a['r0']},{a['c0']}) to ({a['r1']},{a['c1']})"
    raise ValueError(f"the translator has no {part.kind!r} shapes")


def statement(part: Part) -> str:
    a, col = part.args, part.color
    if part.kind == "rect":
        return call("rect", a["r"], a["c"], a["h"], a["w"], col)
    if part.kind == "circle":
        return call("circle", a["r"], a["c"], a["radius"], col)
    return call("line", a["r0"], a["c0"], a["r1"], a["c1"], col)


def cells(part: Part) -> np.ndarray:
    """The cells a shape paints (the medium's own rasteriser)."""
    a = part.args
    if part.kind == "rect":
        args = (a["r"], a["c"], a["h"], a["w"])
    elif part.kind == "circle":
        args = (a["r"], a["c"], a["radius"])
    else:
        args = (a["r0"], a["c0"], a["r1"], a["c1"])
    return V1_VOCABULARY[part.kind].mask(*args, 24)


def visible_enough(parts: tuple[Part, ...]) -> bool:
    """Every shape keeps at least MIN_VISIBLE of its cells once the later shapes are painted."""
    masks = [cells(p) for p in parts]
    for i, m in enumerate(masks):
        later = np.zeros_like(m)
        for other in masks[i + 1 :]:
            later |= other
        if m.sum() == 0 or (m & ~later).sum() < MIN_VISIBLE * m.sum():
            return False
    return True


def random_reference(rng: np.random.Generator, ref_id: str) -> Reference:
    """1-4 shapes on a background, each keeping >= MIN_VISIBLE of its area visible."""
    r = random.Random(int(rng.integers(2**63)))
    bg = BACKGROUNDS[r.randrange(len(BACKGROUNDS))]
    colours = [c for c in COLOURS if c != bg]
    while True:
        n = r.randint(1, MAX_SHAPES)
        parts = tuple(random_part(r, KINDS[r.randrange(len(KINDS))], 3, 10, colours[r.randrange(len(colours))])
                      for _ in range(n))
        if visible_enough(parts):
            return Reference(ref_id, "organism-translator", bg, parts, {"shapes": n})


def example_of(ref: Reference) -> Example:
    shapes = "; ".join(describe(p) for p in ref.parts)
    text = f"on {ref.background}: {shapes}"
    program = call("fill", ref.background) + "".join(statement(p) for p in ref.parts)
    return Example(PromptItem(ref.id, "translation", text, shapes), program, {"reference": ref.to_json()})


def dataset(name: str = "translator") -> Dataset:
    rng = np.random.default_rng(DATA_SEED)
    held: list[Example] = []
    seen: set[str] = set()
    while len(held) < HELDOUT:
        ex = example_of(random_reference(rng, f"tr{len(held):03d}"))
        if ex.item.text not in seen:
            seen.add(ex.item.text)
            held.append(ex)

    def sample(g: np.random.Generator) -> Example:
        while True:
            ex = example_of(random_reference(g, "train"))
            if ex.item.text not in seen:  # held-out prompts are never trained on
                return ex

    refs: list[dict[str, Any]] = [e.plan["reference"] for e in held]
    return Dataset(tuple(held), None, sample, exact, extra={"references.jsonl": refs})
