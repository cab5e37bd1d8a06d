"""The unit counter: `Meter`, which charges work units and raises past the budget, and `Forbidden`."""

from __future__ import annotations

import operator
import types
from itertools import compress, repeat
from typing import Any

from bench.canvas.medium import BudgetExceeded
from bench.sandbox.meter import text, units
from bench.sandbox.meter.containers import _metered_iter, _nest_children, flat, made_units
from bench.sandbox.meter.integers import _OVER_ONE_LIMB, _quadratic
from bench.sandbox.meter.text import _PLAIN_TEXT, scrub
from bench.sandbox.meter.units import (
    _NESTING,
    _SIZED,
    _VIEWS,
    CHARS_PER_UNIT,
    GEN_WALK_UNITS,
    HASH_UNITS,
    MAX_DEPTH,
    MAX_FORMAT_WIDTH,
    NEST_WALK_UNITS,
    REPR_UNITS,
    WALK_UNITS,
    WRAPPER_UNITS,
)

#: bound by assignment, not by `import`: CPython 3.11 compiles a method call on an imported name
#: (`_NESTED.isdisjoint(...)`) to an attribute load that makes a bound method on every call, not to
#: LOAD_METHOD; hot paths call these, so they keep the bytecode they had in the single meter.py
_NESTED, _WALKED, _CONVERSIONS = units._NESTED, units._WALKED, text._CONVERSIONS


class Forbidden(Exception):
    """A construct the program may not use, found as it runs (outcome `forbidden`): what a drawing program never
    needs and the meter cannot bound (issue 42: a generic alias nested through a union crashed the worker)."""


