"""What one work unit pays for, the limits on a program's values, and the kinds of value the meter knows."""

from __future__ import annotations

import types


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
