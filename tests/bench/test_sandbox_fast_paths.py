"""The sandbox's fast paths give what the slow ones gave: shapes built without clipping (a rect or disc strictly
inside the canvas) are byte for byte what clipping them returns, and instrumented trees get the positions the
standard library gives; so stored WKB, every PIoU computed from it and every outcome stay the same."""

import itertools
import math
import random

import numpy as np

import shapely

from bench.canvas import geometry as G
from bench.canvas.raster import MAX_RADIUS, clamp


def clipped_rect(r, c, h, w, grid):
    if h < 0:
        r, h = r + h, -h
    if w < 0:
        c, w = c + w, -w
    return G.clip(shapely.box(c, r, c + w, r + h), grid)


def test_inside_rects_are_what_clipping_returns():
    rng = random.Random(0)
    inside = 0
    for _ in range(20000):
        q = rng.choice([1, 0.5, 0.25, 0.1, 1 / 3])
        r, c = rng.randint(-4, 30) * q, rng.randint(-4, 30) * q
        h, w = rng.choice([1, -1]) * rng.randint(1, 30) * q, rng.choice([1, -1]) * rng.randint(1, 30) * q
        grid = rng.choice([24, 48])
        fast = G.rect_shape(r, c, h, w, grid)
        assert shapely.to_wkb(fast) == shapely.to_wkb(clipped_rect(r, c, h, w, grid)), (r, c, h, w, grid)
        inside += 0 < min(r, r + h) and max(r, r + h) < grid and 0 < min(c, c + w) and max(c, c + w) < grid
    assert inside > 5000  # the fast path was taken
    # widths and heights below float precision at the corner: no area, clipped to nothing (a review found the fast
    # path returning an invalid zero-area polygon for these)
    for r, c, h, w in ((5, 10, 3, 1e-20), (5, 10, 1e-20, 3), (5, 10, -1e-20, 3), (20.5, 3, 3, 1e-300)):
        assert shapely.to_wkb(G.rect_shape(r, c, h, w, 24)) == shapely.to_wkb(clipped_rect(r, c, h, w, 24)), (r, c, h, w)


def test_every_inside_disc_is_what_clipping_returns():
    grid, inside = 24, 0
    for rad in range(0, min(MAX_RADIUS, grid)):
        for r, c in itertools.product(range(grid), repeat=2):
            disc = shapely.Point(c + 0.5, r + 0.5).buffer(rad + 0.5, quad_segs=64)
            fast = G.disc_shape(r, c, rad, grid)
            assert shapely.to_wkb(fast) == shapely.to_wkb(G.clip(disc, grid)), (r, c, rad)
            inside += fast.bounds[0] > 0 and fast.bounds[2] < grid and fast.bounds[1] > 0 and fast.bounds[3] < grid
    assert inside > 1000
    # elsewhere: other grids, centres off the canvas, radii past it
    rng = random.Random(1)
    for _ in range(3000):
        grid = rng.choice([24, 48, 100])
        r, c, rad = rng.randint(-60, grid + 60), rng.randint(-60, grid + 60), rng.choice([rng.randint(0, grid), rng.randint(0, 600)])
        disc = shapely.Point(c + 0.5, r + 0.5).buffer(rad + 0.5, quad_segs=64)
        assert shapely.to_wkb(G.disc_shape(r, c, rad, grid)) == shapely.to_wkb(G.clip(disc, grid)), (r, c, rad, grid)


def _buffer_ring(x, y, radius):
    return shapely.get_coordinates(shapely.Point(x, y).buffer(radius, quad_segs=64))


