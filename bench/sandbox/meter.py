"""Deterministic work units: what decides `budget`, so that an outcome depends on the program, not on the machine.

CPU time depends on the machine's load (a 0.65 s-CPU sort loop measured 0.92 s beside busy loops on
this 2-core machine, and crossed the 2 s limit on a busier CI machine). So every path by which a
program can do heavy work is charged in *work units* (`Limits.max_ops`), counted the same way on
every machine:

- Python-level work: each loop pass, function or lambda call and comprehension item charges the
  static size (AST nodes) of the code it runs, plus a fixed cost for the pass itself
  (`policy.instrument` inserts the charges);
- work done inside C on the program's behalf: builtins (`sorted`, `sum`, `list`, `set`, `str`, ...),
  the allowed methods (`.sort()`, `.count()`, `.join()`, `.replace()`, ...), operators on containers
  and big integers (`+`, `*`, `==`, `in`, `//`, `%`, slices, `*args`, f-strings) and `math`'s
  integer functions charge for the elements and bits they touch (`size`);
- canvas primitives charge for what drawing and shaping them costs (`bench.canvas.medium.Canvas`).

Integers are capped at `MAX_INT_BITS`, so integer work per operation is bounded and charged. The
constants are calibrated by `perf/bench_meter.py` so that a program at the full budget uses a
fraction of `Limits.cpu_seconds` of CPU: CPU time stays as a backstop for what escapes the units.
"""

from __future__ import annotations

import builtins
import math
import operator
from itertools import compress
from typing import Any, Callable, Iterable

from bench.canvas.medium import BudgetExceeded

#: bits of the largest integer a program may build (a 24x24 drawing needs none of this)
MAX_INT_BITS = 4096
#: charge of one loop pass, call or comprehension item beyond the nodes it runs (the charge's own cost)
PASS_COST = 4
#: one unit is about 45 ns of CPU (a pass of `while True: i += 1` is 9 units); C work per element,
#: measured on this machine: a shallow list copy 3-10 ns, a string scan or copy 0.04-0.6 ns per character,
#: a compare, hash or repr 5-55 ns per element (so the nested walk charges one unit per element)
#: characters of a string one unit pays for
CHARS_PER_UNIT = 64
#: the largest width or precision an f-string format spec may ask for
MAX_FORMAT_WIDTH = 100_000
#: elements of a shallow copy or concatenation one unit pays for
ELEMS_PER_UNIT = 8
#: units per element when rendering text (str(), f-strings, %): a float's repr is about 190 ns
REPR_UNITS = 4
#: units per element hashed (set(), dict(), set algebra): a hash and an insert, about 40 ns
HASH_UNITS = 2
#: units every call of one of the sandbox's Python-level wrappers pays for its own overhead (a builtin
#: such as `map` or `filter` may call it from C, where no loop pass is charged): about 350 ns
WRAPPER_UNITS = 8
#: the same for an unbound method (`list.copy`, `str.lower` called on their type), about 1 us
UNBOUND_UNITS = 25
#: units per item a C builtin pulls from an unsized iterator (the metering generator's own cost)
ITEM_UNITS = 3

_CONTAINERS = (list, tuple, set, frozenset, dict)
_NESTED = frozenset({list, tuple, set, frozenset, dict, str})
#: dict views: sized, and scanned in C like the dict they show
_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_SIZED = (*_CONTAINERS, str, range, *_VIEWS)
#: units of visiting one nested container in the walk of `Meter.size` (its own cost, about 300 ns)
WALK_UNITS = 8


