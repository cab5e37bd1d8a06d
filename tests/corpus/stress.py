"""Programs that each stress one way of doing work (Python loops, big integers, builtins, methods, operators
on containers, canvas primitives), so that the work-unit budget stops them (or they end just under it).

Used by tests/bench/test_meter.py (each must end `budget`, decided by work units, never by CPU time) and
by perf/bench_meter.py (the CPU each uses at the full budget, which must stay far under the CPU limit).
"""

from __future__ import annotations

from bench.canvas.medium import CALL_UNITS, CROSSING_UNITS, VERTEX_UNITS

STAR = "import math\npts = [(12 + 11 * math.sin(6.283 * i * 0.4999), 12 + 11 * math.cos(6.283 * i * 0.4999)) for i in range({n})]\n"
RING = "import math\npts = [(12 + 11 * math.sin(6.2832 * i / {n}), 12 + 11 * math.cos(6.2832 * i / {n})) for i in range({n})]\n"


def programs(max_ops: int) -> dict[str, str]:
    """Name -> program; those named "(ok)" end just under `max_ops`, every other one runs past it."""
    star_n = min(40, int((max_ops / 4 / CROSSING_UNITS) ** (1 / 3)))
    stars = max(1, max_ops // (CALL_UNITS + VERTEX_UNITS * star_n + CROSSING_UNITS * star_n**3) - 1)
    rects = max_ops // (CALL_UNITS + 40) - 50
    ring_n = min(4096, max_ops // (4 * VERTEX_UNITS))
    rings = max_ops // (CALL_UNITS + VERTEX_UNITS * ring_n) - 1
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
        "rect calls (ok)": f"for k in range({rects}):\n    rect(k % 20, 0, 4, 4, 'red')",
        "circle calls": "while True:\n    circle(12, 12, 3, 'red')",
        "stars (ok)": STAR.format(n=star_n) + f"for k in range({stars}):\n    poly(pts, 'red')",
        "rings (ok)": RING.format(n=ring_n) + f"for k in range({rings}):\n    poly(pts, 'red')",
    }
