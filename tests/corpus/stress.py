"""Programs that each stress one way of doing work (Python loops, big integers, builtins, methods, operators
on containers, canvas primitives), so that the work-unit budget stops them (or they end just under it).

Used by tests/bench/test_meter.py (each must end `budget`, decided by work units, never by CPU time) and
by perf/bench_meter.py (the CPU each uses at the full budget, which must stay far under the CPU limit).
"""

from __future__ import annotations

from bench.canvas.medium import CALL_UNITS, PRIMITIVE_UNITS, V1, call_units
from tests.corpus.mechanisms import CLASSES, EXPECTED


def poly_units(pts: list[tuple[float, float]]) -> int:
    """Work units of one `poly` of these points."""
    return call_units(V1.vocabulary["poly"], tuple(v for p in pts for v in p))


def template_units(template: str, n: int) -> int:
    """Work units of one `poly(pts)` after a STAR / RING / ZIGZAG line: the points computed by running that
    same line in plain Python (the same floats the program computes)."""
    ns: dict = {}
    exec(template.format(n=n), ns)  # noqa: S102 - our own template
    return poly_units(ns["pts"])


TRIANGLE = [(0, 0), (24, 12), (0, 24)]
BOWTIE = [(0, 0), (24, 24), (0, 24), (24, 0)]
#: a tuple of a million elements reached through one (hashing or comparing it touches every one)
BIG = "inner = tuple(range(1000))\nt = (inner,) * 1000\n"

STAR = "import math\npts = [(12 + 11 * math.sin(6.283 * i * 0.4999), 12 + 11 * math.cos(6.283 * i * 0.4999)) for i in range({n})]\n"
ZIGZAG = "pts = [((i % 2) * 23.5, i * 24 / {n}) for i in range({n})]\n"
#: a needle whose last character matches everywhere and whose middle does not: CPython's default substring
#: search compares about half of it at every position of a haystack under 30,000 characters (O(n*m))
NEEDLE = "'a' * 50 + 'b' + 'a' * 48"
RING = "import math\npts = [(12 + 11 * math.sin(6.2832 * i / {n}), 12 + 11 * math.cos(6.2832 * i / {n})) for i in range({n})]\n"


