"""Writes hostile.jsonl (the 20 MB literal bomb is built in tests, not stored) and benign.jsonl (run once; the JSONL files are the committed corpus).

Hostile entries follow the history of Python sandbox escapes (RestrictedPython CVEs and the
'pyjail' literature): object-graph walks, frames, format strings, metaclasses, unicode look-alikes,
resource bombs and exception swallowing. Each has the outcome kind it must get.
"""
import json
from pathlib import Path

HERE = Path(__file__).parent

#: two combs whose teeth cross (a vertical and a horizontal one): each a valid 4,002-vertex polygon that
#: the sandbox runs in milliseconds, but their overlay has n^2 pieces, so PIoU scoring in the host
#: never finished for n = 1000 (issue 12); {n} teeth
COMB = """fill('white')
n = {n}
w = 24 / n
a = [(0, 0), (0, 24)]
b = [(0, 0), (24, 0)]
for i in range(n - 1, -1, -1):
    x = i * w
    a += [(1, x + w), (1, x + w / 2), (24, x + w / 2), (24, x)]
    b += [(x + w, 1), (x + w / 2, 1), (x + w / 2, 24), (x, 24)]
poly(a, 'red')
poly(b, 'blue')
"""

hostile = [
    # object graph walks
    ("subclasses", "().__class__.__bases__[0].__subclasses__()", "forbidden"),
    ("mro", "x = [].__class__.__mro__[-1]", "forbidden"),
    ("func_globals", "def f():\n    pass\ng = f.__globals__", "forbidden"),
    ("builtins_name", "b = __builtins__\nb['open']('/etc/passwd')", "forbidden"),
    ("import_dunder", "__import__('os').system('id')", "forbidden"),
    ("import_os", "import os\nos.system('id')", "forbidden"),
    ("import_sys_alias", "import math, sys", "forbidden"),
    ("from_os", "from os import system", "forbidden"),
    ("import_math_private", "from math import __loader__", "forbidden"),
    ("getattr_builtin", "getattr((), '__cla' + 'ss__')", "forbidden"),
    ("vars_builtin", "v = vars()", "forbidden"),
    ("globals_builtin", "g = globals()['__builtins__']", "forbidden"),
    ("eval", "eval('1+1')", "forbidden"),
    ("exec", "exec('import os')", "forbidden"),
    ("compile", "c = compile('1', 'x', 'eval')", "forbidden"),
    ("open_file", "open('/etc/passwd').read()", "forbidden"),
    ("type_metaclass", "T = type('T', (), {})", "forbidden"),
    ("class_metaclass", "class M(type):\n    pass\nclass A(metaclass=M):\n    pass", "forbidden"),
    ("class_plain", "class A:\n    x = 1", "forbidden"),
    ("object_builtin", "o = object()", "forbidden"),
    ("private_name", "__secret = 1", "forbidden"),
    ("reserved_name", "_ambench_tick = lambda: True\nwhile True:\n    pass", "forbidden"),
    ("private_attr", "x = [1]\nx._y", "forbidden"),
    # frames and generators
    ("gen_frame", "g = (i for i in [1])\nf = g.gi_frame.f_back", "forbidden"),
    ("gen_code", "g = (i for i in [1])\nc = g.gi_code", "forbidden"),
    ("yield", "def g():\n    yield 1", "forbidden"),
    ("lambda_code", "f = lambda: 0\nf.__code__", "forbidden"),
    ("func_closure", "def f():\n    pass\nf.func_globals", "forbidden"),
    ("async", "async def f():\n    pass", "forbidden"),
    # format strings
    ("str_format", "'{0.__class__}'.format(1)", "forbidden"),
    ("str_format_plain", "'{0}'.format(1)", "forbidden"),
    ("format_map", "'{a.__class__}'.format_map({'a': 1})", "forbidden"),
    ("fstring_dunder", "x = f'{().__class__}'", "forbidden"),
    ("fstring_computed_spec", "s = '>10'\nx = f'{1:{s}}'", "forbidden"),
    ("format_builtin", "format(1, 'x')", "forbidden"),
    # unicode look-alikes (identifiers are NFKC-normalised by the parser)
    ("fullwidth_dunder", "x = ().__\uff43\uff4c\uff41\uff53\uff53__", "forbidden"),
    ("fullwidth_underscore", "x = ().\uff3f\uff3fclass\uff3f\uff3f", "syntax"),
    ("fullwidth_getattr", "\uff47etattr((), 'x')", "forbidden"),
    ("mathbold_eval", "\U0001d41eval('1')", "forbidden"),
    # exceptions and control flow that could swallow the sandbox's own signals
    ("try_except", "try:\n    while True:\n        pass\nexcept BaseException:\n    pass", "forbidden"),
    ("try_finally", "try:\n    x = 1\nfinally:\n    x = 2", "forbidden"),
    ("with_stmt", "with open('x') as f:\n    pass", "forbidden"),
    ("raise", "raise SystemExit", "forbidden"),
    ("global_stmt", "def f():\n    global x\n    x = 1", "forbidden"),
    ("delete", "x = 1\ndel x", "forbidden"),
    ("decorator", "def d(f):\n    return f\n@d\ndef g():\n    pass", "forbidden"),
    ("bytes_literal", "b = b'\\x00'", "forbidden"),
    ("match", "match 1:\n    case 1:\n        pass", "forbidden"),
    # resource bombs
    ("infinite_loop", "while True:\n    pass", "budget"),
    ("infinite_drawing", "while True:\n    set_pixel(1, 1, 'red')", "budget"),
    ("fill_bomb", "for i in range(100000):\n    fill('red')", "budget"),
    ("recursion", "def f(n):\n    return f(n + 1)\nf(0)", "budget"),
    ("mutual_recursion", "def a():\n    b()\ndef b():\n    a()\na()", "budget"),
    ("lambda_recursion", "f = lambda g: g(g)\nf(f)", "budget"),
    ("big_power", "x = 10 ** 10 ** 10", "budget"),
    ("big_power_builtin", "x = pow(9, 9 ** 9)", "budget"),
    ("big_shift", "x = 1 << 10 ** 9", "budget"),
    ("big_repeat", "x = 'a' * 10 ** 9", "budget"),
    ("big_list_repeat", "x = [0] * 10 ** 9", "budget"),
    ("aug_repeat", "x = 'ab'\nfor i in range(60):\n    x *= 2", "budget"),
    ("big_range", "for i in range(10 ** 12):\n    pass", "budget"),
    ("nested_comprehension", "x = [a * b for a in range(5000) for b in range(5000)]", "budget"),
    ("memory_bomb", "x = [[0] * 999999 for i in range(5000)]", "memory"),
    ("huge_poly", "poly([(i % 24, i // 24) for i in range(10000)], 'red')", "budget"),
    ("huge_circle", "circle(0, 0, 10 ** 9, 'red')", "budget"),
    ("c_level_hang", "x = sum(map(abs, map(float, list(range(999999)) * 1)))\nfor i in range(400):\n    y = sorted(list(range(999999)), reverse=True)", "budget"),
    ("deep_nesting", "x = " + "(" * 5000 + "1" + ")" * 5000, "syntax"),
    ("null_bytes", "rect(1, 2, 3, 4, 'red')\x00", "syntax"),
    # what the host does with a result (issue 12, part 2): poison pills, geometry and size bombs
    ("poison_surrogate", "fill('navy')\nassert False, 'done \\ud800'", "runtime"),
    ("poison_nul", "fill('navy')\nx = 'a\\x00b'\nassert False, x", "runtime"),
    ("poison_surrogate_pair", "fill('navy')\nassert False, '\\udfff\\ud800' * 50", "runtime"),
    ("comb_1000_interleaved", COMB.format(n=1000), "ok"),
    ("amplification_120x4096", "fill('white')\nfor k in range(120):\n    poly([(k % 24 + (i % 2) * 0.5, i * 24 / 4096) for i in range(4096)], 'red')", "budget"),
    # ordinary failures
    ("syntax_error", "rect(1, 2, 3, 4, 'red'\nfill('blue')", "syntax"),
    ("name_error", "rectangle(1, 2, 3, 4, 'red')", "runtime"),
    ("bad_color", "fill('not-a-colour')", "runtime"),
    ("bad_arity", "rect(1, 2, 'red')", "runtime"),
    ("nan_coordinate", "rect(float('nan'), 2, 3, 4, 'red')", "runtime"),
    ("zero_division", "rect(1 / 0, 2, 3, 4, 'red')", "runtime"),
    ("pygame", "import pygame\npygame.init()\nscreen = pygame.display.set_mode((24, 24))", "forbidden"),
    ("prose_only", "I am sorry, I cannot draw pictures.", "no_code"),
    ("empty", "", "no_code"),
]

