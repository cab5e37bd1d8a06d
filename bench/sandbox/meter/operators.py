"""The helpers instrumented code calls for its operators (`_ambench_binop`, `_unary`, `_cmp`, `_chain`)."""

from __future__ import annotations

import math
import operator
from typing import Any, Callable

from bench.canvas.medium import BudgetExceeded
from bench.sandbox.meter import text
from bench.sandbox.meter.containers import _hashed_units, _metered_iter, flat, made_units
from bench.sandbox.meter.counter import Forbidden, Meter
from bench.sandbox.meter.integers import _check_int, _limbs
from bench.sandbox.meter.text import _printf_units, scrub, search_units
from bench.sandbox.meter.units import (
    _NUMBERS,
    _SETLIKE,
    _SIZED,
    _VIEWS,
    CHARS_PER_UNIT,
    ELEMS_PER_UNIT,
    HASH_UNITS,
    INT_BITS_PER_UNIT,
    MAX_INT_BITS,
    REPR_UNITS,
)

#: bound by assignment, not by `import`: CPython 3.11 compiles a method call on an imported name
#: (`_NESTED.isdisjoint(...)`) to an attribute load that makes a bound method on every call, not to
#: LOAD_METHOD; hot paths call these, so they keep the bytecode they had in the single meter.py
_PLAIN_TEXT = text._PLAIN_TEXT


#: operators whose cost grows with the result (charged by the exponent or the shift), and those of one limb each
#: that charge 1 unit (1 + 1 * 1 // 8 for *, 1 + 1 * 1 // 4 for // and %)
_SHIFT_OR_POWER = frozenset(("Pow", "LShift"))
_ONE_LIMB_PRODUCTS = frozenset(("Mult", "FloorDiv", "Mod"))


#: operator functions by AST operator name, plain and in place
BINOPS: dict[str, Callable[[Any, Any], Any]] = {
    "Add": operator.add, "Sub": operator.sub, "Mult": operator.mul, "Div": operator.truediv,
    "FloorDiv": operator.floordiv, "Mod": operator.mod, "Pow": operator.pow, "LShift": operator.lshift,
    "RShift": operator.rshift, "BitOr": operator.or_, "BitXor": operator.xor, "BitAnd": operator.and_,
    "MatMult": operator.matmul,
}
INPLACE: dict[str, Callable[[Any, Any], Any]] = {
    "Add": operator.iadd, "Sub": operator.isub, "Mult": operator.imul, "Div": operator.itruediv,
    "FloorDiv": operator.ifloordiv, "Mod": operator.imod, "Pow": operator.ipow, "LShift": operator.ilshift,
    "RShift": operator.irshift, "BitOr": operator.ior, "BitXor": operator.ixor, "BitAnd": operator.iand,
    "MatMult": operator.imatmul,
}
CMPOPS: dict[str, Callable[[Any, Any], Any]] = {
    "Eq": operator.eq, "NotEq": operator.ne, "Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt,
    "GtE": operator.ge, "Is": operator.is_, "IsNot": operator.is_not,
    "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b,
}


