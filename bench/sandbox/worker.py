"""Layer three of the sandbox: the worker process that runs model answers under operating-system limits.

A worker is a fresh interpreter (`python -m bench.sandbox.worker FD`). Before it reads any answer it
imports everything it will need, lowers its ceilings (no core dumps, file size 0: nothing can be
written), installs the kernel layer (bench.sandbox.kernel: seccomp, Landlock, no capabilities), runs
one warm-up job of each kind so that lazy initialisation does not count against the first program,
and records its address space as its *base*.

Outcomes depend only on the program, not on what ran before it or on the machine's load:
- **CPU clocks decide `timeout`, never the wall clock.** Each program gets `cpu_seconds` of CPU time
  (ITIMER_PROF), and scoring gets its own `cpu_seconds`; an RLIMIT_CPU backstop a second or two of CPU
  later kills a worker stuck inside C (resvg, GEOS, a builtin the meter under-charged), which the pool
  records as `timeout` too. Both count this process's own CPU time, so a worker that gets a tenth of a
  core reaches them at the same point of its work as an idle one (issue 32: a wall-clock kill at 3 x the
  CPU limit flipped 4 of 114 programs beside two busy loops). The pool's far backstop (`Limits.wall_seconds`,
  outcome `backstop`) ends only a worker whose CPU time does not move at all for that long.
- **A fixed stack.** Every worker runs with RLIMIT_STACK at `STACK_BYTES` (set before its interpreter
  starts: the worker re-executes itself once), so whatever nesting is left to the interpreter's own
  checks fails the same way on every host, whatever its `ulimit -s`; the meter's depth bounds
  (bench.sandbox.meter.MAX_DEPTH) keep every program far inside it.
- **Memory is measured per program.** Before each program the address-space limit is set to where
  the worker stands plus `memory_mb`; after it, a worker whose address space stayed more than
  `RECYCLE_SLACK_MB` above its base (a heap that a big program grew and the allocator kept) says so
  and exits, and the pool starts a fresh one. So every program starts within `RECYCLE_SLACK_MB` of a
  fresh worker and gets `memory_mb` on top (a 384 MB string no longer fails because an earlier
  program grew the heap).
- **Bounded results.** A result is encoded by bench.sandbox.boundary (never pickled); one larger than
  `max_result_bytes` becomes `budget`.

Messages to the host: b"H" + JSON (the kernel report, once), b"R" + 8-byte index + encoded result,
b"C" (recycle: this worker exits after its last result; the pool re-queues the rest of its batch).
"""

from __future__ import annotations

import os

# single-threaded numeric libraries: a worker is one core's worth of work (set before numpy loads)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import resource  # noqa: E402
import sys  # noqa: E402

#: the main thread's stack in every worker (RLIMIT_STACK when the interpreter starts): 1,000 frames of the
#: deepest C recursion a program can reach (a lambda called by `map` inside `sorted`'s key) use under 2 MB
STACK_BYTES = 16 * 1024 * 1024


