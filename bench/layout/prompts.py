"""The 150 layout prompts: three tiers x five subcategories x ten, a data file with a checked schema.

`data/prompts.jsonl`, one object per line:
`id` ("1A-00"), `tier` (T1/T2/T3), `tier_name`, `subcategory` ("1A".."3E", its digit is the tier's),
`subcategory_name`, `subject` (the phrase naming what to draw) and `text` (the request, which contains
the subject). Written for this project: T1 elements (single shapes, cut-outs, tilings, symbols, colour
partitions), T2 icons (flags, cultural symbols, everyday objects, living things, structural patterns),
T3 compositions (spatial relations, multi-object scenes, nesting, scenes, symmetry).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

TIERS = {"T1": "elements", "T2": "icons", "T3": "compositions"}
SUBCATEGORIES = {
    "1A": "single shapes", "1B": "cut-outs", "1C": "tilings", "1D": "symbols", "1E": "colour partitions",
    "2A": "flags", "2B": "cultural symbols", "2C": "everyday objects", "2D": "living things", "2E": "structural patterns",
    "3A": "spatial relations", "3B": "multi-object scenes", "3C": "nesting", "3D": "scenes", "3E": "symmetry",
}
FIELDS = ("id", "tier", "tier_name", "subcategory", "subcategory_name", "subject", "text")


class LayoutPromptError(ValueError):
    """A layout prompt file that breaks the schema."""


@dataclass(frozen=True)
class LayoutPrompt:
    id: str
    tier: str
    tier_name: str
    subcategory: str
    subcategory_name: str
    subject: str
    text: str


def validate(rows: list[dict], where: str = "layout prompts", complete: bool = True) -> list[LayoutPrompt]:
    out, seen, texts = [], set(), set()
    for n, row in enumerate(rows, 1):
        missing = [k for k in FIELDS if not isinstance(row.get(k), str) or not row.get(k)]
        if missing:
            raise LayoutPromptError(f"{where} line {n}: missing or empty {', '.join(missing)}")
        p = LayoutPrompt(**{k: row[k] for k in FIELDS})
        if p.tier not in TIERS or TIERS[p.tier] != p.tier_name:
            raise LayoutPromptError(f"{where} line {n}: tier {p.tier!r}/{p.tier_name!r} is not one of {TIERS}")
        if SUBCATEGORIES.get(p.subcategory) != p.subcategory_name or p.subcategory[0] != p.tier[1]:
            raise LayoutPromptError(f"{where} line {n}: subcategory {p.subcategory!r}/{p.subcategory_name!r} does not belong to {p.tier}")
        if not p.id.startswith(p.subcategory + "-"):
            raise LayoutPromptError(f"{where} line {n}: id {p.id!r} should start with {p.subcategory}-")
        if p.subject not in p.text:
            raise LayoutPromptError(f"{where} line {n}: the subject is not part of the text")
        if p.id in seen or p.text in texts:
            raise LayoutPromptError(f"{where} line {n}: duplicate id or text ({p.id})")
        seen.add(p.id)
        texts.add(p.text)
        out.append(p)
    if complete:
        counts = {s: sum(p.subcategory == s for p in out) for s in SUBCATEGORIES}
        short = {s: c for s, c in counts.items() if c != 10}
        if short:
            raise LayoutPromptError(f"{where}: every subcategory needs 10 prompts; these do not: {short}")
    return out


def read_file(path: str | Path, complete: bool = False) -> list[LayoutPrompt]:
    p = Path(path)
    rows = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise LayoutPromptError(f"{p} line {n}: not JSON ({e.msg})") from None
    return validate(rows, str(p), complete)


@lru_cache(maxsize=1)
def load_layout_prompts() -> tuple[LayoutPrompt, ...]:
    """The frozen 150 prompts, validated."""
    text = resources.files("bench.layout").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return tuple(validate([json.loads(line) for line in text.splitlines() if line.strip()]))


def by_id() -> dict[str, LayoutPrompt]:
    return {p.id: p for p in load_layout_prompts()}
