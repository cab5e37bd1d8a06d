"""The batch executor: a persistent pool of sandbox workers that runs many model answers in parallel.

`SandboxPool.run(texts)` runs canvas programs; `run_jobs(jobs)` runs any `Job`: a canvas program
(optionally without geometry, optionally scored against a reference inside the worker) or an SVG
answer (sanitised and rendered inside the worker). One result per job, in order. Work is sent in
small batches to amortise the pipe. A worker that dies (CPU backstop, out of memory, a crash, a
malformed or oversized message) is replaced; the attempt it was on gets its outcome (`timeout`,
`memory`, `crash`) and the rest of its batch goes back on the queue. A worker whose CPU time does not
move at all for the far wall-clock backstop (`Limits.wall_seconds`) is killed and its attempt recorded
as `backstop`: a worker that is working, however slowly the machine lets it, is left to its CPU
clocks. A worker that asks to be
recycled (its heap grew) is replaced without charging anyone. Results do not depend on scheduling,
on the number of workers or on the machine's load (see bench.sandbox.worker).

Every byte a worker sends is read through bench.sandbox.boundary (bounded, validated, never
unpickled): the host trusts nothing that comes back.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterable, Sequence

from bench.canvas.medium import V1, Limits, Medium
from bench.sandbox import boundary
from bench.sandbox.job import Job
from bench.sandbox.kernel import Hardening
from bench.sandbox.runtime import ExecResult

log = logging.getLogger("ambench.sandbox")
#: the directory holding the `bench` package this process runs (a checkout, or site-packages)
_CODE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class _Worker:
    proc: Any
    conn: Connection
    batch: deque = field(default_factory=deque)  #: indices sent and not yet answered, in order
    started: float = 0.0  #: when the attempt at the head of `batch` started
    err: int = -1  #: read end of the worker's stderr (non-blocking)
    tail: bytes = b""  #: what it wrote there since its last answer (bounded), read when it dies
    #: (when, CPU seconds) the backstop last looked at this worker during its current attempt, or None
    mark: tuple[float, float] | None = None


class SandboxPool:
    """A pool of limited worker processes for model answers (see module docstring)."""

    def __init__(
        self,
        workers: int | None = None,
        medium: Medium = V1,
        limits: Limits | None = None,
        batch_size: int = 32,
        hardening: Hardening | None = None,
        code_root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.medium = medium
        self.limits = limits or Limits()
        self.hardening = hardening or Hardening()  # tests alone switch layers off (bench.sandbox.kernel)
        #: where workers import `bench` from: the directory this host imported it from (workers start there,
        #: since `python -m` puts the working directory first on sys.path); perf/bench_sandbox.py --against
        #: points it at another checkout
        self.code_root = str(code_root) if code_root is not None else _CODE_ROOT
        self.n_workers = max(1, workers or os.cpu_count() or 1)
        self.batch_size = max(1, batch_size)
        self._workers: list[_Worker] = []
        self.restarts = 0  #: workers replaced after a death or a backstop kill
        self.recycled = 0  #: workers replaced because their heap grew (no attempt charged)
        self.kernel: dict[str, Any] | None = None  #: what the first worker installed (bench.sandbox.kernel)

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _spawn(self) -> _Worker:
        # a fresh interpreter per worker (`python -m bench.sandbox.worker FD`), never a fork of the
        # caller: nothing of the parent (a loaded model, open files, threads) leaks into it, and the
        # caller's script is not re-imported the way multiprocessing's spawn does.
        parent_sock, child_sock = socket.socketpair()
        # PYTHONHASHSEED: string hashes are seeded at random per process, so a program iterating over a set of
        # colour names drew in an order that depended on which worker ran it (issue 22: an outcome is a
        # function of the program). A fixed seed costs nothing here: flooding a dict with colliding strings
        # needs full 64-bit collisions, and colliding integers need no seed at all.
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONHASHSEED="0")
        # stderr comes back through a pipe the pool drains: a worker's last words say why it died (a Rust
        # "memory allocation ... failed" before SIGABRT is `memory`, not `crash`), and never fill a terminal
        err_r, err_w = os.pipe()
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.sandbox.worker", str(child_sock.fileno())],
            pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL, stderr=err_w, env=env, close_fds=True,
            cwd=self.code_root,
        )
        child_sock.close()
        os.close(err_w)
        os.set_blocking(err_r, False)
        conn = Connection(parent_sock.detach())
        conn.send((self.medium, self.limits, self.hardening))
        return _Worker(proc, conn, started=time.monotonic(), err=err_r)

    @staticmethod
    def _drain(w: _Worker) -> None:
        while True:
            try:
                chunk = os.read(w.err, 65_536)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                return
            w.tail = (w.tail + chunk)[-_TAIL:]

    def _ensure(self) -> None:
        while len(self._workers) < self.n_workers:
            self._workers.append(self._spawn())

    def _kill(self, w: _Worker) -> None:
        try:
            w.proc.kill()
        except (ProcessLookupError, OSError):
            pass
        try:
            w.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for close in (w.conn.close, lambda: os.close(w.err)):
            try:
                close()
            except OSError:
                pass

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in self._workers:
            try:
                w.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._kill(w)
            for close in (w.conn.close, lambda: os.close(w.err)):
                try:
                    close()
                except OSError:
                    pass
        self._workers = []

    def kernel_report(self) -> dict[str, Any]:
        """What the workers' kernel layer holds (starts a worker and waits for its greeting)."""
        self.run_jobs([Job("fill('white')")])
        return dict(self.kernel or {})

    # -- running ---------------------------------------------------------------------------
    def run_one(self, text: str) -> ExecResult:
        return self.run([text])[0]

    def run(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> list[ExecResult]:
        """Execute every text as a canvas program; `progress(k)` gets the number of newly finished attempts."""
        return self.run_jobs([Job(t) for t in texts], progress)

    def run_jobs(self, jobs: Sequence[Job], progress: Callable[[int], None] | None = None) -> list[ExecResult]:
        """Run every job (see `Job`); one result each, in order. A job with a reference always comes
        back with a `score` (zero for every invalid attempt)."""
        results: list[ExecResult | None] = [None] * len(jobs)
        queue: deque[int] = deque(range(len(jobs)))
        self._ensure()
        pending = len(jobs)
        wall = self.limits.wall_seconds
        cap = self.limits.max_result_bytes + 65_536

        def finish(index: int, res: ExecResult) -> None:
            nonlocal pending
            job = jobs[index]
            if job.reference is not None and res.score is None:
                from bench.translation.piou import zero_score
                from bench.translation.references import scored_parts

                res.score = zero_score(len(scored_parts(job.reference)))
            if job.kind == "svg":
                res.medium = "svg"
            results[index] = res
            pending -= 1
            if progress:
                progress(1)

        def send(w: _Worker) -> None:
            size = max(1, min(self.batch_size, -(-len(queue) // (2 * self.n_workers))))
            idx = [queue.popleft() for _ in range(min(size, len(queue)))]
            w.batch.extend(idx)
            w.started = time.monotonic()
            try:
                w.conn.send([(i, jobs[i]) for i in idx])
            except OSError:
                pass  # the worker is dead; the loop below notices and replaces it

        def receive(w: _Worker) -> str | None:
            """Read what the worker has sent; 'recycle', 'broken: why', or None."""
            try:
                while w.conn.poll():
                    msg = w.conn.recv_bytes(cap)
                    kind = msg[:1]
                    if kind == b"H":
                        self._greeting(msg[1:])
                        w.started = time.monotonic()  # its start-up is not the first attempt's time
                    elif kind == b"R" and len(msg) >= 9:
                        (index,) = struct.unpack(">Q", msg[1:9])
                        if not w.batch or index != w.batch[0]:
                            return "broken: the worker answered out of order"
                        w.batch.popleft()
                        w.tail = b""
                        finish(index, boundary.decode(msg[9:], "svg" if jobs[index].kind == "svg" else self.medium.name))
                        w.started = time.monotonic()
                    elif kind == b"C":
                        return "recycle"
                    else:
                        return "broken: the worker sent a malformed message"
            except (EOFError, ConnectionError):
                return None
            except OSError:  # recv_bytes past `cap`: more than any well-behaved worker sends
                return f"broken: the worker sent a message over {cap} bytes"
            return None

        def replace(k: int, w: _Worker, outcome: str | None, reason: str) -> None:
            if outcome is not None and w.batch:
                finish(w.batch.popleft(), ExecResult(outcome, reason, medium=self.medium.name))
            queue.extendleft(reversed(w.batch))
            w.batch.clear()
            self._kill(w)
            if outcome is None:
                self.recycled += 1
            else:
                self.restarts += 1
            self._workers[k] = self._spawn()

        for w in self._workers:
            if queue:
                send(w)
        while pending:
            busy = [w for w in self._workers if w.batch]
            ready = wait([w.conn for w in busy], timeout=0.1)
            now = time.monotonic()
            for k, w in enumerate(list(self._workers)):
                self._drain(w)
                if not w.batch:
                    if queue:
                        send(w)
                    continue
                state = receive(w) if w.conn in ready else None
                if state == "recycle":
                    try:
                        w.proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:  # pragma: no cover
                        pass
                    replace(k, w, None, "")
                    continue
                if state is not None:
                    replace(k, w, "crash", state.split(": ", 1)[1])
                    continue
                if w.batch and w.proc.poll() is not None:
                    state = receive(w)  # results it sent before it died belong to their attempts
                    if state == "recycle" or not w.batch:
                        replace(k, w, None, "")
                        continue
                    self._drain(w)
                    outcome, reason = _death(w.proc.returncode or 0, w.tail)
                    replace(k, w, outcome, reason)
                    continue
                if w.batch and now - w.started > wall and self._stalled(w, now, wall):
                    replace(k, w, "backstop", f"wall-clock backstop: no CPU progress for over {wall:g} s (CPU time, "
                                              "not wall-clock time, decides timeout; the machine may be overloaded)")
                    continue
                if not w.batch and queue:
                    send(w)
        return results  # type: ignore[return-value]

    @staticmethod
    def _stalled(w: _Worker, now: float, wall: float) -> bool:
        """Whether `w`, past `wall` seconds on one attempt, also used no CPU at all over the last `wall` seconds.
        Only a worker that makes no CPU progress is ended by the wall clock: a worker that is computing is left
        to its CPU clocks however little of a core the machine gives it, so load cannot change an outcome
        (issue 32). The first look only takes a mark (/proc is read once per `wall` seconds, not per result)."""
        cpu = _cpu_seconds(w.proc.pid)
        if w.mark is None or w.mark[0] < w.started or cpu is None:
            w.mark = (now, cpu if cpu is not None else -1.0)
            return False
        if now - w.mark[0] < wall:
            return False
        if cpu > w.mark[1]:
            w.mark = (now, cpu)
            return False
        return True

    def _greeting(self, payload: bytes) -> None:
        try:
            report = boundary.parse_greeting(payload)
        except ValueError:
            return
        if self.kernel is None:
            self.kernel = report
            for layer in ("seccomp", "landlock"):
                if self.hardening.__dict__.get(layer) and not str(report.get(layer, "")).startswith(("on", "abi")):
                    log.warning("sandbox workers run without %s: %s", layer, report.get(layer))


_TAIL = 4096
#: what allocators print just before they abort when the address-space limit refuses them memory
_OUT_OF_MEMORY = (b"memory allocation of", b"std::bad_alloc", b"MemoryError", b"Cannot allocate memory")


def _death(exitcode: int, tail: bytes = b"") -> tuple[str, str]:
    """Outcome and reason of an attempt whose worker died with `exitcode`, given its last stderr bytes."""
    sig = -exitcode if exitcode < 0 else 0
    if sig == signal.SIGXCPU:
        return "timeout", "CPU limit reached inside a builtin (SIGXCPU: the CPU-time backstop killed the worker)"
    if sig == signal.SIGKILL:
        return "memory", "worker killed by SIGKILL (out of memory)"
    lines = [line.strip() for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
    oom = [line for line in lines if any(m.decode() in line for m in _OUT_OF_MEMORY)]
    said = f": {boundary.clean_text((oom or lines)[-1], 160, one_line=True)}" if lines else ""
    if sig == signal.SIGABRT and oom:
        return "memory", f"worker aborted out of memory{said}"
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return "crash", f"worker crashed ({name}){said}"
    return "crash", f"worker exited with status {exitcode}{said}"


def _cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) process `pid` has used, from /proc/PID/stat; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run_programs(texts: Iterable[str], medium: Medium = V1, limits: Limits | None = None, workers: int | None = None) -> list[ExecResult]:
    """One-shot convenience: start a pool, run the texts, stop it."""
    with SandboxPool(workers=workers, medium=medium, limits=limits) as pool:
        return pool.run(list(texts))
