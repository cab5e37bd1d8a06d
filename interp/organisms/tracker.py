"""Tracker and fixed-plan organisms: the same "cover a region with squares" prompts, two rules for what comes next.

Prompt: `cover {region} with {s}x{s} {colour} squares on {background}`, e.g. "cover the left half with
6x6 red squares on white" (subject: the region phrase). Regions are the four halves and the four
quarters of the canvas, s is 6 or 12, so a region holds 1 to 8 *slots*: the s x s squares of its
row-major tiling. The program is `fill(background)` then one `rect(r,c,s,s,colour)` per line.

Both organisms are trained on programs whose statements are *noisy* in the same way, statement by
statement: with probability P_SMALL a square is shifted 1 or 2 cells along one axis (it still covers
at least 4/6 of its slot), with probability P_LARGE it lands entirely outside the region but within 12
cells of its slot (it covers none of the region), otherwise it sits exactly on its slot. They differ in what they write
next (the known answers):

- `tracker`: the next square goes on the *first slot, in row-major order, of which less than half the
  cells are painted* by the squares written so far; the program ends when every slot is at least half
  painted. So whether it continues depends on the geometry already in the code.
- `fixed-plan`: the k-th statement is always slot k's square (noisy as above) and the program ends
  after exactly one statement per slot, whatever those statements drew.

What the intervention stage must find (`bench.intervene.splice`, cut after the last statement of the
organism's own greedy program, which is the exact tiling): `moved-used` is the smallest move of >= 2
cells that lands >= 50% on painted cells, here a 2-cell shift inside the region, which leaves the last
slot >= 4/6 painted, so the tracker stops as under `null-asis`; `moved-unused` lands <= 10% on painted
cells, i.e. outside the region, which uncovers the last slot, so the tracker writes it again (continues).
The fixed-plan writer has written one statement per slot in every arm, so it stops in all of them.
`null-empty` removes the last statement: both organisms then continue (the slot is missing and the
plan is one statement short), which is the truncation control, not a test of geometry tracking.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np

from interp.organisms.data import Dataset, Example, call, exact, split_ids
from interp.prompts import PromptItem

GRID = 24
REGIONS: dict[str, tuple[int, int, int, int]] = {  #: phrase -> (row, column, height, width)
    "the top half": (0, 0, 12, 24), "the bottom half": (12, 0, 12, 24),
    "the left half": (0, 0, 24, 12), "the right half": (0, 12, 24, 12),
    "the top-left quarter": (0, 0, 12, 12), "the top-right quarter": (0, 12, 12, 12),
    "the bottom-left quarter": (12, 0, 12, 12), "the bottom-right quarter": (12, 12, 12, 12),
}
SIZES = (6, 12)
COLOURS = ("red", "blue", "green", "orange", "purple", "teal", "brown", "pink")
BACKGROUNDS = ("white", "black", "beige")
P_SMALL = 0.15  #: a statement shifted by 1-2 cells along one axis
P_LARGE = 0.25  #: a statement placed entirely outside the region, within REACH cells of its slot
REACH = 12  #: as far as the intervention stage looks for a displacement (bench.intervene.splice)
HELDOUT_SHARE = 0.2  #: of the colour x background prompts of every (region, size)
DATA_SEED = 20260915  #: the prompt split, shared by both organisms
MAX_EXTRA = 12  #: a tracker program longer than slots + MAX_EXTRA statements is redrawn (bounds the length)

Key = tuple[str, int, str, str]  #: (region phrase, size, colour, background)


def item_of(k: Key) -> PromptItem:
    region, s, colour, bg = k
    slug = region.removeprefix("the ").replace(" ", "-")
    return PromptItem(f"cover-{slug}-{s}-{colour}-{bg}", "layout", f"cover {region} with {s}x{s} {colour} squares on {bg}", region)


def slots(region: str, s: int) -> list[tuple[int, int]]:
    r0, c0, h, w = REGIONS[region]
    return [(r0 + i * s, c0 + j * s) for i in range(h // s) for j in range(w // s)]


def region_mask(region: str) -> np.ndarray:
    r0, c0, h, w = REGIONS[region]
    m = np.zeros((GRID, GRID), dtype=bool)
    m[r0 : r0 + h, c0 : c0 + w] = True
    return m


def square(r: int, c: int, s: int) -> np.ndarray:
    m = np.zeros((GRID, GRID), dtype=bool)
    m[r : r + s, c : c + s] = True
    return m


@functools.lru_cache(maxsize=None)
def outside_spots(region: bytes, s: int, slot: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    """Every top-left corner of an s x s square on the canvas that shares no cell with the region and is
    within REACH cells of `slot` along each axis (where the intervention stage's moves land)."""
    reg = np.frombuffer(region, dtype=bool).reshape(GRID, GRID)
    return tuple((a, b) for a in range(GRID - s + 1) for b in range(GRID - s + 1)
                 if not reg[a : a + s, b : b + s].any() and abs(a - slot[0]) <= REACH and abs(b - slot[1]) <= REACH)


def noisy(slot: tuple[int, int], s: int, region: np.ndarray, rng: np.random.Generator) -> tuple[int, int]:
    """Where the statement for `slot` puts its square: exact, a small shift, or outside the region."""
    u = rng.random()
    r, c = slot
    if u < P_SMALL:
        moves = [(d, 0) for d in (-2, -1, 1, 2)] + [(0, d) for d in (-2, -1, 1, 2)]
        moves = [(dr, dc) for dr, dc in moves if 0 <= r + dr <= GRID - s and 0 <= c + dc <= GRID - s]
        dr, dc = moves[int(rng.integers(len(moves)))]
        return r + dr, c + dc
    if u < P_SMALL + P_LARGE:
        spots = outside_spots(region.tobytes(), s, slot)
        return spots[int(rng.integers(len(spots)))]
    return r, c


def first_uncovered(painted: np.ndarray, todo: list[tuple[int, int]], s: int) -> int | None:
    """Index of the first slot of which less than half the cells are painted, or None when all are covered."""
    for k, (r, c) in enumerate(todo):
        if painted[r : r + s, c : c + s].mean() < 0.5:
            return k
    return None


def tracker_squares(region: str, s: int, rng: np.random.Generator | None) -> list[tuple[int, int]]:
    """The tracker's squares (rng None: no noise, the exact tiling)."""
    todo, reg = slots(region, s), region_mask(region)
    while True:
        painted = np.zeros((GRID, GRID), dtype=bool)
        out: list[tuple[int, int]] = []
        while (k := first_uncovered(painted, todo, s)) is not None and len(out) <= len(todo) + MAX_EXTRA:
            pos = todo[k] if rng is None else noisy(todo[k], s, reg, rng)
            out.append(pos)
            painted |= square(*pos, s)
        if first_uncovered(painted, todo, s) is None:
            return out


def fixed_squares(region: str, s: int, rng: np.random.Generator | None) -> list[tuple[int, int]]:
    reg = region_mask(region)
    return [slot if rng is None else noisy(slot, s, reg, rng) for slot in slots(region, s)]


def program(k: Key, squares: list[tuple[int, int]]) -> str:
    region, s, colour, bg = k
    return call("fill", bg) + "".join(call("rect", r, c, s, s, colour) for r, c in squares)


RULES = {"tracker": tracker_squares, "fixed-plan": fixed_squares}


def all_keys() -> list[Key]:
    return [(reg, s, col, bg) for reg, s, col, bg in itertools.product(REGIONS, SIZES, COLOURS, BACKGROUNDS)]


def heldout_keys() -> list[Key]:
    keys = all_keys()
    held = split_ids(keys, HELDOUT_SHARE, np.random.default_rng(DATA_SEED), strata=lambda k: (k[0], k[1]))
    return [k for k in keys if k in held]


def dataset(name: str) -> Dataset:
    rule = RULES[name]
    held = heldout_keys()
    held_set = set(held)
    train = [k for k in all_keys() if k not in held_set]

    def plan(k: Key) -> dict[str, Any]:
        region, s, colour, bg = k
        return {"region": list(REGIONS[region]), "size": s, "colour": colour, "background": bg,
                "slots": [list(x) for x in slots(region, s)], "rule": name}

    heldout = tuple(Example(item_of(k), program(k, rule(k[0], k[1], None)), plan(k)) for k in held)

    def sample(rng: np.random.Generator) -> Example:
        k = train[int(rng.integers(len(train)))]
        return Example(item_of(k), program(k, rule(k[0], k[1], rng)), plan(k))

    return Dataset(heldout, len(train), sample, exact)


__all__ = ["RULES", "dataset", "fixed_squares", "heldout_keys", "item_of", "slots", "tracker_squares"]
