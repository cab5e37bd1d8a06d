"""Issue 32's nine classes of programs whose outcome was not a function of the program, by mechanism.

Each class is a way C work escaped the meter or the stack: nesting the meter could not see (a C-stack
overflow, `crash`, at a depth set by the host's `ulimit -s`), C iteration charged per copy instead of per
object made, chained comparisons that skipped the `in` rules, unbounded intermediates, full reprs built
inside C error messages, big integers rendered inside containers or by `%`, `sum` of big integers and
`str.strip` with non-Latin-1 characters. Before issue 32 these ended `crash` or `timeout` (and some flipped
with the machine's load); now each ends the outcome in `EXPECTED`, by work units, a depth bound or the
program's own error, the same way idle and beside CPU hogs (tests/bench/test_mechanisms.py).
"""

from __future__ import annotations

#: the 200,000-deep chains of the audit (a C-stack overflow at about 100,000 on an 8 MB stack)
DEEP = 200_000
#: 100,000 references to one 4,070-bit int: cheap to build and to size, about 2 s of CPU to repr (each
#: int's decimal text is quadratic in its limbs)
BIG_LIST = "big = [7 ** 1450] * 100000\n"
#: non-Latin-1 text: every character C pulls out of it is a new string object
WIDE = "s = '\\u4e00' * 1000000\n"

