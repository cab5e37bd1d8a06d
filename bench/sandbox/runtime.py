"""Layer two of the sandbox: run one checked program against a canvas with a tiny builtins table and budgets.

This module runs *inside* a worker process (bench.sandbox.pool), which adds layer three: CPU-time,
stack and memory limits of the operating system. Calling `execute` in your own process is only
for trusted text (tests, debugging); everything that runs model output goes through the pool.
"""

from __future__ import annotations

import ast
import functools
import gc
import math
import signal
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import shapely

from bench.canvas.extract import extract_program, normalise
from bench.canvas.medium import V1, BudgetExceeded, Call, Limits, Medium, shape_of
from bench.canvas.palette import RGB
from bench.sandbox import meter as meters
from bench.sandbox import policy
from bench.sandbox.instrument import instrument

#: every outcome an attempt can get. `svg`: an SVG answer refused by the sanitiser or the renderer;
#: `crash`: the worker died of a signal or sent a malformed result; `backstop`: the far wall-clock
#: backstop fired (a machine problem, not the program's: CPU time decides `timeout`).
OUTCOMES = ("ok", "syntax", "forbidden", "runtime", "timeout", "memory", "budget", "no_code", "svg", "crash", "backstop")


#: frames a program may recurse (Python's own default is 1,000; a recursive flood fill of the 576 cells
#: needs about 600)
RECURSION_FRAMES = 1_000
#: preparing a program (parse, check, instrument, compile) may use this many times `Limits.cpu_seconds`
PREPARE_CPU_FACTOR = 4


class CpuTimeout(BaseException):
    """Raised by the CPU-time signal; a BaseException so nothing in a program's path converts it."""


@dataclass
class ExecResult:
    """The outcome of one attempt: `ok` with pixels and shapes, or an invalid kind with a one-line reason."""

    outcome: str
    reason: str = ""
    code: str | None = None
    pixels: np.ndarray | None = None  #: (resolution, resolution, 3) uint8, only when ok
    calls: list[Call] = field(default_factory=list)
    shapes_wkb: list[bytes] = field(default_factory=list)
    background: RGB | None = None
    ops: int = 0
    pixel_writes: int = 0
    medium: str = "v1"
    png: bytes | None = None  #: SVG answers: the render at native size, as PNG
    score: Any = None  #: a `bench.translation.piou.Score` when the attempt was scored in the worker

    def without_geometry(self) -> "ExecResult":
        """The same result minus the call log and shapes (what a stage that only needs pixels keeps)."""
        self.calls, self.shapes_wkb = [], []
        return self

    @property
    def valid(self) -> bool:
        return self.outcome == "ok"

    def shapes(self) -> list[Any]:
        """Shapely geometries of the calls, in painter's order (decoded on demand)."""
        if not self.shapes_wkb:
            return []
        return list(shapely.from_wkb(self.shapes_wkb))

    def nonbackground_fraction(self) -> float:
        if self.pixels is None or self.background is None:
            return 0.0
        diff = np.any(self.pixels != np.array(self.background, dtype=np.uint8), axis=-1)
        return float(diff.mean())

    def colors(self) -> list[dict[str, Any]]:
        """Distinct colours of the final raster with their pixel counts, most frequent first."""
        if self.pixels is None:
            return []
        flat = self.pixels.reshape(-1, 3)
        uniq, counts = np.unique(flat, axis=0, return_counts=True)
        order = np.argsort(-counts, kind="stable")
        return [{"rgb": [int(x) for x in uniq[i]], "pixels": int(counts[i])} for i in order]


