"""The charge table's builtins and methods: the builtins table a program gets, and each method's rule."""

from __future__ import annotations

import builtins
import functools
import operator
import types
from itertools import compress, repeat
from typing import Any, Callable

from bench.canvas.medium import BudgetExceeded
from bench.sandbox.meter import units
from bench.sandbox.meter.containers import (
    _at,
    _copy,
    _extend,
    _hash_all,
    _hash_key,
    _metered_iter,
    _per_item,
    _range_scan,
    _scan,
    flat,
    index_of,
    sort_in_place,
    sort_list,
)
from bench.sandbox.meter.counter import Forbidden, Meter
from bench.sandbox.meter.integers import _check_int, _int_bits, _limbs
from bench.sandbox.meter.operators import binop_helper
from bench.sandbox.meter.text import _affix, _case, _join, _replace, _search, _split, _strip, _zfill
from bench.sandbox.meter.units import (
    _NESTING,
    ELEMS_PER_UNIT,
    FLOAT_CHARS_PER_UNIT,
    HASH_UNITS,
    MAX_INT_BITS,
    MAX_RANGE_BITS,
    REPR_UNITS,
    SUM_BITS_PER_UNIT,
    UNBOUND_UNITS,
    WRAPPER_UNITS,
)

#: bound by assignment, not by `import`: CPython 3.11 compiles a method call on an imported name
#: (`_NESTED.isdisjoint(...)`) to an attribute load that makes a bound method on every call, not to
#: LOAD_METHOD; hot paths call these, so they keep the bytecode they had in the single meter.py
_NESTED = units._NESTED


#: The charge table, part 1: every builtin a program can reach and the rule that charges it. "constant":
#: its C work is bounded by a constant given the other bounds (integers of MAX_INT_BITS, no text over the
#: caps); a C builtin that calls it per item (`map`, `filter`, sort keys, `min`/`max` keys) pays per item.
BUILTIN_RULES: dict[str, str] = {
    "abs": "constant (an int of at most MAX_INT_BITS bits, or a float)",
    "bool": "constant (a container's truth is its length)",
    "len": "constant",
    "enumerate": "constant to build, and its source's nesting (refused past MAX_DEPTH); its items are charged by "
                 "whoever consumes them",
    "zip": "1 unit per iterable to build; with more than 8 iterables, an item (one pull from each) costs "
           "1 unit per iterable more (zip(*[a] * 100000) built 100,000-tuples for 3 units)",
    "map": "as zip (each call gets one argument per iterable)",
    "reversed": "constant to build (needs a sized sequence); items charged by their consumer",
    "filter": "its source metered per item pulled, 4 units each (it may skip any number per item it yields, and calls its function on each)",
    "range": "constant; refused over Limits.max_range elements",
    "min": "2 arguments: both sizes; 1 iterable: 1 unit per nested element pulled (each is compared)",
    "max": "as min",
    "sum": "1 unit per element of a list or tuple and its integers' bits / 256, or 4 per item pulled and its size; "
           "lists and tuples: each concatenation",
    "sorted": "the items copied, then n log2 n / 2 compares of the elements' sizes (of the keys, with `key`)",
    "any": "per item pulled", "all": "per item pulled",
    "list": "per item pulled (a copy: 1 unit per 8 elements of a sized one)",
    "tuple": "as list",
    "dict": "2 units per nested element pulled (hashed); keywords as a copy",
    "set": "as dict",
    "str": "what rendering costs: 5 units per nested element, a quadratic charge for big integers; no address",
    "int": "a string: quadratic in its digits; the result checked against MAX_INT_BITS",
    "float": "a string: 1 unit per 16 characters (a 1M-digit literal took 1 ms)",
    "round": "constant; refused past 1,233 digits (an integer of MAX_INT_BITS)",
    "pow": "as the `**` operator; with a modulus, quadratic in its limbs times the exponent's bits",
    "divmod": "quadratic in the limbs of both integers",
    "isinstance": "the class tuple walked (nested tuples and unions), 5 units per element",
    "print": "constant (prints nothing)",
}
#: the wrappers that stand for a builtin type (`isinstance(x, str)`, `str.lower`, `tuple[int, int]` use the type)
_WRAPPED_TYPES = ("int", "float", "list", "tuple", "dict", "set", "str", "zip", "map", "enumerate", "filter")


