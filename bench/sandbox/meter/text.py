"""Text: what rendering, formatting and searching strings costs, address scrubbing, and str method rules."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable

from bench.canvas.medium import BudgetExceeded
from bench.sandbox.meter.containers import _metered_iter
from bench.sandbox.meter.units import (
    CHARS_PER_UNIT,
    MAX_FORMAT_WIDTH,
    SEARCH_PER_UNIT,
    SEARCH_WINDOW,
    STRIP_PER_UNIT,
    WIDE_STRIP_PER_UNIT,
)

if TYPE_CHECKING:
    from bench.sandbox.meter.counter import Meter


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


def search_units(n: int, m: int) -> int:
    """Units of a substring search of a needle of `m` characters in a haystack of `n` (see SEARCH_PER_UNIT)."""
    return 1 + n // CHARS_PER_UNIT + n * min(m, SEARCH_WINDOW) // SEARCH_PER_UNIT


# -- method rules (bench.sandbox.meter.tables.METHOD_RULES): str ---------------------------------------------
# A rule is called as rule(meter, obj, args, kwargs) before the method runs and returns the arguments to
# call it with (an iterable argument comes back metered).


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