def test_disc_rings_are_the_buffers_coordinates_bit_for_bit():
    """disc_shape builds a disc's ring as GEOS's buffer computes it, without the buffer: the same floats, in the
    same order, on 240 centres of a 48 grid for every radius up to 47, and some far ones; the check fails on a
    ring computed without GEOS's snapping of sines and cosines below 5e-16 (the points at pi and 3 pi / 2)."""
    cases = [(c + 0.5, r + 0.5, rad + 0.5) for rad in range(48) for r in range(0, 48, 5) for c in range(0, 48, 2)]
    cases += [(x + 0.5, y + 0.5, rad + 0.5) for x, y, rad in ((-1000, 5, 4095), (3000, -7, 17), (0, 0, 0), (10**6, 10**6, 2048))]
    unsnapped_differs = 0
    for x, y, radius in cases:
        ring = _buffer_ring(x, y, radius)
        mine = G._disc_offsets(radius) + (x, y)
        assert np.array_equal(ring[:-1], mine) and np.array_equal(ring[-1], mine[0]), (x, y, radius)
        inc = 2 * math.pi / G.DISC_SEGMENTS
        unsnapped = np.array([(radius * math.cos(-i * inc), radius * math.sin(-i * inc)) for i in range(G.DISC_SEGMENTS)])
        unsnapped_differs += not np.array_equal(ring[:-1], unsnapped + (x, y))
    assert unsnapped_differs > len(cases) // 2  # a broken variant fails the check


def _polygons(rng, count):
    """Random polygons of every kind the scanline meets: integer corners, fractions, collinear and retraced
    edges, flat edges, corners off the canvas and far past the coordinate limit."""
    out = []
    for _ in range(count):
        k = rng.choice([3, 3, 4, 5, 6, 8, 12, 20, 40])
        kind = rng.random()
        if kind < 0.4:
            pts = [(rng.randint(0, 23), rng.randint(0, 23)) for _ in range(k)]
        elif kind < 0.6:
            pts = [(rng.uniform(-3, 27), rng.uniform(-3, 27)) for _ in range(k)]
        elif kind < 0.7:
            pts = [(rng.choice([0.5, 1.5, 2.25, 10]) * rng.randint(0, 20), rng.randint(0, 5) / 3) for _ in range(k)]
        elif kind < 0.8:  # collinear and retraced
            a, b = (rng.randint(0, 23), rng.randint(0, 23)), (rng.randint(0, 23), rng.randint(0, 23))
            pts = [a, b, a, b][: max(3, k % 5)]
        elif kind < 0.9:
            pts = [(rng.choice([-1e300, 1e300, -5e6, 5e6, 12.5]), rng.choice([-1e300, 1e300, 0, 23.999])) for _ in range(k)]
        else:
            pts = [(rng.randint(-30, 60) + 0.5, rng.randint(-30, 60) - 1e-12) for _ in range(k)]
        out.append((pts, rng.choice([24, 24, 48, 7])))
    return out


def test_small_polygons_fill_what_the_vectorised_scanline_fills():
    """poly_mask's plain-Python path for small polygons paints the same cells as the all-rows numpy path (which
    was checked against the earlier per-row loop on 60,000 polygons); a variant that drops the zero-width span
    rule fails the check."""
    from bench.canvas import raster as R

    def vectorised(pts, n):
        m = np.zeros((n, n), dtype=bool)
        if len(pts) < 3:
            return m
        clamped = [(R.clamp(p[0]), R.clamp(p[1])) for p in pts]
        rows = [p[0] for p in clamped]
        r_lo, r_hi = R._centre_range(min(rows), max(rows), n)
        return m if r_lo >= r_hi else R._poly_mask_rows(clamped, n, r_lo, r_hi, m)

    small = painted = 0
    for pts, n in _polygons(random.Random(3), 15000):
        mine = R.poly_mask(pts, n)
        assert np.array_equal(mine, vectorised(pts, n)), (pts, n)
        small += len(pts) * n <= R.SMALL_POLYGON
        painted += bool(mine.any())
    assert small > 5000 and painted > 5000  # the small path was taken, and painted something

    # the check can fail: without the zero-width rule, a retraced edge paints the cells along it
    import __future__
    import inspect

    src = inspect.getsource(R.poly_mask).replace("if hi - lo < 1e-9:", "if hi - lo < -1.0:")
    ns = dict(vars(R))
    # compiled as its module is (lazy annotations: `Mask` is a name for type checkers only)
    exec(compile(src, "<broken>", "exec", flags=__future__.annotations.compiler_flag), ns)
    assert any(not np.array_equal(ns["poly_mask"](p, 24), vectorised(p, 24))
               for p in ([(2, 2), (10, 10), (2, 2.000000000001)], [(0, 0), (20, 20), (0, 0), (20, 20)],
                         [(1, 1), (5, 9), (1, 1.0000000001)]))