def _import_shim(math_ns: Any) -> Any:
    def _import_math(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if name != "math" or level:
            raise ImportError(f"import {name} is not allowed")
        return math_ns

    return _import_math


class _MathNamespace:
    """Read-only view of math's public functions and constants (no module object is handed out)."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"math.{name} is read-only")


@functools.lru_cache(maxsize=8)
def _math_class(names: tuple[str, ...], metered: tuple[str, ...]) -> type:
    """The namespace's class, built once per process (building it per program took about 0.1 ms, 2.5% of a
    typical program): math's constant functions and values as class members, the metered ones as slots
    that each program's instance fills with functions bound to its own meter."""
    members = {n: staticmethod(v) if callable(v) else v for n in names if n not in metered for v in (getattr(math, n),)}
    return type("math", (_MathNamespace,), {"__slots__": metered, "__all__": names, **members})


def _math_namespace(overrides: dict[str, Any]) -> Any:
    # only the names with a charge rule (bench.sandbox.meter.MATH_RULES): a function a newer Python adds is
    # refused (AttributeError) until it has one
    names = tuple(sorted(n for n in policy.MATH_NAMES if n in meters.MATH_RULES))
    metered = tuple(sorted(n for n in overrides if n in names))
    ns = _math_class(names, metered)()
    for n in metered:
        object.__setattr__(ns, n, overrides[n])
    return ns


def environment(meter: meters.Meter, limits: Limits) -> dict[str, Any]:
    """The globals one program runs with: the metered builtins, math and the meter's helpers."""
    math_ns = _math_namespace(meters.math_functions(meter, limits.max_collection))
    builtins = meters.builtins_table(meter, limits.max_range, limits.max_collection)
    real = meters.real_types(builtins)
    builtins["__import__"] = _import_shim(math_ns)  # reached only by `import math` / `from math import ...`
    binop = meters.binop_helper(meter, limits.max_collection, real)
    cmp = meters.cmp_helper(meter)
    return {
        "__builtins__": builtins, "math": math_ns,
        policy.TICK: meter.tick, policy.BINOP: binop, policy.UNARY: meters.unary_helper(meter), policy.CMP: cmp, policy.CHAIN: meters.chain_helper(cmp),
        policy.NESTED: meter.nested, policy.SOURCED: meter.sourced, policy.UNPACKED: meter.unpacked,
        policy.SIZED: meter.charged, policy.RENDERED: meter.rendered, policy.COPIED: meter.copied,
        policy.KEY: meter.key, policy.ATTR: meters.attr_helper(meter, real),
        policy.SLICE: slice, policy.HASHED: meter.hashed, policy.GENERIC: meters.generic_helper(real, meter),
    }


def _reason(e: BaseException) -> str:
    """`Type: message` of a program's exception, without formatting what the program put in it (an
    `assert False, [big] * 1000` would be rendered in full, outside every limit)."""
    parts = []
    for a in e.args[:4]:
        if isinstance(a, str):
            parts.append(a[:200])
        elif isinstance(a, (bool, float)) or (type(a) is int and a.bit_length() <= 256):
            parts.append(repr(a))
        else:
            parts.append(f"<{type(a).__name__}>")
    # no heap address in a reason (`f'{print!r}'` put one there): outcomes and reasons are the program's own
    return meters.scrub(f"{type(e).__name__}: {', '.join(parts)[:200]}")