class Meter:
    """Work units spent by one program, raising BudgetExceeded past `cap`."""

    __slots__ = ("units", "cap")

    def __init__(self, cap: int) -> None:
        self.units = 0
        self.cap = cap

    def charge(self, n: int) -> None:
        self.units += n
        if self.units > self.cap:
            raise BudgetExceeded(f"more than {self.cap} work units (operations and the elements they touch)")

    def tick(self, n: int = 1) -> bool:
        """What instrumented code calls per loop pass / call / comprehension item; returns True (`charge`
        spelled out again: this is the hottest call of a program, one call level matters)."""
        self.units += n
        if self.units > self.cap:
            raise BudgetExceeded(f"more than {self.cap} work units (operations and the elements they touch)")
        return True

    def remaining(self) -> int:
        return max(0, self.cap - self.units)

    def size(self, x: Any) -> int:
        """Elements a C-level pass over `x` touches, nested containers included; stops (raising) once the
        count exceeds what the budget has left, so measuring never costs more than the budget."""
        t = type(x)
        if t is int or t is bool or t is float or x is None:
            return 1 if t is not int else 1 + x.bit_length() // 512
        if t is str:
            return 1 + len(x) // CHARS_PER_UNIT
        if t is range or t in _VIEWS:
            return 1 + len(x)
        if t not in _NESTED:
            return 1
        if t is not dict and _NESTED.isdisjoint(map(type, x)):  # flat: the common case, at C speed
            return 1 + len(x)
        left = self.remaining() + 1
        total, stack = 0, [x]
        while stack:
            y = stack.pop()
            ty = type(y)
            if ty is str:
                total += 1 + len(y) // CHARS_PER_UNIT
                continue
            total += WALK_UNITS + len(y)
            if y:
                # the nested containers and strings, picked out at C speed (a Python loop over every
                # element would cost more than the pass being charged)
                values = y.values() if ty is dict else y
                stack.extend(compress(values, map(_NESTED.__contains__, map(type, values))))
                if ty is dict:
                    stack.extend(compress(y, map(_NESTED.__contains__, map(type, y))))
            if total > left:
                self.charge(total)  # raises
        return total

    def charged(self, x: Any) -> Any:
        """`x`, after charging its nested size (wraps chained comparisons' operands)."""
        self.charge(self.size(x))
        return x

    def rendered(self, x: Any, width: int = 0) -> Any:
        """`x`, after charging what rendering it as text costs (wraps f-string values; `width` is the
        largest number in a static format spec, which pads or extends the text)."""
        if width > MAX_FORMAT_WIDTH:
            raise BudgetExceeded(f"format width or precision {width} over {MAX_FORMAT_WIDTH}")
        self.charge(REPR_UNITS * self.size(x) + (_int_bits(x) // 64) ** 2 // 8 + width // CHARS_PER_UNIT)
        return x

    def copied(self, x: Any) -> Any:
        """`x`, after charging its length (wraps slices, `*args`, `**kwargs`, unpacking and slice
        assignment: a copy of references); an unsized iterator comes back charging per item."""
        if isinstance(x, _SIZED):
            self.charge(flat(x))
            return x
        return _metered_iter(self, x)

    def key(self, k: Any) -> Any:
        """A subscript or display key, after charging its hash (a tuple is hashed in full, every time)."""
        if type(k) is tuple or type(k) is frozenset:
            self.charge(self.size(k))
        return k


def flat(x: Any) -> int:
    """Elements a shallow pass over `x` touches (a copy, a concatenation, a scan without compares)."""
    t = type(x)
    if t is str:
        return 1 + len(x) // CHARS_PER_UNIT
    if t in (list, tuple, set, frozenset, dict, range) or t in _VIEWS:
        return 1 + len(x) // ELEMS_PER_UNIT
    return 1


def _int_bits(x: Any) -> int:
    return x.bit_length() if type(x) is int else 0


def _check_int(r: Any, what: str) -> Any:
    if type(r) is int and r.bit_length() > MAX_INT_BITS:
        raise BudgetExceeded(f"{what}: integer over {MAX_INT_BITS} bits")
    return r


def _limbs(bits: int) -> int:
    return 1 + bits // 64


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


def binop_helper(meter: Meter, max_collection: int) -> Callable[[str, Any, Any, bool], Any]:
    """`_ambench_binop(op, a, b, inplace)`: charge, check, then apply one binary operator."""

    def binop(op: str, a: Any, b: Any, inplace: bool = False) -> Any:
        ta, tb = type(a), type(b)
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
                if isinstance(seq, (str, list, tuple)) and type(k) is int:
                    if len(seq) * k > max_collection:
                        raise BudgetExceeded(f"sequence repetition of more than {max_collection} elements")
                    # writing the same reference k times: about 5 ns an element, so twice the copy rate
                    meter.charge(1 + max(0, len(seq) * k) // (CHARS_PER_UNIT if type(seq) is str else 2 * ELEMS_PER_UNIT))
                    return (INPLACE if inplace else BINOPS)[op](a, b)
        if ta is not float and tb is not float:
            if op == "Mod" and ta is str:  # printf-style formatting renders its arguments in full
                stars = a.count("*") and sum(abs(v) for v in (b if tb is tuple else (b,)) if type(v) is int)
                meter.charge(meter.size(a) + REPR_UNITS * meter.size(b) + min(stars, 1 << 40) // CHARS_PER_UNIT)
                r = BINOPS[op](a, b)
                meter.charge(flat(r))  # what a width in the format string itself built
                return r
            if inplace and ta is list and not isinstance(b, _SIZED):
                b = _metered_iter(meter, b)  # list += iterator: charged per item
            if op in ("Sub", "BitOr", "BitAnd", "BitXor") and (isinstance(a, (set, frozenset, dict, *_VIEWS))):
                meter.charge(HASH_UNITS * (meter.size(a) + meter.size(b)))  # set algebra hashes the elements
            elif isinstance(a, _SIZED) or isinstance(b, _SIZED):
                # concatenation: a copy of both; in place, the right one into a growing list (its
                # reallocations and fresh pages cost about as much again)
                meter.charge(2 * flat(b) if inplace and ta is list else flat(a) + flat(b))
        return (INPLACE if inplace else BINOPS)[op](a, b)

    return binop


def cmp_helper(meter: Meter) -> Callable[[str, Any, Any], Any]:
    """`_ambench_cmp(op, a, b)`: charge what the comparison touches, then compare."""

    def cmp(op: str, a: Any, b: Any) -> Any:
        if op in ("In", "NotIn"):
            tb = type(b)
            if tb is list or tb is tuple or tb is _VIEWS[1] or tb is _VIEWS[2]:
                # a scan: each element compared with the needle, a compare costs at most the needle's size
                meter.charge(1 + len(b) * meter.size(a))
            elif tb is str:  # a substring search
                meter.charge(1 + len(b) // 16)
            elif tb is range and type(a) is not int:  # only an int is looked up without a scan
                meter.charge(1 + len(b))
            elif not isinstance(b, _SIZED):  # an iterator: consumed item by item
                b = _metered_iter(meter, b)
                meter.charge(meter.size(a))
            else:  # hashing the key: a tuple key is hashed in full
                meter.charge(meter.size(a) if isinstance(a, (tuple, frozenset)) else 1)
        elif op not in ("Is", "IsNot") and (isinstance(a, _SIZED) or isinstance(b, _SIZED)):
            # a comparison stops at the shorter operand (or at once, for different types)
            short = a if not isinstance(b, _SIZED) or (isinstance(a, _SIZED) and len(a) <= len(b)) else b
            meter.charge(meter.size(short))
        return CMPOPS[op](a, b)

    return cmp


def _metered_iter(meter: Meter, it: Iterable[Any], deep: int = 0) -> Iterable[Any]:
    """Items of an iterable a builtin consumes in C: sized ones charged up front (`deep` units per
    nested element when the builtin hashes or compares them), others per item."""
    if isinstance(it, _SIZED):
        meter.charge(deep * meter.size(it) if deep else flat(it))
        return it

    def gen() -> Iterable[Any]:
        for x in it:
            meter.tick(ITEM_UNITS + deep * meter.size(x) if deep else ITEM_UNITS)
            yield x

    return gen()


def builtins_table(meter: Meter, max_range: int, max_collection: int = 1_000_000) -> dict[str, Any]:
    """The tiny builtins table, each builtin that works in C charging what it touches. The wrapped
    types (`int`, `str`, `list`, ...) still work with `isinstance` and as `str.lower` (see `real_type`)."""
    binop = binop_helper(meter, max_collection)

    def rng(*args: Any) -> range:
        r = range(*args)
        if len(r) > max_range:
            raise BudgetExceeded(f"range of {len(r)} elements exceeds {max_range}")
        return r

    def consume(fn: Callable[..., Any], deep: int = 0) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            meter.charge(WRAPPER_UNITS)
            if args:
                args = (_metered_iter(meter, args[0], deep),) + args[1:]
            return fn(*args, **kwargs)

        wrapped.__name__ = fn.__name__
        return wrapped

    def sorted_(iterable: Any, *, key: Any = None, reverse: bool = False) -> list[Any]:
        meter.charge(WRAPPER_UNITS)
        items = list(_metered_iter(meter, iterable))
        return sort_list(meter, items, key, reverse)

    def minmax(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            meter.charge(WRAPPER_UNITS)
            if len(args) == 1:  # compares every element
                return fn(_metered_iter(meter, args[0], 1), **kwargs)
            meter.charge(sum(meter.size(a) for a in args))
            return fn(*args, **kwargs)

        wrapped.__name__ = fn.__name__
        return wrapped

    def sum_(iterable: Any, start: Any = 0) -> Any:
        meter.charge(WRAPPER_UNITS)
        items = _metered_iter(meter, iterable)
        if type(start) in (int, float, bool):
            r = sum(items, start)
            return _check_int(r, "sum")
        if type(start) is str:  # as Python: sum() refuses strings
            raise TypeError("sum() can't sum strings [use ''.join(seq) instead]")
        acc = start  # sum of lists/tuples: a concatenation per item, each charged
        for x in items:
            acc = binop("Add", acc, x)
        return acc

    def str_(*args: Any, **kwargs: Any) -> str:
        meter.charge(WRAPPER_UNITS)
        if args:
            meter.rendered(args[0])
        return str(*args, **kwargs)

    def int_(*args: Any, **kwargs: Any) -> int:
        meter.charge(WRAPPER_UNITS)
        if args and type(args[0]) is str:
            meter.charge(1 + (len(args[0]) // 20) ** 2 // 8)
        return _check_int(int(*args, **kwargs), "int()")

    def pow_(base: Any, exp: Any, mod: Any = None) -> Any:
        meter.charge(WRAPPER_UNITS)
        if mod is None:
            return binop("Pow", base, exp)
        meter.charge(1 + _limbs(_int_bits(mod)) ** 2 * max(1, _int_bits(exp)) // 4)
        return pow(base, exp, mod)

    def round_(number: Any, ndigits: Any = None) -> Any:
        meter.charge(WRAPPER_UNITS)
        # an int rounded to -n digits computes 10 ** n
        if type(ndigits) is int and abs(ndigits) > 1233:
            raise BudgetExceeded(f"round() to {ndigits} digits: an integer over {MAX_INT_BITS} bits")
        return round(number, ndigits)

    def divmod_(a: Any, b: Any) -> Any:
        meter.charge(WRAPPER_UNITS)
        meter.charge(1 + _limbs(_int_bits(a)) * _limbs(_int_bits(b)) // 4)
        return divmod(a, b)

    types = {"int": int_, "list": consume(list), "tuple": consume(tuple), "dict": consume(dict, HASH_UNITS),
             "set": consume(set, HASH_UNITS), "str": str_}
    real = real_types(types)

    def unwrap(cls: Any) -> Any:
        return tuple(unwrap(c) for c in cls) if type(cls) is tuple else real.get(id(cls), cls)

    def isinstance_(obj: Any, cls: Any) -> bool:
        meter.charge(WRAPPER_UNITS + 4 + (len(cls) if type(cls) is tuple else 0))
        return isinstance(obj, unwrap(cls))

    table = {
        "abs": abs, "min": minmax(min), "max": minmax(max), "range": rng, "len": len, **types,
        "float": float, "round": round_, "enumerate": enumerate, "zip": zip, "sum": sum_, "sorted": sorted_,
        "reversed": reversed, "bool": bool, "any": consume(any), "all": consume(all), "map": map,
        "filter": filter, "pow": pow_, "divmod": divmod_, "isinstance": isinstance_,
        "print": lambda *a, **k: None,  # harmless; the prompt asks for no prints
    }
    return table


_WRAPPED_TYPES = ("int", "list", "tuple", "dict", "set", "str")


def real_types(table: dict[str, Any]) -> dict[int, type]:
    """id(wrapper) -> the builtin type it stands for, for the wrapped types of a builtins table."""
    return {id(table[n]): getattr(builtins, n) for n in _WRAPPED_TYPES if n in table}


def sort_units(meter: Meter, items: list[Any]) -> None:
    """A sort's compares: n log2 n / 2 of them, each costing up to an element's size."""
    n = len(items)
    if n > 1:
        meter.charge(meter.size(items) * max(1, math.ceil(math.log2(n))) // 2)


def sort_list(meter: Meter, items: list[Any], key: Any, reverse: bool) -> list[Any]:
    """sorted(items, key=key, reverse=reverse), charged for the compares of what is compared: the keys
    when there is a key function (called once per item, in order, as Python does)."""
    if key is None:
        sort_units(meter, items)
        return sorted(items, reverse=reverse)
    meter.charge(3 * WRAPPER_UNITS + ITEM_UNITS * len(items))  # the key calls, made from here
    keys = [key(x) for x in items]
    sort_units(meter, keys)
    order = sorted(range(len(items)), key=keys.__getitem__, reverse=reverse)  # stable, as sorting the items
    return [items[i] for i in order]


_STR_METHODS = frozenset({"upper", "lower", "strip", "lstrip", "rstrip", "split", "replace", "zfill", "startswith",
                          "endswith"})
_ITERABLE_ARGS = frozenset({"extend", "update", "union", "intersection", "difference", "join"})
_HASHING = frozenset({"add", "discard", "get", "setdefault"})


def attr_helper(meter: Meter, real: dict[int, type] | None = None) -> Callable[[Any, str], Any]:
    """`_ambench_attr(obj, name)`: an allowed attribute; a method comes back charging what it touches.
    `real` maps the builtins table's wrapped types to the types (so `str.lower` is the method)."""
    real = real or {}

    def attr(obj: Any, name: str) -> Any:
        obj = real.get(id(obj), obj)
        bound = getattr(obj, name)  # name is from the policy's allow-list; a missing one raises as usual
        if not callable(bound):
            return bound
        if isinstance(obj, type):  # an unbound method, str.lower(s): the bound one of its first argument

            def unbound(self: Any, *args: Any, **kwargs: Any) -> Any:
                meter.charge(UNBOUND_UNITS)
                if not isinstance(self, obj):
                    raise TypeError(f"{obj.__name__}.{name}() needs a {obj.__name__}, not {type(self).__name__}")
                return attr(self, name)(*args, **kwargs)

            return unbound

        if name == "sort" and type(obj) is list:

            def sort(*, key: Any = None, reverse: bool = False) -> None:
                meter.charge(WRAPPER_UNITS + flat(obj))
                obj[:] = sort_list(meter, list(obj), key, bool(reverse))

            return sort

        def method(*args: Any, **kwargs: Any) -> Any:
            meter.charge(WRAPPER_UNITS)
            if name in ("pop", "insert"):  # O(n - i) on a list; O(1) at its end; a dict hashes the key
                if type(obj) is dict:
                    meter.charge(meter.size(args[0]) if args and isinstance(args[0], (tuple, frozenset)) else 1)
                else:
                    meter.charge(flat(obj) if type(obj) is list and (name == "insert" or args) else 1)
            elif name in ("index", "count"):  # each element compared with the argument
                meter.charge(1 + (len(obj) * meter.size(args[0]) if args and type(obj) is not str
                                  else flat(obj) + sum(flat(a) for a in args)))
            elif name in ("copy", "clear", "reverse"):
                meter.charge(flat(obj))
            elif name in _STR_METHODS:
                meter.charge(flat(obj) + sum(flat(a) for a in args))
            elif name in _ITERABLE_ARGS:
                deep = 0 if name in ("extend", "join") else HASH_UNITS
                args = tuple(_metered_iter(meter, a, deep) for a in args)
                if name != "extend":
                    meter.charge(flat(obj))
            elif name in _HASHING and args and isinstance(args[0], (tuple, frozenset, str)):
                meter.charge(meter.size(args[0]))
            else:  # append, items, keys, values, and the O(1) rest
                meter.charge(1)
            r = bound(*args, **kwargs)
            if name == "split":  # a new string per piece
                meter.charge(len(r))
            elif type(r) is str:  # what replace / join / upper built
                meter.charge(flat(r) + (len(r) // 8 if name == "replace" else 0))
            return r

        return method

    return attr


#: math's functions that build integers, with a bound on their arguments checked before they run
_MATH_INT_BOUNDS = {"factorial": 500, "comb": MAX_INT_BITS, "perm": MAX_INT_BITS}


def math_functions(meter: Meter, max_collection: int = 1_000_000) -> dict[str, Callable[..., Any]]:
    """Replacements for math's integer-building functions (the rest are float work of O(1))."""

    def bounded(name: str) -> Callable[..., Any]:
        fn, bound = getattr(math, name), _MATH_INT_BOUNDS[name]

        def wrapped(*args: Any) -> Any:
            meter.charge(WRAPPER_UNITS)
            if any(type(a) is int and a > bound for a in args):
                raise BudgetExceeded(f"math.{name} of an argument over {bound}")
            meter.charge(1 + max((a for a in args if type(a) is int), default=0) ** 2 // 64)
            return _check_int(fn(*args), f"math.{name}")

        wrapped.__name__ = name
        return wrapped

    def prod(iterable: Any, *, start: Any = 1) -> Any:
        meter.charge(WRAPPER_UNITS)
        mul = binop_helper(meter, max_collection)
        acc = start
        for x in _metered_iter(meter, iterable):
            acc = mul("Mult", acc, x)
        return acc

    def int_fold(name: str) -> Callable[..., Any]:
        fn = getattr(math, name)

        def wrapped(*args: Any) -> Any:
            meter.charge(WRAPPER_UNITS + sum(_limbs(_int_bits(a)) ** 2 for a in args) // 8)
            return _check_int(fn(*args), f"math.{name}")

        wrapped.__name__ = name
        return wrapped

    out: dict[str, Callable[..., Any]] = {n: bounded(n) for n in _MATH_INT_BOUNDS if hasattr(math, n)}
    out["prod"] = prod
    for n in ("gcd", "lcm", "isqrt"):
        if hasattr(math, n):
            out[n] = int_fold(n)
    for n in ("fsum",):
        fn = getattr(math, n)
        out[n] = lambda it, _fn=fn: _fn(_metered_iter(meter, it))
    return out
