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

**The invariant** (issue 22: one builtin call did 12.6 s of work in C on a charge of one unit):
every callable a program can reach is either charged, *before it runs*, a bound on its C work computed
from its arguments' sizes, or refused. The table is `BUILTIN_RULES`, `MATH_RULES` and `METHOD_RULES`
below, one entry per reachable callable with its rule; `tests/bench/test_charge_table.py` fails when a
reachable callable (a builtin of the table, a public function of `math`, an allowed method of a type a
program can hold) has no entry, and the runtime refuses what has none (a method is looked up by the
exact type of its object; the math namespace holds only what has a rule). What makes the bounds hold:
- every C consumer of an iterable meters it per item pulled (`_metered_iter`), so a lazy `map`, `zip`,
  `enumerate` or `filter` costs its items wherever it is consumed (`filter` meters its own source: it may
  skip any number of items per item it yields);
- every value that reaches an operator is an int of at most `MAX_INT_BITS` bits (bools included; longer
  integer literals are refused before the program runs);
- every structure a hash walks is at most `MAX_DEPTH` deep (`Meter.size`; CPython recurses in C to hash
  a tuple, and a 400,000-deep one overflowed the worker's stack); compares and reprs stop at Python's own
  recursion limit;
- no text a program can build holds a heap address (`scrub`), so nothing it computes depends on one.

**Charges by mechanism** (issue 32: a table per callable kept missing paths; 9 classes, 35 programs ended
`crash` or `timeout`, some differently under load). Beside the table, rules that hold whichever callable runs:
- everything C recurses through without a depth check is bounded when it is made (`Meter.nest`): iterators
  over iterators (`enumerate`, `map`, `zip`, `filter`, generator expressions) and generic aliases of generic
  aliases, at `MAX_DEPTH` levels (200,000 of them overflowed the C stack: `crash`, at a depth set by the host);
- a C pass over a sized iterable pays per element it *makes* (`made_units`: a range's ints, non-ASCII text's
  characters, `dict.items()`'s pairs), not per reference copied, wherever the pass happens;
- integers are charged by their size wherever they are written as text (`Meter.int_text`: inside containers,
  by `%`, f-strings, `str`) or summed; folds that can grow (`math.lcm`) go one checked pair at a time;
- chained comparisons are single comparisons joined by `and` (bench.sandbox.policy), so they meet the same rules;
- no error message is built from an unbounded repr (`index_of`; bench.canvas.palette.brief).
"""

from __future__ import annotations

import builtins
import functools
import math
import operator
import re
import types
from itertools import compress, repeat
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
#: units per element when rendering text (str(), f-strings, %): a float's repr is about 190 ns (4 units
#: measured 0.52 s for an f-string of floats at the full budget; 5 leaves room under the bench's 0.6 s)
REPR_UNITS = 5
#: units per element hashed (set(), dict(), set algebra): a hash and an insert, about 40 ns
HASH_UNITS = 2
#: units every call of one of the sandbox's Python-level wrappers pays for its own overhead (a builtin
#: such as `map` or `filter` may call it from C, where no loop pass is charged): about 350 ns
WRAPPER_UNITS = 8
#: the same for an unbound method (`list.copy`, `str.lower` called on their type), about 1 us
UNBOUND_UNITS = 25
#: units per item a C builtin pulls from an unsized iterator (the metering generator's own cost, 150-200 ns:
#: at 3 units the rows consuming iterators measured 0.45-0.72 s at the full budget, the bench allows 0.6 s)
ITEM_UNITS = 4

class Forbidden(Exception):
    """A construct the program may not use, found as it runs (outcome `forbidden`): what a drawing program never
    needs and the meter cannot bound (issue 42: a generic alias nested through a union crashed the worker)."""


_CONTAINERS = (list, tuple, set, frozenset, dict)
#: dict views: sized, and scanned in C like the dict they show
_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
#: what `Meter.size` walks into: a view is charged by what it holds wherever it is compared, hashed or rendered
#: (issue 42: `[d.keys()] * 1000 == [e.keys()] * 1000` did 10^8 lookups for ~1,000 units)
_NESTED = frozenset({list, tuple, set, frozenset, dict, str, *_VIEWS})
_SIZED = (*_CONTAINERS, str, range, *_VIEWS)
#: units of visiting one nested container in the walk of `Meter.size` (its own cost, about 300 ns)
WALK_UNITS = 8
#: nesting a walk may meet: CPython hashes a tuple by recursing in C, without a depth check (a 400,000-deep
#: tuple overflowed the worker's stack); Python's own recursion limit stops compares and reprs at about this
MAX_DEPTH = 1_000
#: units of finding what one iterator or alias nests (`Meter.nest`): its `__reduce__`, or a generator's frame
NEST_WALK_UNITS = 40
GEN_WALK_UNITS = 64
#: CPython's default substring search (stringlib/fastsearch.h, haystacks under 30,000 characters or needles
#: under 6) may compare up to the needle's length at every position: 0.17 ns per position and character
#: measured (`'a' * 29000` searched for `'a' * 50 + 'b' + 'a' * 48`: 0.5 ms), so a unit pays for 128
SEARCH_WINDOW = 100
SEARCH_PER_UNIT = 128
#: str.strip(chars) looks every stripped character up in `chars` (a memchr: 0.01 ns a character measured)
STRIP_PER_UNIT = 1024
#: the same lookup when either string is not ASCII: a loop per character, not a memchr (issue 32: a strip of
#: 100,000 CJK characters with 1,001 of them in `chars` took about 50 x what 1 / 1024 paid for)
WIDE_STRIP_PER_UNIT = 16
#: units per element a C pass *makes*, not copies (issue 32): an int out of a range (over 256 it is allocated), a
#: 1-character string out of non-ASCII text (below 256 they are cached), a pair out of `dict.items()`; `list(range(
#: 10 ** 6))` was charged as a copy of references, 1 unit per 8, and used 19-24 x the calibration loop's CPU;
#: at 1 unit, `list(d.items())` and `tuple` of wide text measured 0.55-0.57 s at the full budget, over the bench's 0.6 s
#: once the calibration loop's 0.08 s moment is scaled to its usual 0.13 s)
MADE_UNITS = 2
#: bits of a made int per extra unit (a 4,000-bit int is 560 bytes and ~400 ns to make: 2 + 31 units)
INT_BITS_PER_UNIT = 128
#: the largest bound of a range or start of an enumerate (a drawing program counts far less)
MAX_RANGE_BITS = 64
#: bits of integers one unit of `sum` adds (an addition of two 4,096-bit integers allocates a 4,096-bit result)
SUM_BITS_PER_UNIT = 256
#: characters of a float literal `float()` parses per unit (1 ns a character measured on a 1M-digit one)
FLOAT_CHARS_PER_UNIT = 16


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


#: values whose text never holds an address (rendered by the interpreter as they are)
_PLAIN_TEXT = frozenset({int, float, bool, str, type(None)})
#: an f-string's conversion codes (ast.FormattedValue.conversion)
_CONVERSIONS: dict[int, Callable[[Any], str]] = {ord("s"): str, ord("r"): repr, ord("a"): ascii}
#: what CPython's reprs put after the object's kind: `<function f at 0x7f...>`
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def scrub(text: str) -> str:
    """`text` without heap addresses (`<function f at 0x7f3a...>` becomes `<function f>`): a program's
    drawing and its reasons must not depend on where the allocator put an object."""
    return _ADDRESS.sub(">", text) if " at 0x" in text else text


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


_NUMBERS = frozenset({int, float, bool})
#: sized iterables whose elements C makes as it pulls them (`made_units`)
_MAKES = frozenset({range, str, _VIEWS[2]})
#: what `Meter.nest` walks: C recurses through these without a depth check (iterating, hashing)
_NESTING = frozenset({enumerate, map, zip, filter, types.GeneratorType, types.GenericAlias})
_CONTAINERS_SET = frozenset(_CONTAINERS)
#: operands of set algebra (either side: a dict view's reflected operators take any iterable)
_SETLIKE = (set, frozenset, dict, *_VIEWS)
#: what `Meter.int_text` walks: the containers and the dict views (`f'{d.keys()}'` renders every key)
_WALKED = frozenset({*_CONTAINERS, *_VIEWS})
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


#: a printf-style conversion: its width and precision (digits or `*`) build that much text
_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0 +-]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?([a-zA-Z%])")


def _printf_units(fmt: str, args: Any) -> int:
    """Units of the text `fmt % args` pads to (refused past MAX_FORMAT_WIDTH, as f-string widths): the
    widths and precisions in its conversions, a `*` one read from the arguments in the order `%` reads them
    (each `*`, then the conversion's own value)."""
    values = args if type(args) is tuple else (args,)
    at, padded = 0, 0
    for m in _PRINTF.finditer(fmt):
        width, precision, conversion = m.groups()
        for field in (width, precision):
            if field == "*":
                w = values[at] if at < len(values) else 0
                at += 1
                w = abs(w) if type(w) in (int, bool) else 0
            elif field:
                w = int(field) if len(field) < 8 else MAX_FORMAT_WIDTH + 1
            else:
                continue
            if w > MAX_FORMAT_WIDTH:
                raise BudgetExceeded(f"a format width or precision over {MAX_FORMAT_WIDTH}")
            padded += w
        if conversion != "%":
            at += 1
    return padded // CHARS_PER_UNIT


def _hashed_units(meter: Meter, x: Any) -> int:
    """Units of hashing every element of `x` in C: its nested size, and for a string or a range the elements C makes
    one by one (a string's characters are hashed one at a time, not 64 to a unit)."""
    if type(x) is str:
        return HASH_UNITS * (1 + len(x)) + made_units(x)
    return HASH_UNITS * meter.size(x) + (made_units(x) if type(x) in _MAKES else 0)


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


def search_units(n: int, m: int) -> int:
    """Units of a substring search of a needle of `m` characters in a haystack of `n` (see SEARCH_PER_UNIT)."""
    return 1 + n // CHARS_PER_UNIT + n * min(m, SEARCH_WINDOW) // SEARCH_PER_UNIT


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


# -- the charge table, part 2: methods ---------------------------------------------------------------------
# A rule is called as rule(meter, obj, args, kwargs) before the method runs and returns the arguments to
# call it with (an iterable argument comes back metered). `None`: constant (the bound method itself is
# handed out, so `a.append == a.append` as in CPython).


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


_INDEX = object()  #: list.index / tuple.index: `index_of`


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


def _case(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """a new string of at most 3 characters per character (`'ß'.upper()` is 'SS'); non-ASCII text one unit a character:
    a case change that lengthens it runs ~43 ns a character in C (issue 42: charged 3/64 units, ('ß' * 10 ** 6).upper()
    ran ~900 ns a unit and ended `timeout` or `budget` with the machine's speed)"""
    meter.charge(1 + (3 * len(obj) // CHARS_PER_UNIT if obj.isascii() else len(obj)))
    return args


def _strip(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """every stripped character looked up in `chars`: length x len(chars) / STRIP_PER_UNIT"""
    chars = args[0] if args and type(args[0]) is str else ""
    per_unit = STRIP_PER_UNIT if obj.isascii() and chars.isascii() else WIDE_STRIP_PER_UNIT
    meter.charge(1 + len(obj) // CHARS_PER_UNIT + len(obj) * len(chars) // per_unit)
    return args


def _search(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """a substring search (`search_units`)"""
    m = len(args[0]) if args and type(args[0]) is str else 1
    meter.charge(search_units(len(obj), m))
    return args


def _split(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """a substring search, charged twice (split's search measured 2.3x `in`'s: 0.53-0.65 s at the full budget
    charged once), and at most length / len(sep) + 1 new strings, 1 unit each"""
    sep = args[0] if args else kwargs.get("sep")
    m = len(sep) if type(sep) is str and sep else 2  # whitespace: a piece and a separator at least
    meter.charge(2 * search_units(len(obj), m) + len(obj) // m + 1)
    return args


def _replace(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """a substring search, and the longest result it can build (every occurrence replaced), 8 characters a
    unit (a copy per occurrence)"""
    old = args[0] if args and type(args[0]) is str else ""
    new = args[1] if len(args) > 1 and type(args[1]) is str else ""
    n = len(obj)
    grown = n + (n + 1) * len(new) if not old else n + (n // len(old)) * max(0, len(new) - len(old))
    meter.charge(search_units(n, len(old) or 1) + grown // 8)
    return args


def _affix(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """startswith / endswith: the prefixes' lengths (a tuple of them: all of them)"""
    meter.charge(meter.size(args[0]) if args else 1)
    return args


def _join(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """1 unit per item (its length read, at C speed, and its copy), then the text built: their lengths and a
    separator between each; an iterator is pulled first (3 units per item), as str.join does itself"""
    if not args:
        return args
    items = args[0] if type(args[0]) in (list, tuple) else list(_metered_iter(meter, args[0]))
    try:
        total = sum(map(len, items))
    except TypeError:  # str.join says which item is not a string
        total = 0
    meter.charge(1 + len(items) + (total + len(obj) * len(items)) // CHARS_PER_UNIT)
    return (items,)


def _zfill(meter: Meter, obj: Any, args: tuple, kwargs: dict) -> tuple:
    """a new string of max(length, width) characters; a width past MAX_FORMAT_WIDTH is refused, as a format's"""
    width = args[0] if args and type(args[0]) in (int, bool) else 0
    if width > MAX_FORMAT_WIDTH:
        raise BudgetExceeded(f"zfill width {width} over {MAX_FORMAT_WIDTH}")
    meter.charge(1 + max(len(obj), width) // CHARS_PER_UNIT)
    return args


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