def _named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`fn` presented as the builtin it stands for (its repr and a generic alias's repr name it so)."""
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = "builtins"
    return fn


def builtins_table(meter: Meter, max_range: int, max_collection: int = 1_000_000) -> dict[str, Any]:
    """The tiny builtins table, each builtin charged by its rule in BUILTIN_RULES. The wrapped types (`int`,
    `str`, `list`, ...) still work with `isinstance`, as `str.lower` and in `tuple[int, int]` (`real_types`)."""
    real: dict[int, type] = {}  # filled below, once the wrappers exist
    binop = binop_helper(meter, max_collection, real)

    def rng(*args: Any) -> range:
        if any(type(a) is int and a.bit_length() > MAX_RANGE_BITS for a in args):
            # a drawing program never counts past 2^64; each int a range of big ints makes is a new object of their
            # size, made in C by list, zip, reversed... (issue 42: `outcome` memory or timeout with the machine)
            raise ValueError(f"range bounds over {MAX_RANGE_BITS} bits are not allowed in the sandbox")
        r = range(*args)
        if len(r) > max_range:
            raise BudgetExceeded(f"range of {len(r)} elements exceeds {max_range}")
        return r

    def consume(fn: Callable[..., Any], deep: int = 0) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            meter.charge(WRAPPER_UNITS)
            if args:
                args = (_metered_iter(meter, args[0], deep),) + args[1:]
            if kwargs:
                meter.charge(flat(kwargs))
            return fn(*args, **kwargs)

        return _named(wrapped, fn.__name__)

    def sorted_(iterable: Any, *, key: Any = None, reverse: bool = False) -> list[Any]:
        meter.charge(WRAPPER_UNITS)
        items = list(_metered_iter(meter, iterable))
        return sort_list(meter, items, key, reverse)

    def minmax(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            meter.charge(WRAPPER_UNITS)
            if len(args) == 1:  # compares every element
                return fn(_metered_iter(meter, args[0], 1), **kwargs)
            # each argument compared: its size; flat ones (the common case) counted at C speed, since a
            # Python-level size per argument cost more than the compares (map(max, *[a] * 100000))
            meter.charge(len(args) if _NESTED.isdisjoint(map(type, args)) else sum(map(meter.size, args)))
            return fn(*args, **kwargs)

        return _named(wrapped, fn.__name__)

    def sum_(iterable: Any, /, start: Any = 0) -> Any:
        meter.charge(WRAPPER_UNITS)
        if type(start) in (int, float, bool):
            if type(iterable) in (list, tuple):
                # each element added (1 unit: the C pass that finds the integers' sizes is about as costly as
                # the sum of small ones) and each integer's bits (issue 32: `sum([7 ** 1450] * 100000)` was
                # charged 1 unit per 8 elements and took 70 x that)
                if len(iterable) <= 16:  # setting up the C pass costs more than a short loop
                    bits = sum([x.bit_length() for x in iterable if type(x) is int])
                else:
                    ints = compress(iterable, map(operator.is_, map(type, iterable), repeat(int)))
                    bits = sum(map(int.bit_length, ints))
                meter.charge(1 + len(iterable) + bits // SUM_BITS_PER_UNIT)
                items = iterable
            else:
                items = _metered_iter(meter, iterable, 1)  # per item pulled, and its size (an int's bits)
            r = sum(items, start)
            return _check_int(r, "sum")
        if type(start) is str:  # as Python: sum() refuses strings
            raise TypeError("sum() can't sum strings [use ''.join(seq) instead]")
        acc = start  # sum of lists/tuples: a concatenation per item, each charged
        for x in _metered_iter(meter, iterable):
            acc = binop("Add", acc, x)
        return acc

    def str_(*args: Any, **kwargs: Any) -> str:
        meter.charge(WRAPPER_UNITS)
        if args and not kwargs and len(args) == 1:
            return meter.rendered(args[0], 0, ord("s"))  # no address (`scrub`)
        if args:
            meter.rendered(args[0])
        return str(*args, **kwargs)

    def int_(*args: Any, **kwargs: Any) -> int:
        meter.charge(WRAPPER_UNITS)
        if args and type(args[0]) is str:
            meter.charge(1 + (len(args[0]) // 20) ** 2 // 8)
        return _check_int(int(*args, **kwargs), "int()")

    def float_(*args: Any) -> float:
        meter.charge(WRAPPER_UNITS)
        if args and type(args[0]) is str:
            meter.charge(1 + len(args[0]) // FLOAT_CHARS_PER_UNIT)
        return float(*args)

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

    def divmod_(a: Any, b: Any, /) -> Any:
        meter.charge(WRAPPER_UNITS)
        meter.charge(1 + _limbs(_int_bits(a)) * _limbs(_int_bits(b)) // 4)
        return divmod(a, b)

    def filter_(function: Any, iterable: Any, /) -> Any:
        meter.charge(WRAPPER_UNITS)
        # 4 units an item: the function is called from C on every item, a bound method (`d.get`) at no
        # charge of its own (filter(d.get, big) measured 0.50-0.61 s at the full budget with 1 or 2)
        depth = 1 + meter.nest(iterable) if type(iterable) in _NESTING else 1
        return meter.made(filter(function, _per_item(meter, iterable, 4)), depth)

    def unwrap(cls: Any) -> Any:
        if type(cls) is tuple:
            return tuple(unwrap(c) for c in cls)
        return real.get(id(cls), cls)

    def isinstance_(obj: Any, cls: Any, /) -> bool:
        # the wrapper, `unwrap` and CPython's check (map(isinstance, ...) measured 0.40-0.56 s at the full
        # budget with 4 or 12 units over WRAPPER_UNITS, so 16)
        meter.charge(WRAPPER_UNITS + 16)
        if type(cls) is tuple:
            # nested tuples are walked by `unwrap` (a Python call per element, about 150 ns) and by CPython
            meter.charge(REPR_UNITS * meter.size(cls))
        elif type(cls) is types.UnionType:
            meter.charge(len(cls.__args__))
        return isinstance(obj, unwrap(cls))

    nesting = _NESTING

    def many(fn: Callable[..., Any], first: int) -> Callable[..., Any]:
        # zip and map pull one item from each iterable per item they yield: a consumer pays ITEM_UNITS an
        # item, which covers a few iterables, not a hundred thousand
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            meter.charge(WRAPPER_UNITS + len(args))
            # one level more than its deepest source (iterating it recurses through them all in C)
            out = fn(*args, **kwargs)
            k = len(args) - first
            if k > ELEMS_PER_UNIT:
                out = _per_item(meter, out, k)  # a unit per pull: 16 ns measured
            if nesting.isdisjoint(map(type, args)):
                return out  # the common case: no source is itself an iterator
            return meter.made(out, 1 + max(map(meter.nest, args[first:]), default=0))

        return _named(wrapped, fn.__name__)

    def enumerate_(iterable: Any, start: Any = 0) -> Any:
        # a level above its source, as map and zip (a chain of 200,000 enumerates overflowed the C stack); the
        # wrapper's own call charged, as every wrapper's (the builtin itself was handed out before)
        meter.charge(WRAPPER_UNITS)
        if type(start) is int and start.bit_length() > MAX_RANGE_BITS:
            raise ValueError(f"an enumerate start over {MAX_RANGE_BITS} bits is not allowed in the sandbox")
        if type(iterable) not in _NESTING:
            return enumerate(iterable, start)
        return meter.made(enumerate(iterable, start), 1 + meter.nest(iterable))

    def print_(*args: Any, **kwargs: Any) -> None:
        return None  # harmless; the prompt asks for no prints

    typed = {"int": int_, "float": float_, "list": consume(list), "tuple": consume(tuple),
             "dict": consume(dict, HASH_UNITS), "set": consume(set, HASH_UNITS), "str": str_}
    for name, fn in typed.items():
        _named(fn, name)

    table = {
        "abs": abs, "min": minmax(min), "max": minmax(max), "range": _named(rng, "range"), "len": len, **typed,
        "round": _named(round_, "round"), "enumerate": _named(enumerate_, "enumerate"), "zip": many(zip, 0),
        "sum": _named(sum_, "sum"),
        "sorted": _named(sorted_, "sorted"), "reversed": reversed, "bool": bool, "any": consume(any),
        "all": consume(all), "map": many(map, 1), "filter": _named(filter_, "filter"), "pow": _named(pow_, "pow"),
        "divmod": _named(divmod_, "divmod"), "isinstance": _named(isinstance_, "isinstance"),
        "print": _named(print_, "print"),
    }
    real.update(real_types(table))
    return table


def real_types(table: dict[str, Any]) -> dict[int, type]:
    """id(wrapper) -> the builtin type it stands for, for the wrapped types of a builtins table."""
    return {id(table[n]): getattr(builtins, n) for n in _WRAPPED_TYPES if n in table}


def generic_helper(real: dict[int, type], meter: Meter) -> Callable[[Any, Any], Any]:
    """`_ambench_generic(obj, k)`: `obj[k]` where the program wrote `tuple[...]` (or another wrapped type's name):
    an ordinary subscript when the name holds a value, `forbidden` when it holds the type (a generic alias: issue
    42; until then aliases were built and metered, and their nesting through unions was not)."""

    key = meter.key

    def generic(obj: Any, k: Any) -> Any:
        if id(obj) in real:
            # issue 42: a generic alias nested through a union (`t = tuple[t | None]` 100,000 times, then hashed)
            # crashed the worker, and an alias's repr or union compares ran outside every charge; a drawing program
            # never needs one (annotations, where they are written, are not evaluated)
            raise Forbidden(f"subscripting the type {real[id(obj)].__name__} (a generic alias) is not allowed")
        return obj[key(k)]

    return generic


# -- the charge table, part 2: methods ---------------------------------------------------------------------
# A rule (in bench.sandbox.meter.containers and .text) is called as rule(meter, obj, args, kwargs) before the
# method runs and returns the arguments to call it with (an iterable argument comes back metered). `None`:
# constant (the bound method itself is handed out, so `a.append == a.append` as in CPython).

_INDEX = object()  #: list.index / tuple.index: `index_of`
_SORT = object()  #: list.sort: `sort_in_place`

#: The charge table, part 2: (type, method name) -> rule, for every allowed method of every type a program
#: can hold (tests/bench/test_charge_table.py checks it is complete). A method not listed is refused.
METHOD_RULES: dict[tuple[type, str], Any] = {
    (list, "append"): None, (list, "extend"): _extend, (list, "insert"): _at, (list, "pop"): _at,
    (list, "reverse"): _copy, (list, "sort"): _SORT, (list, "index"): _INDEX, (list, "count"): _scan,
    (list, "copy"): _copy, (list, "clear"): _copy,
    (tuple, "index"): _INDEX, (tuple, "count"): _scan,
    (range, "index"): _range_scan, (range, "count"): _range_scan,
    (dict, "items"): None, (dict, "keys"): None, (dict, "values"): None, (dict, "get"): _hash_key,
    (dict, "setdefault"): _hash_key, (dict, "pop"): _hash_key, (dict, "update"): _hash_all, (dict, "copy"): _copy,
    (dict, "clear"): _copy,
    (set, "add"): _hash_key, (set, "discard"): _hash_key, (set, "pop"): None, (set, "union"): _hash_all,
    (set, "intersection"): _hash_all, (set, "difference"): _hash_all, (set, "update"): _hash_all,
    (set, "copy"): _copy, (set, "clear"): _copy,
    (str, "upper"): _case, (str, "lower"): _case, (str, "strip"): _strip, (str, "lstrip"): _strip,
    (str, "rstrip"): _strip, (str, "split"): _split, (str, "join"): _join, (str, "replace"): _replace,
    (str, "startswith"): _affix, (str, "endswith"): _affix, (str, "zfill"): _zfill, (str, "count"): _search,
    (str, "index"): _search,
}


class _Method(functools.partial):
    """A charged bound method (a partial of `_call_method`, so C calls it without a Python frame of its own):
    it compares as CPython's bound methods do (the same object and name), and its repr has no address."""

    __slots__ = ()

    def __eq__(self, other: Any) -> bool:
        return type(other) is _Method and self.args[1] is other.args[1] and self.args[2] == other.args[2]

    def __ne__(self, other: Any) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash((id(self.args[1]), self.args[2]))  # as CPython's: the object's identity and the name

    def __repr__(self) -> str:
        return f"<built-in method {self.args[2]} of {type(self.args[1]).__name__} object>"


def _call_method(meter: Meter, obj: Any, name: str, rule: Any, *args: Any, **kwargs: Any) -> Any:
    meter.charge(WRAPPER_UNITS)
    if rule is _SORT:
        return sort_in_place(meter, obj, *args, **kwargs)
    if rule is _INDEX:
        _scan(meter, obj, args, kwargs)
        return index_of(obj, *args, **kwargs)
    args = rule(meter, obj, args, kwargs)
    return getattr(obj, name)(*args, **kwargs)


def attr_helper(meter: Meter, real: dict[int, type] | None = None) -> Callable[[Any, str], Any]:
    """`_ambench_attr(obj, name)`: an allowed method, by its rule in METHOD_RULES (looked up by the exact
    type of `obj`; one without a rule is refused). `real` maps the builtins table's wrapped types to the
    types (so `str.lower` is the method, charged as the bound one of its first argument)."""
    real = real or {}
    rules = METHOD_RULES

    def attr(obj: Any, name: str) -> Any:
        obj = real.get(id(obj), obj)
        t = type(obj)
        key = (t, name)
        if key not in rules:
            if t is type and (obj, name) in rules:  # an unbound method, str.lower(s)

                def unbound(self: Any, *args: Any, **kwargs: Any) -> Any:
                    meter.charge(UNBOUND_UNITS)
                    if type(self) is not obj:
                        raise TypeError(f"{obj.__name__}.{name}() needs a {obj.__name__}, not {type(self).__name__}")
                    return attr(self, name)(*args, **kwargs)

                return _named(unbound, name)
            bound = getattr(obj, name)  # raises AttributeError as usual when there is no such attribute
            if not callable(bound):
                return bound
            raise AttributeError(f"{t.__name__}.{name} is not available in the sandbox")
        rule = rules[key]
        if rule is None:
            return getattr(obj, name)
        return _Method(_call_method, meter, obj, name, rule)

    return attr
