"""Containers and iteration: sizes, nesting, hashing, iterator metering, sorting, and their method rules."""

from __future__ import annotations

import math
import operator
import types
from typing import TYPE_CHECKING, Any, Iterable

from bench.sandbox.meter.units import (
    _MAKES,
    _SIZED,
    _VIEWS,
    CHARS_PER_UNIT,
    ELEMS_PER_UNIT,
    HASH_UNITS,
    INT_BITS_PER_UNIT,
    ITEM_UNITS,
    MADE_UNITS,
    WRAPPER_UNITS,
)

if TYPE_CHECKING:
    from bench.sandbox.meter.counter import Meter


def flat(x: Any) -> int:
    """Elements a shallow pass over `x` touches (a copy, a concatenation, a scan without compares)."""
    t = type(x)
    if t is str:
        return 1 + len(x) // CHARS_PER_UNIT
    if t in (list, tuple, set, frozenset, dict, range) or t in _VIEWS:
        return 1 + len(x) // ELEMS_PER_UNIT
    return 1


def made_units(x: Any) -> int:
    """Units of a C pass that makes the elements of `x` one by one (MADE_UNITS each where they are new objects:
    a range's ints, non-ASCII text's characters, `dict.items()`'s pairs), else a copy of references (`flat`)."""
    t = type(x)
    if t is range or t is _VIEWS[2]:
        # (a range's ints are one limb at most: bounds over MAX_RANGE_BITS are refused when it is made)
        return 1 + MADE_UNITS * len(x)
    if t is str:
        return 1 + (len(x) // ELEMS_PER_UNIT if x.isascii() else MADE_UNITS * len(x))
    return flat(x)


def _nest_children(x: Any) -> Iterable[Any]:
    """What a nesting object pulls from or holds: an iterator's sources (from its `__reduce__`, which names
    them), a generator's locals (a generator expression's source is its `.0`), a generic alias's arguments."""
    t = type(x)
    if t is types.GeneratorType:
        frame = x.gi_frame
        return tuple(frame.f_locals.values()) if frame is not None else ()
    if t is types.GenericAlias:
        return x.__args__
    args = x.__reduce__()[1]
    return args if type(args) is tuple else ()


def _hashed_units(meter: Meter, x: Any) -> int:
    """Units of hashing every element of `x` in C: its nested size, and for a string or a range the elements C makes
    one by one (a string's characters are hashed one at a time, not 64 to a unit)."""
    if type(x) is str:
        return HASH_UNITS * (1 + len(x)) + made_units(x)
    return HASH_UNITS * meter.size(x) + (made_units(x) if type(x) in _MAKES else 0)


def _metered_iter(meter: Meter, it: Iterable[Any], deep: int = 0) -> Iterable[Any]:
    """Items of an iterable a builtin consumes in C: sized ones charged up front (`deep` units per
    nested element when the builtin hashes or compares them), others per item."""
    if isinstance(it, _SIZED):
        # the elements C makes (a range's ints, non-ASCII characters), then the hashes or compares of them
        meter.charge(deep * meter.size(it) + (made_units(it) if type(it) in _MAKES else 0) if deep else made_units(it))
        return it

    def gen() -> Iterable[Any]:
        for x in it:
            # hashing or comparing items: the size measured per item is a Python call of its own (dict |= zip
            # took 0.6-0.8 s at the full budget with one ITEM_UNITS for both, 0.49-0.58 s with two); a big int
            # pulled is charged by its size, for an iterator such as map(abs, bigs) makes each one new (issue 42)
            meter.tick(3 * ITEM_UNITS + deep * meter.size(x) if deep else
                       ITEM_UNITS + (x.bit_length() // INT_BITS_PER_UNIT if type(x) is int else 0))
            yield x

    return gen()


def _per_item(meter: Meter, it: Any, units: int = 1) -> Any:
    """`it`, charging `units` per item pulled (a sized one up front): what `filter` pulls to find its items,
    and the items of a zip or map over many iterables."""
    if isinstance(it, _SIZED):
        meter.charge(1 + units * len(it))
        return it

    def gen() -> Iterable[Any]:
        for x in it:
            meter.tick(ITEM_UNITS + units)
            yield x

    return gen()


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
    meter.charge(4 * WRAPPER_UNITS + ITEM_UNITS * len(items))  # the key calls, made from here
    keys = [key(x) for x in items]
    sort_units(meter, keys)
    order = sorted(range(len(items)), key=keys.__getitem__, reverse=reverse)  # stable, as sorting the items
    return [items[i] for i in order]


def sort_in_place(meter: Meter, obj: list[Any], *, key: Any = None, reverse: bool = False) -> None:
    """list.sort as CPython does it: the list is empty while its key function runs, and a key function
    that changes it makes the sort fail with ValueError (the list then holds its own items, sorted, and
    what the key added is dropped)."""
    # the list emptied and refilled around the sort, as CPython's, and the sort's own frames (a 2-item sort by key
    # measured 66 ns a unit at 2 WRAPPER_UNITS here: 0.66 s at the full budget, over the 0.6 s the bench allows)
    meter.charge(6 * WRAPPER_UNITS + flat(obj))  # 0.55-0.71 s at 3 and 4 WRAPPER_UNITS here and below
    items = obj[:]
    obj.clear()
    try:
        done = sort_list(meter, items, key, bool(reverse))
    except BaseException:
        obj[:] = items
        raise
    changed = bool(obj)
    obj[:] = done
    if changed:
        raise ValueError("list modified during sort")


# -- method rules (bench.sandbox.meter.tables.METHOD_RULES): lists, tuples, ranges, dicts and sets -----------
# A rule is called as rule(meter, obj, args, kwargs) before the method runs and returns the arguments to
# call it with (an iterable argument comes back metered).


def _hash_key(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """the key's hash: a tuple's is its nested size, a string's its length (then cached)"""
    if args and type(args[0]) in (tuple, frozenset, str):
        meter.charge(meter.size(args[0]))
    return args


def _copy(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """a shallow pass over the object: 1 unit per 8 elements"""
    meter.charge(flat(obj))
    return args


def _at(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """list.pop(i) / insert(i, x): the elements after i move (the whole list, as a bound); pop() is O(1)"""
    meter.charge(flat(obj) if args else 1)
    return args


def _scan(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """every element compared with the argument: length x the argument's nested size"""
    meter.charge(1 + len(obj) * (meter.size(args[0]) if args else 1))
    return args


def index_of(obj: list[Any] | tuple[Any, ...], value: Any, start: Any = 0, stop: Any = None) -> int:
    """`obj.index(value, start, stop)` without CPython's error message, which is the full repr of `value` ("%R is
    not in list"): `[].index(big)` built 2 s of text for the 1 unit its scan of no elements costs (issue 32)."""
    begin, end, _ = slice(start, stop).indices(len(obj))
    try:
        return begin + operator.indexOf(obj[begin:end] if (begin, end) != (0, len(obj)) else obj, value)
    except ValueError:
        kind = type(obj).__name__
        raise ValueError(f"{kind}.index(x): x not in {kind}") from None


def _range_scan(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """an int is found arithmetically; anything else is compared with every element"""
    meter.charge(1 if args and type(args[0]) in (int, bool) else 1 + len(obj))
    return args


def _extend(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """the iterable metered: 1 unit per 8 elements of a sized one, 3 per item pulled"""
    return tuple(_metered_iter(meter, a) for a in args)


def _hash_all(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """a copy of the object, and every element of every argument hashed: 2 units per nested element"""
    meter.charge(flat(obj) + flat(kwargs))
    return tuple(_metered_iter(meter, a, HASH_UNITS) for a in args)