def _old_poly_shape(points, grid):
    """poly_shape as it was before the ring was remembered and the fan built at once (the reference)."""
    from shapely.geometry import Polygon

    xy = [(round(clamp(c), 9) + 0.0, round(clamp(r), 9) + 0.0) for r, c in points]
    poly = Polygon(xy)
    if poly.is_valid:
        return G.clip(poly, grid) if poly.area > 0 else G.EMPTY
    tris = [t for t in (Polygon([xy[0], xy[i], xy[i + 1]]) for i in range(1, len(xy) - 1)) if t.area > 0]
    if not tris:
        return G.EMPTY
    while len(tris) > 1:
        tris = [G._polygonal(shapely.symmetric_difference(tris[i], tris[i + 1], grid_size=G._GRID))
                for i in range(0, len(tris) - 1, 2)] + tris[len(tris) - len(tris) % 2:]
    return G._polygonal(shapely.intersection(tris[0], G.canvas_box(grid), grid_size=G._GRID))


def _old_crossings(points):
    p = np.asarray([(round(clamp(c), 9) + 0.0, round(clamp(r), 9) + 0.0) for r, c in points], dtype=np.float64)
    q = np.roll(p, -1, axis=0)

    def orient(u, v, w):
        return np.sign((v[..., 0] - u[..., 0]) * (w[..., 1] - u[..., 1]) - (v[..., 1] - u[..., 1]) * (w[..., 0] - u[..., 0]))

    a, b, c, d = p[:, None], q[:, None], p[None], q[None]
    return int(np.triu((orient(a, b, c) * orient(a, b, d) < 0) & (orient(c, d, a) * orient(c, d, b) < 0), 2).sum())


def test_polygon_shapes_and_crossings_are_what_they_were():
    """poly_shape (its ring remembered between the charge and the shape, its fan of triangles built at once) gives
    the same bytes as before, and the plain-Python crossing count of small rings the numpy count, on polygons of
    every kind; each check fails on a broken variant (a crossing test that counts touching as crossing, a fan
    that drops the first triangle)."""
    even_odd = crossing = 0
    polygons = [(p, n) for p, n in _polygons(random.Random(5), 4000) if len(p) <= 20]
    polygons += [([(1, 1), (5, 9), (1, 1.0000000001)], 24), ([(2, 2), (2, 2), (2, 2)], 24), ([(0, 0), (-0.0, 5), (5, -0.0)], 24),
                 ([(1, 1), (5, 5), (1, 5), (5, 1)], 24), ([(0, 0), (10, 10), (0, 10), (10, 0), (5, 0)], 24)]
    for pts, n in polygons:
        assert shapely.to_wkb(G.poly_shape(pts, n)) == shapely.to_wkb(_old_poly_shape(pts, n)), pts
        assert G.crossings(pts) == _old_crossings(pts), pts
        even_odd += G.needs_even_odd(pts)
        crossing += G.crossings(pts) > 0 and len(pts) <= G._SMALL_RING
    assert even_odd > 600 and crossing > 600
    # broken variants fail
    bowtie_touch = [(0, 0), (4, 4), (4, 0), (0, 4), (2, 2)]
    assert G.crossings(bowtie_touch) == _old_crossings(bowtie_touch)
    import inspect

    src = inspect.getsource(G.crossings).replace("(a < 0 < b) or (b < 0 < a)", "(a <= 0 <= b) or (b <= 0 <= a)")
    ns = dict(vars(G))
    exec(compile(src, "<broken>", "exec"), ns)
    assert any(ns["crossings"](p) != _old_crossings(p) for p, _ in polygons[:500])
    src = inspect.getsource(G.poly_shape).replace("fan[:, 0], fan[:, 1], fan[:, 2] = ring[0], ring[1:-1], ring[2:]",
                                                  "fan[:, 0], fan[:, 1], fan[:, 2] = ring[0], ring[1:-1], ring[2:]\n    fan = fan[1:]")
    exec(compile(src, "<broken>", "exec"), ns)
    assert any(shapely.to_wkb(ns["poly_shape"](p, n)) != shapely.to_wkb(_old_poly_shape(p, n)) for p, n in polygons[:500])


