"""The sandbox decides by mechanism, not by a table (issue 32): every program of the audit's nine classes ends
`budget`, `memory`, `forbidden`, `ok` (or its own `runtime` error) the same way idle and beside CPU hogs, with the
same work units and pixels; limits are on CPU clocks; every worker has the same stack; deep nesting is bounded.

Before issue 32 these programs ended `crash` (a C-stack overflow at a depth set by the host's `ulimit -s`) or
`timeout` (C work the table did not charge), and 4 of 114 programs changed outcome beside two busy loops (a
wall-clock kill at 3 x the CPU limit, re-armed only every 1,000,000 units).
"""

import resource
import subprocess
import sys
import time

import pytest

from bench.canvas.medium import Limits
from bench.sandbox.kernel import Hardening
from bench.sandbox.pool import SandboxPool
from bench.sandbox.runtime import execute
from bench.sandbox.worker import STACK_BYTES, run_raw
from bench.canvas.medium import V1
from tests.corpus.mechanisms import EXPECTED, PROGRAMS

#: near the budget and under-charged before: a loop at 95% of the budget and one just over it (31 units a pass),
#: sorts decided by their units, a drawing at the edge of the budget (its pixels compared too)
NEAR = {
    "loop at 95%": "x = 0\nfor i in range(306000):\n    x = (x * 7 + i) % 1000003\nfill('red')",
    "loop just over": "x = 0\nfor i in range(330000):\n    x = (x * 7 + i) % 1000003\nfill('red')",
    "sorts": "y = [(i * 7919) % 1000003 for i in range(300000)]\nfor k in range(50):\n    z = sorted(y)\nfill('red')",
    "rects near the budget": "for k in range(7600):\n    rect(k % 20, k % 17, 4, 4, ['red', 'blue', 'green'][k % 3])",
    "chained drawing": "for r in range(24):\n    for c in range(24):\n        if 3 <= r < 20 and 2 < c <= 21 != r:\n            set_pixel(r, c, (r * 10, c * 10, 200 if 0 < r < c else 0))",
}
GATE = {**PROGRAMS, **NEAR}


def _run(workers=2, batch_size=4):
    with SandboxPool(workers=workers, batch_size=batch_size) as pool:
        results = pool.run(list(GATE.values()))
    return {name: (r.outcome, r.reason, r.ops, None if r.pixels is None else r.pixels.tobytes())
            for name, r in zip(GATE, results)}


#: one worker runs this module (test.sh: --dist loadgroup): its module fixture `idle` (the corpus on 2 sandbox workers,
#: 8-17 s) was built again on the second worker whenever the tests were dealt to both; the hogs are unchanged
pytestmark = pytest.mark.xdist_group("sandbox-mechanisms")


@pytest.fixture(scope="module")
def idle():
    return _run()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_every_class_ends_by_its_mechanism(idle, name):
    outcome, reason, ops, _ = idle[name]
    want = EXPECTED.get(name, "budget")
    assert outcome == want, (outcome, reason, ops)
    if want == "budget":  # decided by work units or a depth bound, never by a clock
        assert "work units" in reason or "levels deep" in reason or "integer over" in reason, reason


def test_near_limit_programs_end_as_their_units_say(idle):
    assert [idle[n][0] for n in NEAR] == ["ok", "budget", "budget", "ok", "ok"], {n: idle[n][:2] for n in NEAR}


def test_outcomes_units_and_pixels_are_the_same_beside_cpu_hogs(idle):
    """The determinism gate: the corpus again, one program per batch, beside four busy loops (bounded in time, so
    they end even if this test does not; issue 42 asks for at least four on 2 cores) on a machine whose cores are
    already shared: identical outcomes, reasons, units and pixels."""
    hog = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 240:\n    pass"
    hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(4)]
    try:
        loaded = _run(workers=2, batch_size=1)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    changed = {n: (idle[n][:3], loaded[n][:3]) for n in GATE if loaded[n] != idle[n]}
    assert not changed, changed


