"""Deterministic work units: what decides `budget`, so that an outcome depends on the program, not on the machine.

CPU time depends on the machine's load (a 0.65 s-CPU sort loop measured 0.92 s beside busy loops on
this 2-core machine, and crossed the 2 s limit on a busier CI machine). So every path by which a
program can do heavy work is charged in *work units* (`Limits.max_ops`), counted the same way on
every machine:

- Python-level work: each loop pass, function or lambda call and comprehension item charges the
  static size (AST nodes) of the code it runs, plus a fixed cost for the pass itself
  (`bench.sandbox.instrument` inserts the charges);
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
(modules `tables` and `maths`), one entry per reachable callable with its rule;
`tests/bench/test_charge_table.py` fails when a reachable callable (a builtin of the table, a public function
of `math`, an allowed method of a type a program can hold) has no entry, and the runtime refuses what has none
(a method is looked up by the exact type of its object; the math namespace holds only what has a rule). What
makes the bounds hold:
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

The package, by mechanism (each module imports only those above it):
- `units`: the constants (what one unit pays for, the limits) and the kinds of value the meter tells apart;
- `integers`: big integers (decimal text, limbs, the cap on bits);
- `containers`: sizes, made elements, nesting, hashing, iterator metering (`_metered_iter`), sorting, and the
  list, tuple, range, dict and set method rules;
- `text`: rendering, printf widths, substring searches, scrubbing addresses, and the str method rules;
- `counter`: `Meter` (the unit counter and its charges) and `Forbidden`;
- `operators`: the helpers instrumented code calls for its operators (binary, unary, compare, chain);
- `tables`: the builtins table (`BUILTIN_RULES`, `builtins_table`) and the method table (`METHOD_RULES`,
  `attr_helper`);
- `maths`: the math table (`MATH_RULES`, `math_functions`).
This module re-exports the names the rest of the project uses (`from bench.sandbox import meter` as before).
"""

from bench.sandbox.meter.containers import flat, index_of, made_units, sort_in_place, sort_list, sort_units
from bench.sandbox.meter.counter import Forbidden, Meter
from bench.sandbox.meter.maths import MATH_RULES, math_functions
from bench.sandbox.meter.operators import (
    BINOPS,
    CMPOPS,
    INPLACE,
    binop_helper,
    chain_helper,
    cmp_helper,
    unary_helper,
)
from bench.sandbox.meter.tables import (
    BUILTIN_RULES,
    METHOD_RULES,
    attr_helper,
    builtins_table,
    generic_helper,
    real_types,
)
from bench.sandbox.meter.text import scrub, search_units
from bench.sandbox.meter.units import (
    CHARS_PER_UNIT,
    ELEMS_PER_UNIT,
    FLOAT_CHARS_PER_UNIT,
    GEN_WALK_UNITS,
    HASH_UNITS,
    INT_BITS_PER_UNIT,
    ITEM_UNITS,
    MADE_UNITS,
    MAX_DEPTH,
    MAX_FORMAT_WIDTH,
    MAX_INT_BITS,
    MAX_RANGE_BITS,
    NEST_WALK_UNITS,
    PASS_COST,
    REPR_UNITS,
    SEARCH_PER_UNIT,
    SEARCH_WINDOW,
    STRIP_PER_UNIT,
    SUM_BITS_PER_UNIT,
    UNBOUND_UNITS,
    WALK_UNITS,
    WIDE_STRIP_PER_UNIT,
    WRAPPER_UNITS,
)

__all__ = [
    "BINOPS", "BUILTIN_RULES", "CHARS_PER_UNIT", "CMPOPS", "ELEMS_PER_UNIT", "FLOAT_CHARS_PER_UNIT",
    "Forbidden", "GEN_WALK_UNITS", "HASH_UNITS", "INPLACE", "INT_BITS_PER_UNIT", "ITEM_UNITS", "MADE_UNITS",
    "MATH_RULES", "MAX_DEPTH", "MAX_FORMAT_WIDTH", "MAX_INT_BITS", "MAX_RANGE_BITS", "METHOD_RULES", "Meter",
    "NEST_WALK_UNITS", "PASS_COST", "REPR_UNITS", "SEARCH_PER_UNIT", "SEARCH_WINDOW", "STRIP_PER_UNIT",
    "SUM_BITS_PER_UNIT", "UNBOUND_UNITS", "WALK_UNITS", "WIDE_STRIP_PER_UNIT", "WRAPPER_UNITS", "attr_helper",
    "binop_helper", "builtins_table", "chain_helper", "cmp_helper", "flat", "generic_helper", "index_of",
    "made_units", "math_functions", "real_types", "scrub", "search_units", "sort_in_place", "sort_list",
    "sort_units", "unary_helper",
]