def prepare(text: str, limits: Limits) -> tuple[str, Any] | ExecResult:
    """Extract, parse, normalise, check and compile; an ExecResult when the program cannot run."""
    if len(text.encode("utf-8", "surrogatepass")) > limits.max_source_bytes:
        return ExecResult("budget", f"model text over {limits.max_source_bytes} bytes")
    found = extract_program(text)
    if found is None:
        return ExecResult("no_code", "no code found in the text")
    code, tree = found
    try:
        if tree is None:
            tree = ast.parse(code)
    except SyntaxError as e:
        return ExecResult("syntax", f"line {e.lineno}: {e.msg}", code=code)
    except (ValueError, RecursionError, MemoryError) as e:
        return ExecResult("syntax", f"unparsable: {type(e).__name__}", code=code)
    tree = normalise(tree)
    try:
        policy.check(tree)
    except policy.AnnotationSyntax as e:
        return ExecResult("syntax", str(e), code=code)
    except policy.TooLarge as e:
        return ExecResult("budget", str(e), code=code)
    except policy.PolicyError as e:
        return ExecResult("forbidden", str(e), code=code)
    try:
        # dont_inherit: the program's semantics never depend on this module's own `from __future__` flags (issue 42:
        # programs inherited `annotations` from here by accident; annotations are now dropped by the instrumenter)
        compiled = compile(instrument(tree), "<program>", "exec", dont_inherit=True)
    except RecursionError:
        # a fixed reason: the interpreter's own message names where its frames ran out ("in comparison", "in
        # __instancecheck__"), which moves with the instrumenter's code, not with the program
        return ExecResult("syntax", "does not compile: nested too deeply", code=code)
    except (SyntaxError, ValueError) as e:
        return ExecResult("syntax", f"does not compile: {e}", code=code)
    return code, compiled


def execute(text: str, medium: Medium = V1, limits: Limits | None = None) -> ExecResult:
    """Run one model text in this process (trusted callers only; see module docstring)."""
    limits = limits or Limits()
    # parsing, checking and instrumenting: bounded by the source cap (a 100 kB program of 5,800 augmented
    # assignments takes about 1.2 s), under a far backstop of its own, without the garbage collector
    # (which took 40% of that time while the tree is built)
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        with cpu_limit(PREPARE_CPU_FACTOR * limits.cpu_seconds):
            prepared = prepare(text, limits)
    except CpuTimeout:
        prepared = ExecResult("timeout", f"preparing the program took over {PREPARE_CPU_FACTOR * limits.cpu_seconds:g} s of CPU")
    finally:
        if gc_was_on:
            gc.enable()
    if isinstance(prepared, ExecResult):
        prepared.medium = medium.name
        return prepared
    code, compiled = prepared
    canvas = medium.new_canvas(limits)
    meter = meters.Meter(limits.max_ops)
    canvas.charge = meter.charge
    env = environment(meter, limits)
    env.update(canvas.functions())

    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_depth() + RECURSION_FRAMES)
    outcome, reason = "ok", ""
    geoms: list[Any] = []
    try:
        with cpu_limit(limits.cpu_seconds):
            # checked, instrumented, budgeted (module docstring); called as a function, not through `exec`: CPython
            # 3.11 counts a call of the builtin against the recursion limit until it specialises the call, so a
            # recursion stopped one level sooner in a worker's first jobs than in its later ones (the frame of a
            # function counts the same either way, and its locals are `env`, as exec's were)
            types.FunctionType(compiled, env)()
            # the shapes are the program's cost too (an even-odd polygon of 4,096 crossing vertices is
            # expensive): computed under the same CPU limit, then bounded before anything leaves
            geoms = shapes_within_bound(medium, canvas.calls, limits)
    except CpuTimeout:
        outcome, reason = "timeout", f"over {limits.cpu_seconds:g} s of CPU"
    except BudgetExceeded as e:
        outcome, reason = "budget", str(e)
    except meters.Forbidden as e:
        outcome, reason = "forbidden", str(e)
    except RecursionError:
        outcome, reason = "budget", "recursion too deep"
    except MemoryError:
        outcome, reason = "memory", "out of memory"
    except Exception as e:  # every other error of the program is its own runtime failure
        outcome, reason = "runtime", _reason(e)
    finally:
        sys.setrecursionlimit(old_limit)
        env.clear()
    if outcome != "ok":
        return ExecResult(outcome, reason, code=code, ops=meter.units, pixel_writes=canvas.pixel_writes, medium=medium.name)
    wkb = list(shapely.to_wkb(np.array(geoms, dtype=object))) if geoms else []
    return ExecResult(
        "ok", "", code=code, pixels=canvas.pixels, calls=canvas.calls, shapes_wkb=wkb,
        background=canvas.background, ops=meter.units, pixel_writes=canvas.pixel_writes, medium=medium.name,
    )