def test_the_depth_bound_is_exact_and_ordinary_chains_run():
    # a known answer on both sides of the bound (MAX_DEPTH, 1,000 levels): 1,000 maps over a list are allowed and
    # iterate; 1,001 are refused (budget) when the last is made, whatever the host's stack
    chain = "it = [1]\nfor i in range({n}):\n    it = map(abs, it)\nx = list(it)\nfill('red')"
    assert execute(chain.format(n=1000)).outcome == "ok"
    over = execute(chain.format(n=1001))
    assert over.outcome == "budget" and "levels deep" in over.reason, over.reason
    gens = "g = (x for x in [1])\nfor i in range({n}):\n    g = (x for x in g)\nfill('red')"
    assert execute(gens.format(n=999)).outcome == "ok"  # with the first one, 1,000 generators
    assert execute(gens.format(n=1000)).outcome == "budget"
    # generic aliases are refused where they run (issue 42), so no chain of them can be built; in annotations, which
    # are not evaluated, they are written freely
    alias = "t = int\nfor i in range({n}):\n    t = tuple[t]\ns = {{t}}\nfill('red')"
    r = execute(alias.format(n=1))
    assert r.outcome == "forbidden" and "generic alias" in r.reason, (r.outcome, r.reason)
    assert execute("def f(p: tuple[int, int], q: list[tuple[int, float]] | None = None) -> dict[str, int]:\n"
                   "    return {}\nx: tuple[int, int] = (1, 2)\nf(x)\nfill('red')").outcome == "ok"
    # two chains built in turn (the remembered last link misses every time): the same bound, each chain walked
    # again at every link (40 units a level: 80 million units in all, so a budget that lets the walk finish)
    two = "a = [1]\nb = [1]\nfor i in range({n}):\n    a = zip(a)\n    b = enumerate(b)\nfill('red')"
    roomy = Limits(max_ops=10**8, cpu_seconds=60)
    assert execute(two.format(n=1000), limits=roomy).outcome == "ok"
    over = execute(two.format(n=1001), limits=roomy)
    assert over.outcome == "budget" and "levels deep" in over.reason, over.reason
    assert execute(two.format(n=1000)).outcome == "budget"  # at the default budget the walks run out first


CHAINS = """
calls = []
def f(x):
    calls.append(x)
    return x
a = f(1) < f(0) < f(5)
b = f(1) < f(2) <= f(2) != f(3)
c = [i for i in range(10) if 2 <= i < 5]
d = [j for j in (range(4) if 0 < f(7) < 9 else range(2)) if 0 < j < 3]
e = f(3) in [1, 2, 3] not in [True]
g = (0 < f(2)) < 3
h = 1 < 2 > 0 == 0 != None
k = [q for q in range(3) if (lambda: 0 < q < 2)()]
m = [u for u in [v for v in range(6) if 1 < v < 5] if 2 < u <= 4]
ok = (a, b, c, d, e, g, h, k, m, calls) == (False, True, [2, 3, 4], [1, 2], True, True, True, [1], [3, 4],
     [1, 0, 1, 2, 2, 3, 7, 3, 2])
fill('red' if ok else 'blue')
"""


def test_chained_comparisons_keep_their_meaning():
    """Each comparison of a chain goes through the single-comparison helper (`:=` temporaries, thunks inside a
    comprehension's iterable): operands evaluated once, in order, stopping at the first false one, as CPython
    does; metered and unmetered agree."""
    metered = execute(CHAINS)
    raw = run_raw(CHAINS, V1, Limits())
    assert metered.outcome == raw.outcome == "ok", (metered.reason, raw.reason)
    red = execute("fill('red')").pixels
    assert (metered.pixels == raw.pixels).all() and (metered.pixels == red).all()


def test_a_chained_in_is_charged_as_a_single_in():
    # the chain used to charge its operands' sizes only: a map object is 1 unit, its million items free
    single = execute("t = -1 in map(abs, range(100000))", limits=Limits(max_ops=10**8))
    chained = execute("t = -1 in map(abs, range(100000)) != 7", limits=Limits(max_ops=10**8))
    assert single.ops > 100_000 and chained.ops >= single.ops, (single.ops, chained.ops)


def test_c_iteration_is_charged_per_element_made():
    # known answers: 100,000 elements made cost at least 100,000 units; a copy of references costs an eighth
    big = Limits(max_ops=10**8)
    made = {
        "list(range)": "x = list(range(100000))",
        "list(wide)": "s = '\\u4e00' * 100000\nx = list(s)",
        "[*wide]": "s = '\\u4e00' * 100000\nx = [*s]",
        "items": "d = {i: i for i in range(100000)}\nx = list(d.items())",
    }
    for name, text in made.items():
        r = execute(text, limits=big)
        assert r.outcome == "ok" and r.ops >= 100_000, (name, r.outcome, r.reason, r.ops)
    copied = execute("a = [0] * 100000\nx = list(a)", limits=big)
    assert copied.ops < 30_000, copied.ops


