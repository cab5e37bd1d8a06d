"""The charge table's math: the rule of every public name of `math`, and the non-constant functions."""

from __future__ import annotations

import math
from typing import Any, Callable

from bench.canvas.medium import BudgetExceeded
from bench.sandbox.meter.containers import _metered_iter
from bench.sandbox.meter.counter import Meter
from bench.sandbox.meter.integers import _check_int, _int_bits, _limbs
from bench.sandbox.meter.operators import binop_helper
from bench.sandbox.meter.tables import _named
from bench.sandbox.meter.units import MAX_INT_BITS, WRAPPER_UNITS


# -- the charge table, part 3: math ------------------------------------------------------------------------
#: every public name of `math` and its rule; the sandbox's math namespace holds only these (a function a
#: newer Python adds is refused until it has a rule, and tests/bench/test_charge_table.py names it)
_MATH_CONSTANT = ("acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "copysign", "cos",
                  "cosh", "degrees", "erf", "erfc", "exp", "exp2", "expm1", "fabs", "floor", "fmod", "frexp",
                  "gamma", "isclose", "isfinite", "isinf", "isnan", "ldexp", "lgamma", "log", "log10", "log1p",
                  "log2", "modf", "nextafter", "pow", "radians", "remainder", "sin", "sinh", "sqrt", "tan", "tanh",
                  "trunc", "ulp")
MATH_RULES: dict[str, str] = {
    **{n: "constant (floats, or ints of at most MAX_INT_BITS bits)" for n in _MATH_CONSTANT},
    **{n: "a value" for n in ("e", "pi", "tau", "inf", "nan")},
    "factorial": "refused when the result passes MAX_INT_BITS (lgamma); quadratic in the result's limbs",
    "comb": "refused when the result passes MAX_INT_BITS (k log2 n); k times the result's limbs",
    "perm": "as comb",
    "prod": "per item pulled, each product as the `*` operator",
    "gcd": "one pair at a time, each step quadratic in its operands' limbs",
    "lcm": "as gcd; every intermediate checked",
    "isqrt": "quadratic in the argument's limbs",
    "fsum": "per item pulled",
    "dist": "1 unit per coordinate of both points (17 ns a coordinate measured)",
    "hypot": "1 unit per coordinate",
}


def _result_bits(name: str, args: tuple) -> float:
    """An upper bound on the bits of factorial / comb / perm of `args` (computed before they run)."""
    n = args[0] if args and type(args[0]) in (int, bool) else 0
    if n > 1 << 20:  # far past any result of MAX_INT_BITS, and past what lgamma takes
        return math.inf
    if name == "factorial":
        return math.lgamma(n + 1) / math.log(2) if n > 1 else 1.0
    k = args[1] if len(args) > 1 and type(args[1]) in (int, bool) else n
    if n < 2 or k <= 0 or k > n:
        return 1.0
    if name == "comb":
        k = min(k, n - k)
    return k * math.log2(n) + 1


def math_functions(meter: Meter, max_collection: int = 1_000_000) -> dict[str, Callable[..., Any]]:
    """The math functions that are not constant, each charged by its rule in MATH_RULES."""

    def sized_result(name: str) -> Callable[..., Any]:
        fn = getattr(math, name)

        def wrapped(*args: Any) -> Any:
            meter.charge(WRAPPER_UNITS)
            bits = _result_bits(name, args)
            if bits > MAX_INT_BITS:
                raise BudgetExceeded(f"math.{name}() of a result over {MAX_INT_BITS} bits")
            n, k = (list(args) + [0, 0])[:2]
            steps = n if name == "factorial" else min(k, n - k) if name == "comb" else k
            meter.charge(1 + max(0, steps) // 8 + _limbs(int(bits)) ** 2 // 8)
            return _check_int(fn(*args), f"math.{name}")

        return _named(wrapped, name)

    def prod(iterable: Any, /, *, start: Any = 1) -> Any:
        meter.charge(WRAPPER_UNITS)
        mul = binop_helper(meter, max_collection)
        acc = start
        for x in _metered_iter(meter, iterable):
            acc = mul("Mult", acc, x)
        return acc

    def int_fold(name: str) -> Callable[..., Any]:
        fn = getattr(math, name)

        def wrapped(*args: Any) -> Any:
            # one pair at a time, as CPython folds them, each step charged and its result checked: the
            # intermediate of `math.lcm(*range(1, 200000))` grew without bound inside one call (issue 32)
            meter.charge(WRAPPER_UNITS)
            if len(args) < 2:
                meter.charge(1 + sum(_limbs(_int_bits(a)) ** 2 for a in args) // 8)
                return _check_int(fn(*args), f"math.{name}")
            acc = args[0]
            for a in args[1:]:
                # a Python step per argument (at ITEM_UNITS, `math.gcd(*range(1, 200000))` measured 0.63 s at
                # the full budget)
                meter.tick(WRAPPER_UNITS + _limbs(_int_bits(acc)) * _limbs(_int_bits(a)) // 4)
                acc = _check_int(fn(acc, a), f"math.{name}")
            return acc

        return _named(wrapped, name)

    def fsum(iterable: Any, /) -> float:
        meter.charge(WRAPPER_UNITS)
        return math.fsum(_metered_iter(meter, iterable))

    def dist(p: Any, q: Any, /) -> float:
        meter.charge(WRAPPER_UNITS)
        return math.dist(*(_metered_iter(meter, x, 1) for x in (p, q)))

    def hypot(*coordinates: Any) -> float:
        meter.charge(WRAPPER_UNITS + len(coordinates))
        return math.hypot(*coordinates)

    out: dict[str, Callable[..., Any]] = {n: sized_result(n) for n in ("factorial", "comb", "perm")}
    out.update({"prod": _named(prod, "prod"), "fsum": _named(fsum, "fsum"), "dist": _named(dist, "dist"),
                "hypot": _named(hypot, "hypot")})
    for n in ("gcd", "lcm", "isqrt"):
        out[n] = int_fold(n)
    return out
