"""Layer three of the sandbox: the worker process that runs programs under operating-system limits.

A worker lowers its own ceilings before it reads any program: address space (RLIMIT_AS: a memory
bomb raises MemoryError or kills only this process), file size 0 (RLIMIT_FSIZE: no file can be
written), no core dumps, and, per program, a CPU-time signal plus an RLIMIT_CPU backstop for code
stuck inside C. The parent kills a worker that exceeds the wall-clock limit and starts another.
"""

from __future__ import annotations

import os

# single-threaded numeric libraries: a worker is one core's worth of work (set before numpy loads)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import resource  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from bench.canvas.medium import Limits, Medium  # noqa: E402
from bench.sandbox.runtime import CpuTimeout, ExecResult, execute  # noqa: E402


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    return pages * resource.getpagesize()


def apply_limits(limits: Limits) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    try:
        cap = _address_space() + limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    except (OSError, ValueError):  # pragma: no cover - platforms without /proc or RLIMIT_AS
        pass


def _cpu_backstop(limits: Limits) -> None:
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime)
    soft = spent + int(limits.cpu_seconds * 2) + 3
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def encode(result: ExecResult) -> tuple[Any, ...]:
    """Compact, picklable form of a result for the pipe."""
    pixels = None if result.pixels is None else (result.pixels.shape[0], result.pixels.tobytes())
    calls = [(c.kind, c.params, c.color, c.order) for c in result.calls]
    return (
        result.outcome, result.reason, result.code, pixels, calls, result.shapes_wkb,
        result.background, result.ops, result.pixel_writes, result.medium,
    )


def decode(payload: tuple[Any, ...]) -> ExecResult:
    import numpy as np

    from bench.canvas.medium import Call

    outcome, reason, code, pixels, calls, wkb, background, ops, writes, medium = payload
    arr = None
    if pixels is not None:
        n, raw = pixels
        arr = np.frombuffer(raw, dtype=np.uint8).reshape(n, n, 3).copy()
    return ExecResult(
        outcome, reason, code=code, pixels=arr, calls=[Call(*c) for c in calls], shapes_wkb=list(wkb),
        background=tuple(background) if background is not None else None, ops=ops, pixel_writes=writes,
        medium=medium,
    )


def serve(conn: Any) -> None:
    """Worker main loop: receive (index, text) batches, send back (index, encoded result) one by one."""
    medium, limits = conn.recv()
    try:
        os.chdir("/")
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
    except OSError:  # pragma: no cover
        pass
    apply_limits(limits)
    sys.setrecursionlimit(1000)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        for index, text in msg:
            try:
                _cpu_backstop(limits)
                result = execute(text, medium, limits)
            except MemoryError:
                result = ExecResult("memory", "out of memory", medium=medium.name)
            except RecursionError:
                result = ExecResult("budget", "recursion too deep", medium=medium.name)
            except CpuTimeout:
                result = ExecResult("timeout", f"over {limits.cpu_seconds:g} s of CPU", medium=medium.name)
            except BaseException as e:  # noqa: BLE001 - one attempt's failure must not end the worker
                result = ExecResult("runtime", f"sandbox error: {type(e).__name__}", medium=medium.name)
            try:
                payload = encode(result)
                del result
                conn.send((index, payload))
            except MemoryError:
                conn.send((index, encode(ExecResult("memory", "result too large", medium=medium.name))))

if __name__ == "__main__":
    from multiprocessing.connection import Connection

    serve(Connection(int(sys.argv[1])))