benign = [
    ("underscore_names", "fill('white')\n_dot = lambda r, c: set_pixel(r, c, 'red')\nfor _ in range(3):\n    r, _ = 2 * _, 0\n    _dot(r, 5)"),
    ("plain", "fill('white')\nrect(2, 3, 4, 5, 'red')"),
    ("fenced", "Here is the program:\n```python\nfill('black')\ncircle(12, 12, 6, 'yellow')\n```\nIt draws a sun."),
    ("fenced_py", "```py\nfill('sky_blue')\nrect(18, 0, 6, 24, 'green')\n```"),
    ("prose_around", "Sure! Below is the code.\nfill('white')\nline(0, 0, 23, 23, 'blue')\nNote: the line is diagonal.\nEnjoy!"),
    ("def_never_called", "```python\ndef draw():\n    fill('white')\n    poly([(2, 2), (2, 20), (20, 11)], 'orange')\n```"),
    ("def_with_canvas_arg", "def draw(canvas):\n    fill('white')\n    set_pixel(5, 5, 'black')"),
    ("main_guard", "def main():\n    fill('navy')\n    circle(5, 18, 3, 'white')\n\nif __name__ == '__main__':\n    main()"),
    ("trailing_junk", "```python\nfill('white')\nrect(0, 0, 12, 24, 'blue')\n\nThis creates a blue sky.\n```"),
    ("unterminated_fence", "```python\nfill('white')\nrect(5, 5, 10, 10, 'purple')"),
    ("loops", "fill('white')\nfor r in range(0, 24, 4):\n    for c in range(0, 24, 4):\n        if (r + c) // 4 % 2 == 0:\n            rect(r, c, 4, 4, 'black')"),
    ("while_loop", "fill('white')\ni = 0\nwhile i < 24:\n    line(i, 0, i, 23, 'red')\n    i += 3"),
    ("helpers", "import math\ndef star(r, c, rad, color):\n    pts = []\n    for k in range(10):\n        a = math.pi * k / 5\n        d = rad if k % 2 == 0 else rad / 2\n        pts.append((r + d * math.sin(a), c + d * math.cos(a)))\n    poly(pts, color)\nfill('navy')\nstar(12, 12, 9, 'gold')"),
    ("comprehension", "fill('white')\ncells = [(r, c) for r in range(24) for c in range(24) if (r - 12) ** 2 + (c - 12) ** 2 < 30]\nfor r, c in cells:\n    set_pixel(r, c, 'red')"),
    ("from_math", "from math import sin, cos, pi\nfill('black')\nfor k in range(12):\n    a = 2 * pi * k / 12\n    set_pixel(12 + 9 * sin(a), 12 + 9 * cos(a), 'white')"),
    ("hex_and_rgb", "fill('#102030')\nrect(1, 1, 5, 5, (255, 0, 0))\ncircle(15, 15, 4, [0, 255, 0])\nset_pixel(0, 0, '#fff')"),
    ("css_name", "fill('white')\nrect(2, 2, 4, 4, 'DarkOrange')\nrect(8, 8, 4, 4, 'Light Grey')"),
    ("keywords", "fill(color='white')\nrect(r=2, c=3, h=4, w=5, color='red')\ncircle(12, 12, radius=3, colour='blue')\npoly(points=[(0, 0), (0, 5), (5, 0)], color='green')"),
    ("floats_and_clipping", "fill('white')\nrect(-5.5, -5.5, 10.25, 10.75, 'red')\ncircle(30, 30, 12.4, 'blue')\nline(-100, 12, 100, 12, 'black')\npoly([(-10, -10), (40, 12), (-10, 40)], 'gold')"),
    ("outline_style", "fill('white')\nfor k in range(24):\n    set_pixel(0, k, 'black')\n    set_pixel(23, k, 'black')\n    set_pixel(k, 0, 'black')\n    set_pixel(k, 23, 'black')"),
    ("print_is_noop", "fill('white')\nprint('drawing')\nrect(1, 1, 2, 2, 'red')"),
    ("lambda_and_map", "fill('white')\nsq = lambda x: x * x\nfor r in map(sq, [1, 2, 3, 4]):\n    set_pixel(r, r, 'red')"),
    ("dict_palette", "colors = {'sky': 'sky_blue', 'ground': 'brown'}\nfill(colors['sky'])\nrect(16, 0, 8, 24, colors.get('ground'))"),
    ("fstring_plain", "name = f'{3 + 4:d}'\nfill('white')\nrect(int(name), 0, 2, 2, 'red')"),
    ("walrus_and_assert", "fill('white')\nassert (n := 5) == 5\nrect(n, n, n, n, 'green')"),
    ("no_background_call", "rect(4, 4, 16, 16, 'teal')"),
    ("crlf", "fill('white')\r\nrect(1, 1, 3, 3, 'red')\r\n"),
]

if __name__ == "__main__":
    with open(HERE / "hostile.jsonl", "w") as f:
        for name, text, expect in hostile:
            f.write(json.dumps({"id": name, "text": text, "expect": expect}) + "\n")
    with open(HERE / "benign.jsonl", "w") as f:
        for name, text in benign:
            f.write(json.dumps({"id": name, "text": text}) + "\n")
    print(len(hostile), "hostile,", len(benign), "benign")