#: programs that make the meter build nodes at every site it has: augmented assignments to names, items, slices
#: and attributes, sets with starred items, lambdas, comprehensions of every kind, f-strings with specs, dict
#: unpacking, keyword unpacking, compare chains, nested operators, loops, branches and functions
_EVERY_SITE = """
import math
a = [1, 2, 3]; d = {'k': 1}; s = {*a, 4}; t = (1, 2)
a[0] += 1; a[0:2] += [5]; d['k'] *= 2; x = 1; x -= 1 + 2 * 3 - a[1] // 2
class_like = lambda v, w=2: v * w + (v if v > 1 else w)
e = [i * j for i in range(3) if i > 0 for j in range(i)]; f = {i: i + 1 for i in a}; g = {i % 2 for i in a}
h = list(i for i in a if i); b = {**d, 'z': 3}; print(*a, **d) if False else None
r = 1 < x < 3 and a[1:] == a[:-1] or a[::2] != t
name = f"{x:>10} {math.pi:.3f} {a!r} {x}"
for i in range(4):
    if i % 2 == 0 and i > 1 and i < 3 and i != 7 and i != 8 and i != 9:
        x += i
    else:
        x -= 1
while x > 100:
    x //= 2
def draw(p, q=3, *rest, k=1, **more):
    y = p + q
    y += k
    return [y, *rest]
rect(*draw(1)[:1], 2, 3, 4, 'red')
"""


def test_instrumented_trees_get_the_positions_the_standard_library_gives():
    """The meter places the nodes it makes as it goes; the tree it gives has the positions that
    ast.fix_missing_locations gives a tree metered without placing (on the benign and hostile corpora, typical
    programs and a program with every site the meter rewrites); a meter that does not place the Set's starred
    item, or stops at the visit's result, fails the check."""
    import ast
    import copy
    import json
    import sys
    from pathlib import Path

    from bench.sandbox import instrument, policy
    from bench.canvas.extract import extract_code, normalise

    class Unplaced(instrument._Meter):
        def _place(self, root, pos):
            return None

    corpus = Path(__file__).resolve().parents[1] / "corpus"
    texts = [json.loads(line)["text"] for name in ("benign.jsonl", "hostile.jsonl") for line in open(corpus / name)]
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "perf"))
    from typical_programs import typical_programs

    texts += typical_programs(200, seed=3) + [_EVERY_SITE]

    def trees():
        for text in texts:
            code = extract_code(text)
            if code is None:
                continue
            try:
                tree = normalise(ast.parse(code))
                policy.check(tree)
            except (SyntaxError, ValueError, RecursionError, policy.PolicyError):
                continue
            yield tree

    checked = 0
    for tree in trees():
        ours = instrument.instrument(copy.deepcopy(tree))
        theirs = ast.fix_missing_locations(Unplaced().visit(copy.deepcopy(tree)))
        assert ast.dump(ours, include_attributes=True) == ast.dump(theirs, include_attributes=True)
        compile(ours, "<program>", "exec")
        checked += 1
    assert checked >= 220

    # broken variants fail: the Set's starred item not placed (it has the Set's position, not its own), and a walk
    # that does not descend from a visit's result
    class NoStarred(instrument._Meter):
        def _place(self, root, pos):
            if isinstance(root, ast.Call) and root.func.id == policy.HASHED:
                return None
            return super()._place(root, pos)

    class RootOnly(instrument._Meter):
        def _place(self, root, pos):
            if getattr(root, "lineno", None) is None and root._attributes:
                root.lineno, root.col_offset, root.end_lineno, root.end_col_offset = pos

    site = normalise(ast.parse(_EVERY_SITE))
    reference = ast.dump(ast.fix_missing_locations(Unplaced().visit(copy.deepcopy(site))), include_attributes=True)
    assert ast.dump(instrument._Meter().visit(copy.deepcopy(site)), include_attributes=True) == reference
    for broken in (NoStarred, RootOnly):
        try:
            out = ast.dump(broken().visit(copy.deepcopy(site)), include_attributes=True)
        except (AttributeError, TypeError, ValueError):
            continue  # fails outright
        assert out != reference, broken.__name__