def fixed_stack() -> None:
    """Give this worker a stack of STACK_BYTES, whatever the host's `ulimit -s`: the main thread's stack is
    sized when the interpreter starts, so set RLIMIT_STACK and start again (once; the socket to the host is
    inherited). Where the hard limit is lower, say so on stderr and go on (the depth bounds still hold)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == STACK_BYTES:
        return
    if hard != resource.RLIM_INFINITY and hard < STACK_BYTES:
        print(f"sandbox worker: the hard stack limit {hard} is under {STACK_BYTES} bytes; keeping {soft}",
              file=sys.stderr)
        return
    resource.setrlimit(resource.RLIMIT_STACK, (STACK_BYTES, hard))
    os.execv(sys.executable, [sys.executable, "-m", "bench.sandbox.worker", *sys.argv[1:]])


if __name__ == "__main__":
    # before the imports below: the re-executed interpreter imports them once (the first one never does: 0.15 s
    # of CPU a worker: perf/bench_sandbox.py's "CPU per worker start")
    fixed_stack()

import json  # noqa: E402
import math  # noqa: E402
import struct  # noqa: E402
from typing import Any  # noqa: E402

from bench.canvas.medium import Limits, Medium  # noqa: E402
from bench.sandbox import boundary  # noqa: E402
from bench.sandbox.job import Job  # noqa: E402
from bench.sandbox.kernel import Hardening, install, read_roots  # noqa: E402
from bench.sandbox.runtime import (  # noqa: E402
    PREPARE_CPU_FACTOR, CpuTimeout, ExecResult, cpu_limit, execute, worker_limits,
)

RECYCLE_SLACK_MB = 48  #: address space a worker may keep above its base before it is replaced
LIFETIME_CPU_SECONDS = 3_600  #: hard RLIMIT_CPU over a worker's life (it is replaced before reaching it)
_MB = 1024 * 1024


class _State:
    """What one worker knows about itself: limits, base address space, the /proc fd it measures with."""

    def __init__(self, medium: Medium, limits: Limits, hardening: Hardening) -> None:
        self.medium, self.limits, self.hardening = medium, limits, hardening
        self.statm = os.open("/proc/self/statm", os.O_RDONLY)  # opened before Landlock closes /proc
        self.base = 0
        self.hard_as = resource.RLIM_INFINITY
        self.hard_cpu = resource.RLIM_INFINITY
        self.references: dict[str, Any] = {}

    def address_space(self) -> int:
        return int(os.pread(self.statm, 64, 0).split()[0]) * resource.getpagesize()

    def arm(self, scoring: bool) -> None:
        """Per-program limits: memory from where the worker stands, CPU backstop past the ITIMER limit."""
        cap = self.address_space() + self.limits.memory_mb * _MB
        if self.hard_as != resource.RLIM_INFINITY:
            cap = min(cap, self.hard_as)
        resource.setrlimit(resource.RLIMIT_AS, (cap, self.hard_as))
        spent = _cpu_time()
        # at least ceil(cpu) + 1 s past the program's own limit, so the ITIMER decides whenever Python runs
        budget = (math.ceil(self.limits.cpu_seconds) + 1) * (2 if scoring else 1) + 1
        budget += math.ceil(PREPARE_CPU_FACTOR * self.limits.cpu_seconds)  # preparing has a limit of its own
        soft = int(spent) + budget
        if self.hard_cpu != resource.RLIM_INFINITY:
            soft = min(soft, self.hard_cpu)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, self.hard_cpu))

    def should_recycle(self) -> bool:
        if self.address_space() > self.base + RECYCLE_SLACK_MB * _MB:
            return True
        return self.hard_cpu != resource.RLIM_INFINITY and _cpu_time() > self.hard_cpu - 4 * (self.limits.cpu_seconds + 2)


def _cpu_time() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _warm_imports() -> None:
    """Everything a job may import, loaded before the kernel layer closes the file system."""
    import unicodedata  # noqa: F401 - CPython's parser imports it for the first non-ASCII identifier it reads

    import numpy  # noqa: F401
    import PIL.Image
    import PIL.PngImagePlugin  # noqa: F401
    import resvg_py  # noqa: F401
    import shapely  # noqa: F401

    import bench.svg.render  # noqa: F401
    import bench.translation.piou  # noqa: F401
    import bench.translation.references  # noqa: F401

    # the plugins `Image.open` tries first (PNG among them): a job opens only resvg's PNG (bench.svg.render).
    # Not `init()`, which imports all 40-odd formats (80 ms of each worker's start) that no job opens
    PIL.Image.preinit()


_WARM_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><rect width="24" height="24" fill="#fff"/>'
             '<text x="2" y="20" font-size="20" filter="url(#f)">T</text><filter id="f"><feGaussianBlur stdDeviation="1"/>'
             '</filter></svg>')


def _warm_up(state: _State) -> None:
    """One job of each kind, so that lazy set-up (fonts, GEOS, PIL) is in the base, not in a program's share."""
    from bench.translation.references import load_references

    ref = load_references("sampled")[0]
    run_job(state, Job("fill('white')\nrect(2, 2, 5, 5, 'red')\ncircle(12, 12, 4, 'blue')", reference=ref))
    run_job(state, Job(_WARM_SVG, kind="svg", size=24, native=64))


def run_raw(text: str, medium: Medium, limits: Limits) -> ExecResult:
    """Test-only (Hardening(python_layers=False)): run `text` as plain Python with the real builtins and
    the canvas functions, no allow-list, no budgets: only the operating-system and kernel layers hold."""
    import builtins

    canvas = medium.new_canvas(limits)
    env: dict[str, Any] = {"__builtins__": builtins, "__name__": "__raw__"}
    env.update(canvas.functions())
    try:
        with cpu_limit(limits.cpu_seconds):
            exec(compile(text, "<raw>", "exec"), env)  # noqa: S102 - deliberately unchecked, see docstring
    except CpuTimeout:
        return ExecResult("timeout", f"over {limits.cpu_seconds:g} s of CPU", medium=medium.name)
    except Exception as e:  # noqa: BLE001
        return ExecResult("runtime", f"{type(e).__name__}: {str(e)[:200]}", medium=medium.name)
    return ExecResult("ok", "", pixels=canvas.pixels, background=canvas.background, medium=medium.name)


