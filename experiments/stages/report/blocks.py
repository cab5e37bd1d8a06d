"""The blocks every section of the page is made of (headings, texts, tables of formatted cells, figures): data, not markup."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Callable, Sequence

from experiments.numbers import text as num
from experiments.rundir import RunDir

Block = dict[str, Any]
Answer = dict[str, str]


def heading(text: str, level: int = 1) -> Block:
    """A section heading: level 1 a section of a run, 2 a subsection."""
    return {"kind": "heading", "level": level, "text": text}


def para(text: str, kind: str = "text") -> Block:
    """A paragraph: `text`, `paper` (the paper's values), `note` (how to read a table) or `missing`."""
    return {"kind": kind, "text": text}


def missing(what: str, why: str, how: str) -> Block:
    """One line for a table that could not be computed: what, why, and the command or preset that computes it."""
    return para(f"{what}: not computed — {why}. {how}.", "missing")


def cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, (bool, int, float)):
        return num(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(cell(x) for x in v) + "]"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {x}" for k, x in v.items())
    return str(v)


def table(rows: Sequence[dict[str, Any]], cols: list[str], heads: list[str] | None = None) -> Block:
    return {"kind": "table", "heads": heads or cols, "rows": [[cell(r.get(c)) for c in cols] for r in rows]}


def figure(path: Path, alt: str) -> Block | None:
    if not path.is_file():
        return None
    return {"kind": "figure", "alt": alt, "data": base64.b64encode(path.read_bytes()).decode()}


def ci(pair: Any) -> str:
    lo, hi = (pair or [None, None])[:2]
    return f"[{num(lo)}, {num(hi)}]"


def interval(pair: Any, n: Any = None) -> str:
    """A 95% CI cell: "[lo, hi]", or "n = 1, no interval" where there is none (one prompt: a bootstrap of one prompt
    is a point, and "[0.333, 0.333]" would read as certainty)."""
    lo, hi = (pair or [None, None])[:2]
    if lo is None or hi is None:
        return f"n = {n if n is not None else 1}, no interval"
    return f"[{num(lo)}, {num(hi)}]"


def figure_of(fig: Any, alt: str) -> Block:
    """A matplotlib figure drawn for the page itself (the page is read-only on runs: nothing is written)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})  # no version string: the same rows, the same bytes
    return {"kind": "figure", "alt": alt, "data": base64.b64encode(buf.getvalue()).decode()}


def excludes_zero(pair: Any) -> bool:
    return bool(pair) and pair[0] is not None and pair[1] is not None and (pair[0] > 0 or pair[1] < 0)


def delta_note(rows: Sequence[dict[str, Any]], key: str = "delta_r2", text_key: str = "r2_text") -> Block | None:
    """Why a ΔR² above 1 is no error, under any table that shows one."""
    big = [r for r in rows if (r.get(key) or 0) > 1]
    if not big:
        return None
    worst = min(big, key=lambda r: r.get(text_key) if r.get(text_key) is not None else 0)
    return para(f"ΔR² = R²(probe) − R²(text baseline), so it exceeds 1 when the text baseline's R² is negative, i.e. "
                f"the baseline predicts worse than the mean of the targets (here down to {num(worst.get(text_key))}); "
                "both R² are shown beside it.", "note")


Section = Callable[[RunDir, dict[str, Any]], "tuple[list[Block], list[Answer]]"]
