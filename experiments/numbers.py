"""Numbers for people: what a command prints and what the report shows, to 3 significant digits.

Files keep full precision (rows, tables, JSON results); only what a person reads is rounded, here, one
way for every command and the report: `0.06666666666666667` reads `0.0667`, `1.0124` reads `1.01`,
`0.0004` reads `0.0004`, `13920.0` reads `13,920`.
"""

from __future__ import annotations

import math
from typing import Any

DIGITS = 3


def sig(v: float, digits: int = DIGITS) -> float:
    """`v` rounded to `digits` significant digits (a float for JSON); 0, inf and nan as they are."""
    if v == 0 or not math.isfinite(v):
        return v
    return round(v, digits - 1 - int(math.floor(math.log10(abs(v)))))


def rounded(obj: Any, digits: int = DIGITS) -> Any:
    """A copy of a JSON-like value with every float rounded to `digits` significant digits (ints, bools and
    strings unchanged): what a command prints; the files it writes keep the full values."""
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, float):
        return sig(obj, digits)
    if isinstance(obj, dict):
        return {k: rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rounded(v, digits) for v in obj]
    return obj


def text(v: Any, signed: bool = False, digits: int = DIGITS) -> str:
    """A number as a person reads it: `digits` significant digits with trailing zeros kept (0.500, 1.01),
    whole numbers with thousands separators from 1,000 up (13,920), "–" for a missing or undefined value."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:+,}" if signed else f"{v:,}"
    sign = "+" if signed and v > 0 else ""
    if v == 0:
        return "0"
    r = sig(v, digits)
    if abs(r) >= 10 ** digits:
        return f"{sign}{r:,.0f}" if abs(v) < 10 ** (digits + 1) else f"{sign}{v:,.0f}"
    # trailing zeros kept from 0.1 up (0.500, 1.00: a column reads evenly); below, a p of 0.001 stays 0.001
    out = f"{r:#.{digits}g}" if abs(r) >= 0.1 else f"{r:.{digits}g}"
    return sign + (out.rstrip(".") if "e" not in out else out)


__all__ = ["DIGITS", "rounded", "sig", "text"]
