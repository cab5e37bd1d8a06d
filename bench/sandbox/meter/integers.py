"""Big integers: what writing one as decimal text costs, its limbs, and the cap on its bits."""

from __future__ import annotations

import functools
import operator
from typing import Any

from bench.canvas.medium import BudgetExceeded
from bench.sandbox.meter.units import MAX_INT_BITS


_OVER_ONE_LIMB = functools.partial(operator.lt, 511)  #: ints whose decimal text costs more than a unit or so


def _quadratic(bits: int) -> int:
    """Units of writing an int of `bits` bits in decimal (CPython's conversion is quadratic in the limbs: at
    limbs ** 2 / 8, `'%s' % (x,)` of a 4,070-bit x measured 0.39 s at the full budget in a fast moment)."""
    return (bits // 64) ** 2 // 6


def _int_bits(x: Any) -> int:
    return x.bit_length() if type(x) is int else 0


def _check_int(r: Any, what: str) -> Any:
    if type(r) is int and r.bit_length() > MAX_INT_BITS:
        raise BudgetExceeded(f"{what}: integer over {MAX_INT_BITS} bits")
    return r


def _limbs(bits: int) -> int:
    return 1 + bits // 64