def programs(max_ops: int) -> dict[str, str]:
    """Name -> program; those named "(ok)" end just under `max_ops`, those named "(deep)" meet the depth bound
    (bench.sandbox.meter.MAX_DEPTH: a list holding itself is as deep as a walk goes), every other one runs
    past `max_ops`."""
    star_n = max(n for n in range(5, 41) if template_units(STAR, n) <= max_ops // 4)
    stars = max(1, max_ops // template_units(STAR, star_n) - 1)
    zig_n = max(n for n in range(8, 257, 8) if template_units(ZIGZAG, n) <= max_ops // 2)
    zigs = max(1, (max_ops - 5000) // template_units(ZIGZAG, zig_n))
    rects = max_ops // (CALL_UNITS + 40) - 50
    ring_n = max(n for n in (16, 64, 256, 1024, 4096) if template_units(RING, n) <= max_ops // 4)
    rings = max(1, (max_ops - 200_000) // template_units(RING, ring_n))
    return {
        "empty loop": "while True:\n    pass",
        "int arithmetic": "i = 0\nwhile True:\n    i = (i * 7 + 3) % 1000003",
        "big ints // % *": "x = 3 ** 2500\ny = 7 ** 700\nwhile True:\n    z = x // y\n    w = x % y\n    v = y * y",
        "pow mod": "while True:\n    y = pow(7, 10 ** 1000, 2 ** 4000)",
        "str(big int)": "x = 7 ** 1400\nwhile True:\n    s = str(x)",
        "math.factorial": "import math\nwhile True:\n    y = math.factorial(500)",
        "function calls": "def f(x):\n    return x\nwhile True:\n    f(1)",
        "lambda calls": "f = lambda x: x\nwhile True:\n    f(1)",
        "comprehension": "while True:\n    a = [i for i in range(1000)]",
        "generator sum": "while True:\n    s = sum(i for i in range(1000))",
        "sum(map(abs))": "a = list(range(100000))\nwhile True:\n    s = sum(map(abs, a))",
        "list + list": "a = list(range(100000))\nwhile True:\n    b = a + a",
        "list += ": "a = list(range(1000))\nb = []\nwhile True:\n    b += a",
        "list * k": "while True:\n    b = [0] * 999999",
        "slice": "a = list(range(1000000))\nwhile True:\n    b = a[1:]",
        "x in list": "a = list(range(100000))\nwhile True:\n    t = -1 in a",
        "list == list": "a = list(range(100000))\nb = list(a)\nwhile True:\n    t = a == b",
        "sorted": "a = [(i * 7919) % 1000003 for i in range(100000)]\nwhile True:\n    b = sorted(a)",
        ".sort()": "a = [(i * 7919) % 1000003 for i in range(100000)]\nwhile True:\n    b = list(a)\n    b.sort()",
        "sum max min": "a = list(range(100000))\nwhile True:\n    s = sum(a) + max(a) + min(a)",
        "set(list)": "a = list(range(100000))\nwhile True:\n    s = set(a)",
        "str(list)": "a = list(range(10000))\nwhile True:\n    s = str(a)",
        "f-string floats": "a = [i * 0.5 for i in range(10000)]\nwhile True:\n    s = f'{a}'",
        "str(nested)": "a = [[0] * 100] * 100\nwhile True:\n    s = str(a)",
        ".split": "s = 'ab,' * 300000\nwhile True:\n    p = s.split(',')",
        ".replace": "s = 'ab,' * 300000\nwhile True:\n    p = s.replace('a', 'bb')",
        ".join": "p = ['abc'] * 100000\nwhile True:\n    s = ','.join(p)",
        ".upper": "s = 'a' * 1000000\nwhile True:\n    t = s.upper()",
        "x in str": "s = 'ab' * 500000\nwhile True:\n    t = 'zz' in s",
        ".count": "a = list(range(100000))\nwhile True:\n    c = a.count(-1)",
        "tuple in dict": "d = {(i, i): i for i in range(1000)}\nwhile True:\n    t = (5, 5) in d",
        "f-string width": "while True:\n    s = f'{0:>90000}'",
        "% width": "while True:\n    s = '%*d' % (90000, 0)",
        "tuple key hash": "t = tuple(range(100000))\nd = {}\nwhile True:\n    d[t] = 1",
        "tuple in set display": "t = tuple(range(100000))\nwhile True:\n    s = {t}",
        "[*iterator]": "a = list(range(100000))\nwhile True:\n    b = [*map(abs, a)]",
        "list += iterator": "a = list(range(10000))\nwhile True:\n    b = []\n    b += map(abs, a)",
        "x in iterator": "a = list(range(100000))\nwhile True:\n    t = -1 in map(abs, a)",
        "dict view algebra": "d = {i: i for i in range(100000)}\nwhile True:\n    x = d.keys() ^ d.keys()",
        "slice assignment": "L = list(range(1000000))\nwhile True:\n    L[:0] = [1]\n    L[:1] = []",
        "slice +=": "L = list(range(1000000))\nwhile True:\n    L[:] += []",
        "sort long strings": "a = ['x' * 100000 + str(i) for i in range(200)]\nwhile True:\n    b = sorted(a)",
        "max of 2 long strings": "a = 'x' * 1000000\nb = 'x' * 1000000\nwhile True:\n    m = max(a, b)",
        "list in list of lists": "pts = [[i] for i in range(100000)]\nwhile True:\n    t = [-1] in pts",
        "self-referencing walk (deep)": "L = [0]\nL.append(L)\nwhile True:\n    x = L == L",
        "set(iterator of big)": BIG + "while True:\n    s = set(reversed([t]))",
        "{x for big x}": BIG + "while True:\n    s = {x for x in [t]}",
        "dict.pop(big key)": BIG + "d = {0: 1}\nwhile True:\n    d.pop(t, None)",
        "sorted by big keys": BIG + "while True:\n    b = sorted(range(50), key=lambda i: t)",
        "list.sort(M) unbound": "M = list(range(200000))\nwhile True:\n    list.sort(M)",
        "dict.update unbound": BIG + "d = {}\nwhile True:\n    dict.update(d, zip([t], [0]))",
        "full triangles (ok)": f"for k in range({int(max_ops * 0.97) // poly_units(TRIANGLE)}):\n    poly({TRIANGLE}, 'red')",
        "bow ties (ok)": f"for k in range({int(max_ops * 0.97) // poly_units(BOWTIE)}):\n    poly({BOWTIE}, 'red')",
        "circles (ok)": f"for k in range(min(380, {max_ops // (PRIMITIVE_UNITS['circle'] + 100)})):\n    circle(12, 12, 11, 'red')",
        "filter(list.copy)": "e = [[]] * 1000000\nwhile True:\n    x = list(filter(list.copy, e))",
        "map(str.lower)": "w = ['AbC'] * 1000000\nwhile True:\n    x = list(map(str.lower, w))",
        "filter(d.get)": "d = {i: i for i in range(1000)}\nk = list(range(1000)) * 1000\nwhile True:\n    x = list(filter(d.get, k))",
        "map(isinstance)": "xs = list(range(100000))\nts = [(int, float)] * 100000\nwhile True:\n    x = list(map(isinstance, xs, ts))",
        "sort by key, 2 items": "p = [3, -1]\nwhile True:\n    p.sort(key=abs, reverse=True)",
        "rect calls (ok)": f"for k in range({rects}):\n    rect(k % 20, 0, 4, 4, 'red')",
        "circle calls": "while True:\n    circle(12, 12, 3, 'red')",
        "stars (ok)": STAR.format(n=star_n) + f"for k in range({stars}):\n    poly(pts, 'red')",
        "zigzags (ok)": ZIGZAG.format(n=zig_n) + f"for k in range({zigs}):\n    poly(pts, 'red')",
        "rings (ok)": RING.format(n=ring_n) + f"for k in range({rings}):\n    poly(pts, 'red')",
        # issue 22's found classes: C work pulled through an argument charged as one unit, size-blind
        # builtins, the integer cap bypassed, isinstance's walk, and the filters and displays like them
        "dict view ^ map": "a = list(range(1000000))\nd = {0: 0}\nwhile True:\n    x = d.keys() ^ map(abs, a)",
        "dict |= zip": "a = list(range(1000000))\nwhile True:\n    d = {}\n    d |= zip(a, a)",
        "float(long str)": "s = '1' * 1000000\nwhile True:\n    x = float(s)",
        "math.dist long": "import math\np = [0.5] * 1000000\nwhile True:\n    x = math.dist(p, p)",
        "str.count n*m": f"s = 'a' * 29000\nn = {NEEDLE}\nwhile True:\n    c = s.count(n)",
        "x in str n*m": f"s = 'a' * 29000\nn = {NEEDLE}\nwhile True:\n    c = n in s",
        ".split n*m": f"s = 'a' * 29000\nn = {NEEDLE}\nwhile True:\n    c = s.split(n)",
        ".strip(chars) n*m": "s = 'a' * 100000\nc = 'b' * 100000 + 'a'\nwhile True:\n    t = s.strip(c)",
        "% float width": "while True:\n    s = '%90000f' % 1.0",
        "isinstance nested": "ts = (int,) * 1000\nts2 = (ts,) * 1000\nwhile True:\n    x = isinstance(1.5, ts2)",
        "filter(None)": "z = [0] * 1000000\nwhile True:\n    x = list(filter(None, z))",
        "{*[big] * k}": BIG + "while True:\n    s = {*[t] * 10}",
        # found in review: zip and map pull from every iterable per item (19.5 s of CPU at the full budget)
        "zip(*[a] * 100000)": "a = [1] * 10\nwhile True:\n    x = list(zip(*[a] * 100000))",
        "map(max, *[a] * 100000)": "a = [1] * 10\nwhile True:\n    x = list(map(max, *[a] * 100000))",
        # found after issue 22's table: dict items are pairs C makes, one per element
        "list(d.items())": "d = {i: i for i in range(100000)}\nwhile True:\n    x = list(d.items())",
        # the wrappers and helpers issue 32 added to ordinary code: their own cost is charged
        "enumerate calls": "a = [1, 2, 3]\nwhile True:\n    e = enumerate(a)",
        "zip calls": "a = [1, 2, 3]\nwhile True:\n    z = zip(a, a)",
        "generator expressions": "a = [1, 2, 3]\nwhile True:\n    g = (x for x in a)",
        "sum of 3": "a = [1, 2, 3]\nwhile True:\n    s = sum(a)",
        "chained comparisons": "x = 5\nwhile True:\n    t = 0 <= x < 24 != x",
        "filter of filter": "a = [1, 2, 3]\nwhile True:\n    f = filter(None, filter(None, a))",
        "zip of map": "a = [1, 2, 3]\nwhile True:\n    z = zip(map(abs, a), a)",
        "generator of generator": "a = [1, 2, 3]\nwhile True:\n    g = (y for y in (x for x in a))",
        **issue_32_rows(),
    }


def issue_32_rows() -> dict[str, str]:
    """Issue 32's classes (tests/corpus/mechanisms.py) as rows: each loop runs into the budget; each chain meets the
    depth bound ("(deep)")."""
    rows = {}
    for kind, members in CLASSES.items():
        for name, text in members.items():
            if EXPECTED.get(name, "budget") != "budget":  # refused or its own error: tests/bench/test_mechanisms.py
                continue
            if kind.startswith("nesting"):
                rows[f"{name} (deep)"] = text
            elif "while True" in text:
                rows[name] = text
    return rows


#: the rows of `programs` that are issue 22's found classes
FOUND_CLASSES = ("dict view ^ map", "dict |= zip", "float(long str)", "math.dist long", "str.count n*m", "x in str n*m",
                 ".split n*m", ".strip(chars) n*m", "% float width", "isinstance nested", "filter(None)", "{*[big] * k}",
                 "zip(*[a] * 100000)", "map(max, *[a] * 100000)")

#: refused before they run, whatever the budget: each must end `budget` with a reason of its own
REFUSED = {
    "% width over the cap": "s = '%100000000f' % 1.0",
    "True << 5000000": "x = True << 5000000",
    "bool operands": "x = (True + True) ** 5000",
    "90,000-digit hex literal": "x = 0x" + "f" * 90000 + "\ny = x % 7",
    "400,000-deep tuple hashed": "t = ()\nfor i in range(400000):\n    t = (t,)\nd = {t: 1}",
    "zfill far": "s = '1'.zfill(100000000)",
    "% * width after a value": "s = '%s%*d' % ('a', 100000000, 1)",
}