def _score(state: _State, result: ExecResult, ref: Any) -> ExecResult:
    import shapely.errors

    from bench.translation.piou import reference_geometry, score_result, zero_score
    from bench.translation.references import scored_parts

    key = json.dumps(ref.to_json(), sort_keys=True)
    rg = state.references.get(key)
    if rg is None:
        rg = state.references[key] = reference_geometry(ref)
    if not result.valid:
        result.score = zero_score(len(scored_parts(ref)))
        return result
    try:
        with cpu_limit(state.limits.cpu_seconds):
            result.score = score_result(result, rg)
    except (CpuTimeout, MemoryError, shapely.errors.GEOSException) as e:
        # An overlay too complex to score ends in whichever limit it meets first: the CPU clock, or the worker's
        # memory, which GEOS reports as GEOSException('std::bad_alloc') (seen on an AVX-512 Xeon, where the
        # interleaved comb of tests/bench/test_boundary.py exhausts memory before CPU: one outcome, `budget`,
        # with the limit it met named). Any other GEOS error on geometry that came back valid is the same
        # verdict: the attempt's geometry cannot be scored within the worker's limits.
        what = (f"over {state.limits.cpu_seconds:g} s of CPU" if isinstance(e, CpuTimeout)
                else "more memory than the worker allows" if isinstance(e, MemoryError) or "alloc" in str(e)
                else f"a geometry error ({str(e)[:80]})")
        failed = ExecResult("budget", f"scoring needed {what} (geometry too complex)",
                            code=result.code, ops=result.ops, pixel_writes=result.pixel_writes, medium=result.medium)
        failed.score = zero_score(len(scored_parts(ref)))
        return failed
    return result


def run_job(state: _State, job: Job) -> ExecResult:
    """One job under its limits; every failure is an outcome, never an exception."""
    medium, limits = state.medium, state.limits
    name = "svg" if job.kind == "svg" else medium.name
    try:
        state.arm(scoring=job.reference is not None)
        if job.kind == "svg":
            from bench.svg.render import render_answer

            with cpu_limit(limits.cpu_seconds):
                result = render_answer(job.text, job.size, job.native)
        elif state.hardening.python_layers:
            result = execute(job.text, medium, limits)
        else:
            result = run_raw(job.text, medium, limits)
        if job.reference is not None:
            result = _score(state, result, job.reference)
        if not job.geometry:
            result.without_geometry()
    except MemoryError:
        result = ExecResult("memory", "out of memory", medium=name)
    except RecursionError:
        result = ExecResult("budget", "recursion too deep", medium=name)
    except CpuTimeout:
        result = ExecResult("timeout", f"over {limits.cpu_seconds:g} s of CPU", medium=name)
    except BaseException as e:  # noqa: BLE001 - one attempt's failure must not end the worker
        result = ExecResult("runtime", f"sandbox error: {type(e).__name__}", medium=name)
    if boundary.encoded_size(result) > limits.max_result_bytes:
        result = ExecResult("budget", f"result over {limits.max_result_bytes} bytes", code=result.code, medium=name)
    return result


def serve(conn: Any) -> None:
    """Worker main loop: receive (index, Job) batches, send back one encoded result each."""
    medium, limits, hardening = conn.recv()
    try:
        os.chdir("/")
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
    except OSError:  # pragma: no cover
        pass
    _warm_imports()
    state = _State(medium, limits, hardening)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    report = install(hardening, read_roots())
    worker_limits()  # per phase: RLIMIT_CPU just past its CPU limit
    sys.setrecursionlimit(1000)
    _warm_up(state)
    state.base = state.address_space()
    # hard ceilings the worker cannot raise again once its capabilities are gone
    state.hard_as = state.base + (limits.memory_mb + RECYCLE_SLACK_MB) * _MB
    resource.setrlimit(resource.RLIMIT_AS, (state.hard_as, state.hard_as))
    state.hard_cpu = int(_cpu_time()) + LIFETIME_CPU_SECONDS
    resource.setrlimit(resource.RLIMIT_CPU, (state.hard_cpu, state.hard_cpu))
    conn.send_bytes(b"H" + json.dumps(report.as_dict()).encode())
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        for index, job in msg:
            result = run_job(state, job)
            try:
                data = boundary.encode(result)
                del result
            except MemoryError:
                data = boundary.encode(ExecResult("memory", "result too large", medium=medium.name))
            conn.send_bytes(b"R" + struct.pack(">Q", index) + data)
            del data
            if state.should_recycle():
                conn.send_bytes(b"C")
                return


if __name__ == "__main__":
    from multiprocessing.connection import Connection

    serve(Connection(int(sys.argv[1])))