class Meter:
    """Work units spent by one program, raising BudgetExceeded past `cap`."""

    __slots__ = ("units", "cap", "limit", "nests", "source")

    def __init__(self, cap: int) -> None:
        self.units = 0
        self.limit = self.cap = cap  #: the budget
        #: the iterators and generic aliases this program built last, id -> (object, nesting depth): a chain
        #: built in a loop finds its previous link here instead of walking it again (`Meter.nest`)
        self.nests: dict[int, tuple[Any, int]] = {}
        self.source = 0  #: the nesting depth of the generator expression's source just evaluated (`sourced`)

    def _passed(self) -> None:
        raise BudgetExceeded(f"more than {self.limit} work units (operations and the elements they touch)")

    def charge(self, n: int) -> None:
        self.units += n
        if self.units > self.cap:
            self._passed()

    def tick(self, n: int = 1) -> bool:
        """What instrumented code calls per loop pass / call / comprehension item; returns True (`charge`
        spelled out again: this is the hottest call of a program, one call level matters)."""
        self.units += n
        if self.units > self.cap:
            self._passed()
        return True

    def remaining(self) -> int:
        return max(0, self.limit - self.units)

    def size(self, x: Any) -> int:
        """Elements a C-level pass over `x` touches, nested containers included; stops (raising) once the
        count exceeds what the budget has left, so measuring never costs more than the budget."""
        t = type(x)
        if t is int or t is bool or t is float or x is None:
            return 1 if t is not int else 1 + x.bit_length() // 512
        if t is str:
            return 1 + len(x) // CHARS_PER_UNIT
        if t is range:
            return 1 + len(x)
        if t not in _NESTED:
            return 1
        if t is not dict and _NESTED.isdisjoint(map(type, x)):  # flat: the common case, at C speed
            return 1 + len(x)
        left = self.remaining() + 1
        total, stack = 0, [(x, 1)]
        while stack:
            y, depth = stack.pop()
            ty = type(y)
            if ty is str:
                total += 1 + len(y) // CHARS_PER_UNIT
                continue
            if depth > MAX_DEPTH:
                self.charge(total)
                raise BudgetExceeded(f"a structure nested more than {MAX_DEPTH} levels deep")
            total += WALK_UNITS + len(y)
            if y:
                # the nested containers and strings, picked out at C speed (a Python loop over every
                # element would cost more than the pass being charged)
                values = y.values() if ty is dict else y
                below = repeat(depth + 1)
                stack.extend(zip(compress(values, map(_NESTED.__contains__, map(type, values))), below))
                if ty is dict:
                    stack.extend(zip(compress(y, map(_NESTED.__contains__, map(type, y))), below))
            if total > left:
                self.charge(total)  # raises
        return total

    def nest(self, x: Any) -> int:
        """How deeply `x` nests what C recurses through without a depth check: iterators that pull from
        iterators (`enumerate`, `map`, `zip`, `filter`, generators) when they are iterated, generic aliases of
        generic aliases when they are hashed (issue 32: 200,000 levels of either overflowed the C stack, a
        `crash` at a depth set by the host's `ulimit -s`). 0 for anything else. Walked without recursion,
        each nesting object charged WALK_UNITS, the last chain link built found in `nests`; raises past
        MAX_DEPTH."""
        if type(x) not in _NESTING:
            return 0
        hit = self.nests.get(id(x))
        if hit is not None and hit[0] is x:
            return hit[1]
        deepest, seen, stack = 0, {}, [(x, 1)]
        while stack:
            y, level = stack.pop()
            if level > MAX_DEPTH:
                raise BudgetExceeded(f"iterators or generic aliases nested more than {MAX_DEPTH} levels deep")
            hit = self.nests.get(id(y))
            if hit is not None and hit[0] is y:
                deepest = max(deepest, level + hit[1] - 1)
                if deepest > MAX_DEPTH:
                    raise BudgetExceeded(f"iterators or generic aliases nested more than {MAX_DEPTH} levels deep")
                continue
            if seen.get(id(y), 0) >= level:
                continue
            seen[id(y)] = level
            # its sources found through `__reduce__` (about 1 us with the walk) or a generator's frame locals
            # (1-2 us): at 8 units, `zip(map(abs, a), a)` in a loop measured 0.54 s at the full budget, a
            # generator of a generator 0.65 s
            self.charge(GEN_WALK_UNITS if type(y) is types.GeneratorType else NEST_WALK_UNITS)
            deepest = max(deepest, level)
            stack.extend((c, level + 1) for c in _nest_children(y) if type(c) in _NESTING)
        return deepest

    def made(self, x: Any, depth: int) -> Any:
        """`x`, a nesting object just built `depth` levels deep, remembered when it is part of a chain (depth 2
        or more: a single level walks in one step), so the next link finds it. One is kept: it holds the objects
        it pulls from alive until the next chain link, so more would change what a program's memory holds."""
        if depth > MAX_DEPTH:
            raise BudgetExceeded(f"iterators or generic aliases nested more than {MAX_DEPTH} levels deep")
        if depth > 1:
            self.nests = {id(x): (x, depth)}
        return x

    def sourced(self, x: Any) -> Any:
        """The source of a generator expression (its first iterable), its depth noted for `nested`, which runs
        as soon as the generator is made (nothing of the program runs in between: the interpreter only calls
        `iter` on the source, and a program cannot define `__iter__`)."""
        self.source = self.nest(x) if type(x) in _NESTING else 0
        return x

    def nested(self, gen: Any) -> Any:
        """A generator expression just made, one level above its source (a generator over a generator is one
        more level of C recursion when it is iterated). Its helpers' own cost, 8 units (finding the depth from
        the generator's frame instead cost 2-4 us a generator, uncharged)."""
        depth, self.source = self.source + 1, 0
        self.charge(WRAPPER_UNITS)
        return self.made(gen, depth) if depth > 1 else gen

    def int_text(self, x: Any) -> int:
        """Units of writing every integer inside `x` (nested containers included) as decimal text, quadratic in
        its limbs (CPython's int-to-decimal is): `str([7 ** 1450] * 1000)` was charged 5 units an element and
        took 270-470 x that (issue 32). The walk is C-speed per container and follows `size`, which the caller
        charged first (so it is bounded in depth and in work)."""
        t = type(x)
        if t is int:
            return _quadratic(x.bit_length())
        if t not in _WALKED:
            return 0
        total, stack = 0, [x]
        while stack:
            y = stack.pop()
            ty = type(y)
            values = (*y.keys(), *y.values()) if ty is dict else (tuple(y) if ty in _VIEWS else y)
            kinds = set(map(type, values))  # one C pass; the others only when there are ints or containers
            if int in kinds:
                bits = list(map(int.bit_length, compress(values, map(operator.is_, map(type, values), repeat(int)))))
                if max(bits) > 511:  # most are small: then nothing more to add
                    total += sum(map(_quadratic, filter(_OVER_ONE_LIMB, bits)))
            if not _WALKED.isdisjoint(kinds):
                stack.extend(compress(values, map(_WALKED.__contains__, map(type, values))))
        return total

    def charged(self, x: Any) -> Any:
        """`x`, after charging its nested size (wraps chained comparisons' operands)."""
        self.charge(self.size(x))
        return x

    def rendered(self, x: Any, width: int = 0, conversion: int = -1, spec: bool = False) -> Any:
        """`x`, after charging what rendering it as text costs (wraps f-string values; `width` is the
        largest number in a static format spec, which pads or extends the text). A value that is not a
        number, a string or None comes back already rendered (`conversion` is the f-string's `!s`/`!r`/`!a`,
        which the rewriter then drops), without the heap addresses its repr would show (`scrub`)."""
        if width > MAX_FORMAT_WIDTH:
            raise BudgetExceeded(f"format width or precision {width} over {MAX_FORMAT_WIDTH}")
        self.charge(REPR_UNITS * self.size(x) + width // CHARS_PER_UNIT)
        self.charge(self.int_text(x))
        if type(x) in _PLAIN_TEXT:
            return x if conversion == -1 else _CONVERSIONS[conversion](x)
        if spec and conversion == -1:
            return x  # object.__format__ refuses a non-empty spec, as in CPython
        return scrub(_CONVERSIONS.get(conversion, str)(x))

    def copied(self, x: Any) -> Any:
        """`x`, after charging its length (wraps slices, `*args`, `**kwargs`, unpacking and slice
        assignment: a copy of references); an unsized iterator comes back charging per item."""
        if isinstance(x, _SIZED):
            self.charge(flat(x))
            return x
        return _metered_iter(self, x)

    def unpacked(self, x: Any) -> Any:
        """`x`, after charging the elements C makes of it (`[*x]`, `f(*x)`, `a, *b = x`): an unsized iterator comes
        back charging per item, a range or non-ASCII text per element made (`made_units`)."""
        if isinstance(x, _SIZED):
            self.charge(made_units(x))
            return x
        return _metered_iter(self, x)

    def hashed(self, x: Any) -> Any:
        """`x`, after charging the hash of every element (`{*x}` in a set display: each element is a key)."""
        self.charge(flat(x) + HASH_UNITS * self.size(x) if isinstance(x, _SIZED) else 0)
        return x if isinstance(x, _SIZED) else _metered_iter(self, x, HASH_UNITS)

    def key(self, k: Any) -> Any:
        """A subscript or display key, after charging its hash (a tuple is hashed in full, every time)."""
        if type(k) is tuple or type(k) is frozenset:
            self.charge(self.size(k))
        return k