CLASSES: dict[str, dict[str, str]] = {
    "nesting the meter could not see": {
        "tuple[t] hashed": f"t = int\nfor i in range({DEEP}):\n    t = tuple[t]\ns = {{t}}",
        "list[t] rendered": f"t = int\nfor i in range({DEEP}):\n    t = list[t]\ns = str(t)",
        "enumerate chain": f"it = [1]\nfor i in range({DEEP}):\n    it = enumerate(it)\nfor x in it:\n    pass",
        "map chain": f"it = [1]\nfor i in range({DEEP}):\n    it = map(abs, it)\nfor x in it:\n    pass",
        "zip chain": f"it = [1]\nfor i in range({DEEP}):\n    it = zip(it)\nfor x in it:\n    pass",
        "filter chain": f"it = [1]\nfor i in range({DEEP}):\n    it = filter(None, it)\nfor x in it:\n    pass",
        "enumerate chain dropped": f"it = [1]\nfor i in range({DEEP}):\n    it = enumerate(it)\nfill('red')",
        "generator chain": f"g = (x for x in [1])\nfor i in range({DEEP}):\n    g = (x for x in g)\nfor x in g:\n    pass",
        "list(map chain)": f"it = [1]\nfor i in range({DEEP}):\n    it = map(abs, it)\nx = list(it)",
    },
    "C iteration charged per copy": {
        "list(range)": "while True:\n    x = list(range(10 ** 6))",
        "sum(range of big)": "while True:\n    x = sum(range(2 ** 40, 2 ** 40 + 10 ** 6))",
        "list(wide str)": WIDE + "while True:\n    x = list(s)",
        "tuple(wide str)": WIDE + "while True:\n    x = tuple(s)",
        "max(wide str)": WIDE + "while True:\n    x = max(s)",
        "all(wide str)": WIDE + "while True:\n    x = all(s)",
        "extend(wide str)": WIDE + "while True:\n    a = []\n    a.extend(s)",
        "[*wide str]": WIDE + "while True:\n    a = [*s]",
        "list += wide str": WIDE + "while True:\n    a = []\n    a += s",
    },
    "chained comparisons": {
        "in map != 7": "while True:\n    t = -1 in map(abs, range(10 ** 6)) != 7",
        "0 < in list": "a = list(range(100000))\nwhile True:\n    t = 0 < -1 in a",
    },
    "unbounded intermediates": {
        "math.lcm(*range)": "import math\nx = math.lcm(*range(1, 200000))\nfill('red')",
        "math.gcd(*range) loop": "import math\nwhile True:\n    x = math.gcd(*range(1, 200000))",
    },
    "full repr in a C error message": {
        "[].index(big)": BIG_LIST + "x = [].index(big)",
        "().index(big)": BIG_LIST + "x = (1,).index(big)",
        "fill((big, 0, 0))": BIG_LIST + "fill((big, 0, 0))",
        "set_pixel(big colour)": BIG_LIST + "set_pixel(0, 0, [big])",
    },
    "big ints rendered": {
        "str([big] * 1000)": "x = [7 ** 1450] * 1000\nwhile True:\n    s = str(x)",
        "'%s' % (big,)": "x = 7 ** 1450\nwhile True:\n    s = '%s' % (x,)",
        "f'{[big] * 100}'": "x = [7 ** 1450] * 100\nwhile True:\n    s = f'{x}'",
        "'%d' % big": "x = 7 ** 1450\nwhile True:\n    s = '%d' % x",
        "'%s' % ([big] * 1000,)": "x = [7 ** 1450] * 1000\nwhile True:\n    s = '%s' % (x,)",
    },
    "sum of big ints, strip of wide chars": {
        "sum([big] * 100000)": "x = [7 ** 1450] * 100000\nwhile True:\n    s = sum(x)",
        "wide strip(chars)": "s = '\\u4e00' * 100000\nc = '\\u4e01' * 1000 + '\\u4e00'\nwhile True:\n    t = s.strip(c)",
    },
    # issue 42: types the meter cannot bound are refused (forbidden); views and case changes charged by what C does
    "generic aliases and unions of types": {
        "t = tuple[t | None] nested": "t = int\nfor i in range(100000):\n    t = tuple[t | None]\nx = {t}",
        "str(tuple['x' * 10 ** 6])": "while True:\n    s = str(tuple['x' * 10 ** 6])",
        "u = u | tuple[i]": "u = int\nfor i in range(100000):\n    u = u | tuple[i]",
        "int | None": "t = int | None\nfill('red')",
    },
    "dict views": {
        "[d.keys()] * 1000 == [e.keys()] * 1000": "d = {i: i for i in range(100000)}\ne = dict(d)\n"
                                                  "while True:\n    t = [d.keys()] * 1000 == [e.keys()] * 1000",
        "f'{d.keys()}' of big ints": "d = {7 ** 1450 + i: 0 for i in range(2000)}\nwhile True:\n    s = f'{d.keys()}'",
        "fill(d.keys())": "d = {i: i for i in range(10 ** 6)}\nwhile True:\n    try_it = 1\n    fill(d.keys())",
    },
    "case changes that lengthen text": {
        "('ß' * 10 ** 6).upper()": "s = '\u00df' * 10 ** 6\nwhile True:\n    t = s.upper()",
        "('İ' * 10 ** 6).lower()": "s = '\u0130' * 10 ** 6\nwhile True:\n    t = s.lower()",
    },
    "big-int ranges": {
        "list(range(2 ** 4000, ...))": "a = 2 ** 4000\nkeep = []\nwhile True:\n    keep.append(list(range(a, a + 10 ** 6)))",
    },
    # issue 42's outside attack on the changes above: a set-like on the right of set algebra, big ints made in C
    "set algebra with the view on the right": {
        "[deep tuple] & d.keys()": "t = ()\nfor i in range(400000):\n    t = (t,)\nx = [t] & {1: 2}.keys()",
        "list & d.keys() loop": "t = tuple(range(1000))\nL = [t] * 100000\nd = {1: 2}\nwhile True:\n    x = L & d.keys()",
        "map | d.keys() loop": "L = list(range(10 ** 6))\nd = {1: 2}\nwhile True:\n    x = map(abs, L) | d.keys()",
        "wide str | d.keys() loop": "s = '\u4e2d' * 100000\nd = {1: 2}\nwhile True:\n    x = s | d.keys()",
        "range | d.keys() loop": "d = {1: 2}\nwhile True:\n    x = range(1000000) | d.keys()",
    },
    "big ints made in C": {
        "list(map(abs, bigs)) twice": "x = -2 ** 4000\nL = [x] * 1000000\na = list(map(abs, L))\nb = list(map(abs, L))",
        "zip(range(big))": "a = list(zip(range(2 ** 4000, 2 ** 4000 + 1000000)))",
        "enumerate(start=big)": "a = list(enumerate(range(1000000), 2 ** 4000))",
        "[-big for ...] twice": "x = 2 ** 4000\na = [-x for _ in range(1000000)]\nb = [-x for _ in range(1000000)]",
    },
}

#: what each class must end (by name; anything not listed: `budget`)
EXPECTED: dict[str, str] = {
    "[].index(big)": "runtime", "().index(big)": "runtime", "fill((big, 0, 0))": "runtime",
    "set_pixel(big colour)": "runtime", "fill(d.keys())": "runtime",
    "t = tuple[t | None] nested": "forbidden", "str(tuple['x' * 10 ** 6])": "forbidden", "u = u | tuple[i]": "forbidden",
    # issue 32 bounded these chains of generic aliases by depth; issue 42 refuses the first alias
    "tuple[t] hashed": "forbidden", "list[t] rendered": "forbidden",
    "zip(range(big))": "runtime", "enumerate(start=big)": "runtime", "list(range(2 ** 4000, ...))": "runtime",
    "int | None": "forbidden",
}

PROGRAMS: dict[str, str] = {name: text for programs in CLASSES.values() for name, text in programs.items()}