def unary_helper(meter: Meter) -> Callable[[str, Any], Any]:
    """`_ambench_unary(op, x)`: -x, +x or ~x of an operand that is not a literal, a big int charged by its size (each
    is a new object: `[-x for _ in range(10 ** 6)]` of a 4,000-bit x made 560 MB for 1 unit an item, issue 42)."""
    ops = {"USub": operator.neg, "UAdd": operator.pos, "Invert": operator.invert}

    def unary(op: str, x: Any) -> Any:
        if type(x) is int and x.bit_length() > 64:
            meter.charge(1 + x.bit_length() // INT_BITS_PER_UNIT)
        return ops[op](x)

    return unary


def binop_helper(meter: Meter, max_collection: int, real: dict[int, type] | None = None) -> Callable[[str, Any, Any, bool], Any]:
    """`_ambench_binop(op, a, b, inplace)`: charge, check, then apply one binary operator. `real` maps the
    builtins table's wrapped types to the types they stand for (`int | float` is a union of the types)."""
    real = real or {}

    def binop(op: str, a: Any, b: Any, inplace: bool = False) -> Any:
        ta, tb = type(a), type(b)
        if ta is int and tb is int and op not in _SHIFT_OR_POWER and a.bit_length() < 64 and b.bit_length() < 64:
            # the common case, spelled out: two ints of one limb each charge 1 unit for *, // and %, nothing for the
            # rest, and no result can pass MAX_INT_BITS (the general path below charges and checks the same;
            # it made `i = (i * 7 + 3) % 1000003` the costliest row of perf/bench_meter.py per unit)
            if op in _ONE_LIMB_PRODUCTS:
                meter.units += 1
                if meter.units > meter.cap:
                    meter._passed()
            return (INPLACE if inplace else BINOPS)[op](a, b)
        if ta is bool:  # a bool is an int to every operator (`True << 5000000` built 5M bits)
            ta = int
        if tb is bool:
            tb = int
        if ta is int and tb is int:
            ba, bb = a.bit_length(), b.bit_length()
            if op == "Pow":
                if b > 0 and abs(a) > 1 and b * math.log2(abs(a)) > MAX_INT_BITS:
                    raise BudgetExceeded("integer power too large")
                meter.charge(1 + _limbs(ba * b if b > 0 and abs(a) > 1 else ba) ** 2 // 8)
            elif op == "LShift":
                if b > MAX_INT_BITS or ba + max(b, 0) > MAX_INT_BITS:
                    raise BudgetExceeded("integer shift too large")
                meter.charge(1 + _limbs(ba + max(b, 0)) // 8)
            elif op == "Mult":
                if ba + bb > MAX_INT_BITS:
                    raise BudgetExceeded("integer product too large")
                meter.charge(1 + _limbs(ba) * _limbs(bb) // 8)
            elif op in ("FloorDiv", "Mod"):
                meter.charge(1 + _limbs(ba) * _limbs(bb) // 4)
            elif ba > 64 or bb > 64:
                meter.charge(1 + _limbs(max(ba, bb)) // 8)
            r = (INPLACE if inplace else BINOPS)[op](a, b)
            return _check_int(r, "arithmetic")
        if op == "Mult":
            for seq, k in ((a, b), (b, a)):
                if isinstance(seq, (str, list, tuple)) and type(k) in (int, bool):
                    if len(seq) * k > max_collection:
                        raise BudgetExceeded(f"sequence repetition of more than {max_collection} elements")
                    # writing the same reference k times: about 5 ns an element, so twice the copy rate
                    meter.charge(1 + max(0, len(seq) * k) // (CHARS_PER_UNIT if type(seq) is str else 2 * ELEMS_PER_UNIT))
                    return (INPLACE if inplace else BINOPS)[op](a, b)
        if op == "Mod" and ta is str:  # printf-style formatting renders its arguments in full, padded
            meter.charge(meter.size(a) + REPR_UNITS * meter.size(b) + _printf_units(a, b))
            meter.charge(meter.int_text(b))  # '%d' % big, '%s' % ([big] * 1000,): decimal text is quadratic
            r = BINOPS[op](a, b)
            return r if tb in _PLAIN_TEXT or (tb is tuple and _PLAIN_TEXT.issuperset(map(type, b))) else scrub(r)
        if op == "BitOr" and (id(a) in real or id(b) in real or isinstance(a, type) or isinstance(b, type)):
            raise Forbidden("| on types (a union of types) is not allowed")  # issue 42: as generic aliases
        if ta is not float and tb is not float:
            if op in ("Sub", "BitOr", "BitAnd", "BitXor") and (isinstance(a, _SETLIKE) or isinstance(b, _SETLIKE)):
                # set algebra hashes the elements; an iterator operand (a dict view's or `dict |=`) is pulled
                # in C, so it is metered per item (`d.keys() ^ map(abs, big)` ran 12.6 s on one unit). A dict view on
                # the right takes any iterable on the left (`[t] & d.keys()` hashes every element of the list in C:
                # issue 42's attack found a 400,000-deep tuple there crashing the worker, uncharged)
                if not isinstance(a, _SIZED):
                    a = _metered_iter(meter, a, HASH_UNITS)
                    meter.charge(_hashed_units(meter, b))
                elif not isinstance(b, _SIZED):
                    b = _metered_iter(meter, b, HASH_UNITS)
                    meter.charge(_hashed_units(meter, a))
                else:
                    meter.charge(_hashed_units(meter, a) + _hashed_units(meter, b))
            elif inplace and ta is list and not isinstance(b, _SIZED):
                b = _metered_iter(meter, b)  # list += iterator: charged per item
            elif isinstance(a, _SIZED) or isinstance(b, _SIZED):
                # concatenation: a copy of both; in place, the right one into a growing list (its
                # reallocations and fresh pages cost about as much again)
                # (`a += s` makes the elements of a range or of non-ASCII text: `made_units`)
                meter.charge(2 * made_units(b) if inplace and ta is list else flat(a) + flat(b))
        return (INPLACE if inplace else BINOPS)[op](a, b)

    return binop


def cmp_helper(meter: Meter) -> Callable[[str, Any, Any], Any]:
    """`_ambench_cmp(op, a, b)`: charge what the comparison touches, then compare."""

    def cmp(op: str, a: Any, b: Any) -> Any:
        ta = type(a)
        if (ta is int or ta is float) and type(b) in _NUMBERS:  # the common case: nothing to charge
            return CMPOPS[op](a, b)
        if op in ("In", "NotIn"):
            tb = type(b)
            if tb is list or tb is tuple or tb is _VIEWS[1] or tb is _VIEWS[2]:
                # a scan: each element compared with the needle, a compare costs at most the needle's size
                meter.charge(1 + len(b) * meter.size(a))
            elif tb is str:  # a substring search
                meter.charge(search_units(len(b), len(a) if type(a) is str else 1))
            elif tb is range and type(a) is not int:  # only an int is looked up without a scan
                meter.charge(1 + len(b))
            elif not isinstance(b, _SIZED):  # an iterator: consumed item by item
                b = _metered_iter(meter, b)
                meter.charge(meter.size(a))
            else:  # hashing the key: a tuple key is hashed in full (and built: `(5, 5) in d` in a loop measured
                # 0.51-0.73 s at the full budget with the size alone)
                meter.charge(1 + 2 * meter.size(a) if isinstance(a, (tuple, frozenset)) else 1)
        elif op not in ("Is", "IsNot") and (isinstance(a, _SIZED) or isinstance(b, _SIZED)):
            # a comparison stops at the shorter operand (or at once, for different types)
            short = a if not isinstance(b, _SIZED) or (isinstance(a, _SIZED) and len(a) <= len(b)) else b
            meter.charge(meter.size(short))
        return CMPOPS[op](a, b)

    return cmp


def chain_helper(cmp: Callable[[str, Any, Any], Any]) -> Callable[..., Any]:
    """`_ambench_chain(ops, a, *thunks)`: a chained comparison whose later operands are thunks (in a
    comprehension's iterable, where the instrumenter cannot use `:=`): each comparison through `cmp`, each
    operand evaluated once and only when reached, the first false result returned, as the chain does."""

    def chain(ops: tuple[str, ...], a: Any, *thunks: Callable[[], Any]) -> Any:
        r: Any = True
        for op, thunk in zip(ops, thunks):
            b = thunk()
            r = cmp(op, a, b)
            if not r:
                return r
            a = b
        return r

    return chain
