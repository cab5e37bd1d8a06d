"""The batch executor: a persistent pool of sandbox workers that runs many programs in parallel.

`SandboxPool.run(texts)` returns one ExecResult per text, in order. Work is sent in small batches
to amortise the pipe; a worker that hangs past the wall-clock limit, or dies (memory, crash), is
killed and replaced, the attempt it was on gets its outcome (`timeout`, `memory`, `runtime`), and the
rest of its batch goes back on the queue. Results do not depend on scheduling.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterable, Sequence

from bench.canvas.medium import V1, Limits, Medium
from bench.sandbox.runtime import ExecResult
from bench.sandbox.worker import decode


@dataclass
class _Worker:
    proc: Any
    conn: Connection
    batch: deque = field(default_factory=deque)  #: indices sent and not yet answered, in order
    started: float = 0.0  #: when the attempt at the head of `batch` started


class SandboxPool:
    """A pool of limited worker processes for model-written programs (see module docstring)."""

    def __init__(
        self,
        workers: int | None = None,
        medium: Medium = V1,
        limits: Limits | None = None,
        batch_size: int = 32,
    ) -> None:
        self.medium = medium
        self.limits = limits or Limits()
        self.n_workers = max(1, workers or os.cpu_count() or 1)
        self.batch_size = max(1, batch_size)
        self._workers: list[_Worker] = []
        self.restarts = 0

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
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.sandbox.worker", str(child_sock.fileno())],
            pass_fds=(child_sock.fileno(),), stdin=subprocess.DEVNULL, env=env, close_fds=True,
        )
        child_sock.close()
        conn = Connection(parent_sock.detach())
        conn.send((self.medium, self.limits))
        return _Worker(proc, conn)

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
        try:
            w.conn.close()
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
            try:
                w.conn.close()
            except OSError:
                pass
        self._workers = []

    # -- running ---------------------------------------------------------------------------
    def run_one(self, text: str) -> ExecResult:
        return self.run([text])[0]

    def run(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> list[ExecResult]:
        """Execute every text; `progress(k)` is called with the number of newly finished attempts."""
        results: list[ExecResult | None] = [None] * len(texts)
        queue: deque[int] = deque(range(len(texts)))
        self._ensure()
        pending = len(texts)
        wall = self.limits.wall_seconds

        def send(w: _Worker) -> None:
            size = max(1, min(self.batch_size, -(-len(queue) // (2 * self.n_workers))))
            idx = [queue.popleft() for _ in range(min(size, len(queue)))]
            w.batch.extend(idx)
            w.started = time.monotonic()
            try:
                w.conn.send([(i, texts[i]) for i in idx])
            except OSError:
                pass  # the worker is dead; the loop below notices and replaces it

        def replace(w: _Worker, outcome: str, reason: str) -> _Worker:
            nonlocal pending
            head = w.batch.popleft()
            results[head] = ExecResult(outcome, reason, medium=self.medium.name)
            pending -= 1
            if progress:
                progress(1)
            queue.extendleft(reversed(w.batch))
            self._kill(w)
            self.restarts += 1
            return self._spawn()

        for w in self._workers:
            if queue:
                send(w)
        while pending:
            busy = [w for w in self._workers if w.batch]
            ready = wait([w.conn for w in busy], timeout=0.1)
            now = time.monotonic()
            for k, w in enumerate(list(self._workers)):
                if not w.batch:
                    if queue:
                        send(w)
                    continue
                if w.conn in ready:
                    try:
                        while w.conn.poll():
                            index, payload = w.conn.recv()
                            results[index] = decode(payload)
                            w.batch.popleft()
                            pending -= 1
                            if progress:
                                progress(1)
                            w.started = time.monotonic()
                    except (EOFError, OSError):
                        pass
                if w.batch and w.proc.poll() is not None:
                    code = w.proc.returncode or 0
                    outcome, reason = _death(code)
                    self._workers[k] = replace(w, outcome, reason)
                    continue
                if w.batch and now - w.started > wall:
                    self._workers[k] = replace(w, "timeout", f"over {wall:g} s of wall-clock time")
                    continue
                if not w.batch and queue:
                    send(w)
        return results  # type: ignore[return-value]


def _death(exitcode: int) -> tuple[str, str]:
    sig = -exitcode if exitcode < 0 else 0
    if sig == signal.SIGXCPU:
        return "timeout", "CPU limit reached inside a builtin"
    if sig == signal.SIGKILL:
        return "memory", "worker killed (out of memory)"
    if sig:
        return "runtime", f"worker crashed ({signal.Signals(sig).name})"
    return "runtime", f"worker exited with status {exitcode}"


def run_programs(texts: Iterable[str], medium: Medium = V1, limits: Limits | None = None, workers: int | None = None) -> list[ExecResult]:
    """One-shot convenience: start a pool, run the texts, stop it."""
    with SandboxPool(workers=workers, medium=medium, limits=limits) as pool:
        return pool.run(list(texts))