def test_the_policy_refuses_the_first_node_in_breadth_first_order():
    """policy.check walks the tree in ast.walk's order (breadth first), so a program with several refused nodes gets
    the reason of the shallowest, as before its walk was rewritten: on the hostile corpus and constructed cases every
    reason is the one the same checks over ast.walk give; a depth-first walk fails the check."""
    import ast
    import inspect
    import json
    from pathlib import Path

    from bench.sandbox import policy

    src = inspect.getsource(policy.check)
    walk = src[src.index("    AST, nodes = ast.AST, [tree]"):src.index("        kind = type(node)")]

    def variant(prologue):
        ns = dict(vars(policy))
        exec(compile(src.replace(walk, prologue), "<variant>", "exec"), ns)
        return ns["check"]

    reference = variant("    for node in ast.walk(tree):\n")
    depth_first = variant("    stack = [tree]\n    while stack:\n        node = stack.pop()\n"
                          "        stack.extend(reversed(list(ast.iter_child_nodes(node))))\n")

    def reason(check, tree):
        try:
            check(tree)
        except policy.PolicyError as e:
            return str(e)
        return None

    corpus = Path(__file__).resolve().parents[1] / "corpus"
    texts = [json.loads(line)["text"] for line in open(corpus / "hostile.jsonl")]
    texts += ["f(x.__class__)\nimport os", "a = [open, [[eval]]]\nb = x.__dict__", "def f(__a):\n    return g.__code__"]
    refused = 0
    for text in texts:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        got = reason(policy.check, tree)
        assert got == reason(reference, tree), text[:80]
        refused += got is not None
    assert refused >= 40
    assert reason(policy.check, ast.parse(texts[-3])) == "line 2: import os is not allowed (only math)"
    assert reason(depth_first, ast.parse(texts[-3])) != reason(reference, ast.parse(texts[-3]))


def test_small_int_operators_charge_and_give_what_the_general_path_gives():
    """The meter's fast path for two one-limb ints gives the same result, the same units and the same refusals as
    the general path it skips (compared with the helper without it on every operator, in place and not, at the
    limb boundary, with bools and negatives); a fast path that charged nothing for `*` fails the check."""
    import inspect

    from bench.canvas.medium import BudgetExceeded
    from bench.sandbox import meter as M

    src = inspect.getsource(M.binop_helper)
    fast = src[src.index("        if ta is int and tb is int and op not in _SHIFT_OR_POWER"):src.index("        if ta is bool:")]

    def helper(source):
        ns = dict(M.binop_helper.__globals__)  # the names of its own module (bench.sandbox.meter.operators)
        exec(compile(source, "<variant>", "exec"), ns)
        return ns["binop_helper"]

    general = helper(src.replace(fast, ""))
    free_products = helper(src.replace("            if op in _ONE_LIMB_PRODUCTS:", "            if False:"))

    def run(make, op, a, b, inplace):
        meter = M.Meter(10**9)
        try:
            out = ("value", make(meter, 10**6)(op, a, b, inplace))
        except (BudgetExceeded, ArithmeticError, TypeError, ValueError) as e:
            out = ("error", type(e).__name__, str(e))
        return out, meter.units

    rng = random.Random(11)
    edges = [0, 1, -1, 2, 7, 2**62, 2**63 - 1, 2**63, -2**63, 2**64, 2**64 - 1, 3**40, -(3**41), True, False, 10**30]
    values = edges + [rng.randint(-2**70, 2**70) >> rng.randint(0, 70) for _ in range(60)]
    ops = list(M.BINOPS)
    differ = 0
    for op in ops:
        for a in values:
            for b in rng.sample(values, 12) + [0, 1, True]:
                if op in ("Pow", "LShift") and isinstance(b, int) and b > 200:
                    b = b % 200
                for inplace in (False, True):
                    assert run(M.binop_helper, op, a, b, inplace) == run(general, op, a, b, inplace), (op, a, b, inplace)
                    differ += run(free_products, op, a, b, inplace) != run(general, op, a, b, inplace)
    assert differ > 100