def shapes_within_bound(medium: Medium, calls: list[Call], limits: Limits) -> list[Any]:
    """The calls' shapes, stopping (BudgetExceeded) as soon as their coordinates pass
    `limits.max_total_vertices`, so a program of 8,000 discs is refused after the first 390, not after
    computing all of them (the polygons' own points are bounded as they are drawn, in Canvas)."""
    geoms, carried = [], 0
    for c in calls:
        g = shape_of(medium, c)
        carried += int(shapely.get_num_coordinates(g))
        if carried > limits.max_total_vertices:
            raise BudgetExceeded(f"shapes of over {carried} vertices in all exceed {limits.max_total_vertices}")
        geoms.append(g)
    return geoms


_worker_mode = False  #: set by `worker_limits` in a sandbox worker: RLIMIT_CPU backs every `cpu_limit` up


def worker_limits() -> None:
    """Make every `cpu_limit` in this process also set RLIMIT_CPU (SIGXCPU kills the process, which the pool
    records as `timeout`) one to two seconds of CPU past its limit. Sandbox workers only: in any other process
    (a test, `ambench render`) it would end that process.

    Both clocks are this process's own CPU time, so load cannot change which one fires or when in the
    program's work (issue 32: the wall-clock kill this replaced, armed at 3 x the CPU limit and re-armed only
    every 1,000,000 work units, killed an under-charged program that got a tenth of a core, and 4 of 114
    programs changed outcome beside two busy loops). The wall clock now only ends a worker that makes no CPU
    progress at all, far above any CPU limit, in the pool (`SandboxPool`, outcome `backstop`)."""
    global _worker_mode
    _worker_mode = True


@contextmanager
def cpu_limit(seconds: float):
    """Raise CpuTimeout in this thread once the process has used `seconds` more CPU time (ITIMER_PROF:
    CPU time, not wall-clock time, so the limit does not depend on the machine's load). Code stuck
    inside C sees it when it returns; in a sandbox worker (`worker_limits`) RLIMIT_CPU kills it a second
    or two of CPU past `seconds`."""
    if not _main_thread():
        yield
        return

    fired = False

    def on_cpu(signum: int, frame: Any) -> None:
        nonlocal fired
        fired = True
        raise CpuTimeout()

    old = signal.signal(signal.SIGPROF, on_cpu)
    try:
        signal.setitimer(signal.ITIMER_PROF, seconds)
        if _worker_mode:
            _cpu_backstop(seconds)
        try:
            yield
        except CpuTimeout:
            raise
        except BaseException as e:
            # A C library that polls for signals may turn the handler's exception into its own: GEOS, interrupted
            # inside an overlay, raises shapely's GEOSException instead of CpuTimeout when its interrupt check
            # runs before shapely's (which one runs first depends on where the tick lands). Once the clock has
            # fired, whatever ends the work is the timeout, so the outcome does not depend on that race.
            if fired:
                raise CpuTimeout() from e
            raise
        finally:
            # disarm before any handler runs, so a late tick cannot replace the outcome already decided
            signal.setitimer(signal.ITIMER_PROF, 0)
    finally:
        signal.signal(signal.SIGPROF, old)


def _cpu_backstop(seconds: float) -> None:
    """RLIMIT_CPU (SIGXCPU, which the pool records as `timeout`) one to two seconds past `seconds` of CPU from
    now, under the worker's hard limit: a phase stuck in C stops soon after its own limit (it was about 12 s
    of CPU for a program; at 3x the limit, the 9.5 s SVG reached the pool's 60 s far backstop with a twelfth
    of a core)."""
    import resource

    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime) + math.ceil(seconds) + 1
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _depth() -> int:
    f, d = sys._getframe(), 0
    while f is not None:
        f, d = f.f_back, d + 1
    return d