def test_big_ints_are_charged_where_rendered_and_summed():
    big = Limits(max_ops=10**9)
    # 1,000 ints of 4,070 bits: (4070 // 64) ** 2 // 8 = 496 units each to write in decimal
    for text in ("x = [7 ** 1450] * 1000\ns = str(x)", "x = [7 ** 1450] * 1000\ns = f'{x}'",
                 "x = [7 ** 1450] * 1000\ns = '%s' % (x,)", "x = {7 ** 1450 + i: i for i in range(1000)}\ns = str(x)"):
        r = execute(text, limits=big)
        assert r.outcome == "ok" and r.ops >= 1000 * 496, (text, r.ops)
    r = execute("x = [7 ** 1450] * 100000\ns = sum(x)", limits=big)
    assert r.outcome == "ok" and r.ops >= 100000 * 4070 // 256, r.ops
    r = execute("y = 7 ** 1450\ns = sum(y for i in range(1000))", limits=big)
    assert r.outcome == "ok" and r.ops >= 1000 * (1 + 4070 // 512), r.ops


def test_errors_never_build_an_unbounded_repr():
    for text, said in (("big = [7 ** 1450] * 100000\nx = [].index(big)", "list.index(x): x not in list"),
                       ("big = [7 ** 1450] * 100000\nx = (1, 2).index(big, 1)", "tuple.index(x): x not in tuple"),
                       ("big = [7 ** 1450] * 100000\nfill((big, 0, 0))", "colour components must be numbers")):
        r = execute(text)
        assert r.outcome == "runtime" and said in r.reason and len(r.reason) < 300, (r.outcome, r.reason[:200])
        assert r.ops < 300_000, r.ops  # building `big` and the scan (2 elements x its size), nothing more
    # index keeps its meaning: start and stop, negative ones included
    r = execute("a = [5, 6, 5, 6]\nassert (a.index(6), a.index(5, 1), a.index(5, -2, -1), (1, 2).index(2), a.index(6, -10, 100)) == (1, 2, 2, 1, 1)\n"
                "fill('red')")
    assert r.outcome == "ok", r.reason


def test_unbounded_intermediates_are_checked_at_every_step():
    r = execute("import math\nx = math.lcm(*range(1, 200000))")
    assert r.outcome == "budget" and "4096 bits" in r.reason and r.ops < 1_000_000, (r.reason, r.ops)
    r = execute("import math\nassert (math.lcm(4, 6, 10), math.gcd(12, 18, 8), math.lcm(), math.gcd(-4)) == (60, 2, 1, 4)\n"
                "fill('red')")
    assert r.outcome == "ok", r.reason


def test_every_worker_has_the_same_stack_whatever_the_hosts_limit():
    """A worker's stack is STACK_BYTES whatever `ulimit -s` its host has (the pool's children inherit the host's)."""
    probe = ("import resource\nsoft = resource.getrlimit(resource.RLIMIT_STACK)[0]\n"
             f"fill('red' if soft == {STACK_BYTES} else 'blue')")
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    seen = []
    try:
        for host in (4 * 1024 * 1024, 8 * 1024 * 1024):
            if hard != resource.RLIM_INFINITY and hard < host:
                continue
            resource.setrlimit(resource.RLIMIT_STACK, (host, hard))
            with SandboxPool(workers=1, hardening=Hardening(python_layers=False)) as pool:
                r = pool.run_one(probe)
            seen.append(r.outcome == "ok" and tuple(r.pixels[0, 0]))
    finally:
        resource.setrlimit(resource.RLIMIT_STACK, (soft, hard))
    red = tuple(execute("fill('red')").pixels[0, 0])
    assert seen and all(s == red for s in seen), (seen, red)


def test_a_worker_without_cpu_progress_is_ended_by_the_backstop():
    # a worker that sleeps (plain Python, the test-only switch) uses no CPU: only the wall clock can end it
    limits = Limits(wall_seconds=1.0)
    with SandboxPool(workers=1, limits=limits, hardening=Hardening(python_layers=False)) as p:
        results = p.run(["import time\ntime.sleep(60)", "fill('red')"])
        assert results[0].outcome == "backstop" and "no CPU progress" in results[0].reason, results[0].reason
        assert results[1].valid and p.restarts == 1


def test_a_working_worker_is_never_ended_by_the_wall_clock():
    # about a second of CPU, its wall-clock allowance a tenth of that: a worker that computes is left to its CPU
    # clocks (before: `backstop` after 0.1 s of wall clock, and 3 x the CPU limit killed slow workers on a busy machine)
    limits = Limits(wall_seconds=0.1, cpu_seconds=30, max_ops=10**9)
    text = "y = [(i * 7919) % 1000003 for i in range(100000)]\nfor k in range(40):\n    z = sorted(y)\nfill('red')"
    with SandboxPool(workers=1, limits=limits) as p:
        r = p.run_one(text)
    assert r.outcome == "ok", (r.outcome, r.reason)


def test_a_job_imports_nothing_after_the_warm_up():
    """Every module a job can make the interpreter import is loaded before the kernel layer and the first job: CPython's
    parser imports `unicodedata` for the first non-ASCII identifier it reads (to normalise it), which a worker used to
    do inside whichever job had one, charging that job the import (found attacking issue 43's worker start)."""
    probe = ("import sys\nbefore = set(sys.modules)\ncompile('caf\\u00e9 = 1', '<job>', 'exec')\n"
             "new = sorted(set(sys.modules) - before)\nassert not new, 'imported during the job: ' + ', '.join(new)\n"
             "fill('red')")
    with SandboxPool(workers=1, hardening=Hardening(python_layers=False)) as pool:
        r = pool.run_one(probe)
    assert r.outcome == "ok", r.reason
    # the real path: a program whose identifier is not ASCII runs like any other
    assert execute("caf\u00e9 = 2\nfill('red')").outcome == "ok"
