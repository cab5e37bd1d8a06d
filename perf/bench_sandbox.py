"""Sandboxed batch executor vs a process-per-program harness (human-eval style), programs/s side by side.

    .venv/bin/python perf/bench_sandbox.py [--n 27120] [--baseline-n 400] [--workers 2] [--against DIR]

`--against DIR` also runs the same programs through a pool whose workers import `bench` from DIR (another
checkout, e.g. `git worktree add /tmp/base main`), in the order DIR, this tree, this tree, DIR: before and
after side by side in one run, on the same machine and load.

The baseline starts one `multiprocessing.Process` per program with a timeout, the way human-eval's
`check_correctness` does, running the same in-process executor inside it (same work per program).
The paper scores 27,120 programs; the goal is <= 45 s for them on an idle 2-core machine and >= 10x the
baseline (issues 22 and 32).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typical_programs import typical_programs  # noqa: E402

from bench.sandbox.pool import SandboxPool  # noqa: E402
from bench.sandbox.runtime import execute  # noqa: E402


def _one(text: str, q: "mp.Queue") -> None:
    r = execute(text)
    q.put((r.outcome, len(r.shapes_wkb)))


def process_per_program(texts: list[str], timeout: float = 5.0) -> list[str]:
    ctx = mp.get_context("fork")
    out = []
    for t in texts:
        q = ctx.Queue()
        p = ctx.Process(target=_one, args=(t, q))
        p.start()
        p.join(timeout)
        if p.is_alive():
            p.kill()
            out.append("timeout")
        else:
            out.append(q.get()[0] if not q.empty() else "runtime")
    return out


def pool_run(texts: list[str], workers: int, tree: Path | None = None) -> tuple[list, float]:
    """Results and seconds of one pool run; `tree`: the workers import `bench` from that checkout instead
    (`SandboxPool(code_root=...)`: they start there; the host side, pool and boundary, stays this tree's).
    Before, this set PYTHONPATH, which the working directory `python -m` puts first overrode: both sides of
    an --against run were this tree."""
    t0 = time.perf_counter()
    root = None if tree is None else tree.resolve()
    with SandboxPool(workers=workers, code_root=root) as pool:  # workers start inside run(): their start-up is timed
        results = pool.run(texts)
    return results, time.perf_counter() - t0


_CPU_PER_PROGRAM = """
import sys, time
sys.path.insert(0, {perf!r})
from typical_programs import typical_programs
import bench.sandbox.runtime
from bench.sandbox.runtime import execute
assert bench.sandbox.runtime.__file__.startswith({root!r}), bench.sandbox.runtime.__file__
texts = typical_programs({n}, seed=0)
for t in texts[:50]:
    execute(t)
c = time.process_time()
for t in texts:
    execute(t)
print((time.process_time() - c) / len(texts))
"""


def cpu_per_program(n: int, tree: Path | None) -> float:
    """CPU seconds per typical program of the in-process executor, in a fresh interpreter importing `bench`
    from `tree` (default: this one): steadier under load than a pool's wall-clock rate."""
    import subprocess

    root = (tree or Path(__file__).resolve().parents[1]).resolve()  # `-c` imports from the working directory
    code = _CPU_PER_PROGRAM.format(perf=str(Path(__file__).resolve().parent), n=n, root=str(root))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def start_cpu(n: int, tree: Path | None) -> float:
    """CPU seconds one worker costs to start (its interpreter, imports, kernel layer, warm-up jobs) and answer one
    tiny job: `n` one-worker pools in turn, their reaped children's CPU time. A study starts a pool per stage and
    the tests start hundreds of workers, so this is paid far more often than once."""
    import resource

    from bench.sandbox.job import Job

    root = None if tree is None else tree.resolve()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(n):
        with SandboxPool(workers=1, code_root=root) as pool:
            pool.run_jobs([Job("fill('white')")])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / n


def abba(measure: Callable[[Path | None], float], other: Path) -> tuple[float, float]:
    """(this tree, `other`): the means of `measure(tree)` taken in the order other, this, this, other, so that a load
    drifting during the run weighs on both alike (`tree` None: this tree)."""
    got: dict[str, list[float]] = {"this": [], "other": []}
    for which in ("other", "this", "this", "other"):
        got[which].append(measure(other if which == "other" else None))
    return sum(got["this"]) / 2, sum(got["other"]) / 2


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=27_120)
    ap.add_argument("--baseline-n", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--against", type=Path, default=None, help="another checkout whose workers run the same programs")
    args = ap.parse_args()
    texts = typical_programs(args.n, seed=0)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")

    t0 = time.perf_counter()
    base = process_per_program(texts[: args.baseline_n])
    t_base = time.perf_counter() - t0
    base_rate = len(base) / t_base

    if args.against is None:
        results, t_pool = pool_run(texts, args.workers)
    else:
        # A B B A: the other checkout, this tree twice, the other again, so a load that drifts during the run
        # weighs on both alike (on a loaded machine one A-then-B pair gave 1.20 and 0.90 on the same code)
        times: dict[str, list[float]] = {"other": [], "this": []}
        for which in ("other", "this", "this", "other"):
            res, dt = pool_run(texts, args.workers, args.against if which == "other" else None)
            times[which].append(dt)
            if which == "this":
                results = res
            else:
                other = res
            print(f"pool, workers from {args.against if which == 'other' else 'this tree'}: {len(res) / dt:8.1f} programs/s "
                  f"({args.n} in {dt:.1f} s; load {os.getloadavg()[0]:.2f})")
        t_pool = sum(times["this"]) / 2
        t_other = sum(times["other"]) / 2
    pool_rate = len(results) / t_pool
    valid = sum(r.valid for r in results)
    agree = all(b == r.outcome for b, r in zip(base, results))

    print(f"programs: {args.n} typical (seed 0), {valid} valid; workers: {args.workers}")
    print(f"process-per-program : {base_rate:8.1f} programs/s  ({args.baseline_n} programs in {t_base:.1f} s)")
    print(f"batch pool          : {pool_rate:8.1f} programs/s  ({args.n} programs in {t_pool:.1f} s, worker start-up included)")
    print(f"ratio pool/baseline : {pool_rate / base_rate:8.1f}x   outcomes agree on the shared programs: {agree}")
    print(f"27,120 programs at this rate: {27120 / pool_rate:.1f} s (goal <= 45 s, >= 10x: issues 22 and 32); load at end {os.getloadavg()[0]:.2f}")
    if args.against is not None:
        print(f"this tree / {args.against}: {t_other / t_pool:.3f} (programs/s, mean of two runs each); outcomes agree: "
              f"{all(a.outcome == b.outcome for a, b in zip(other, results))}")
        this_ms, other_ms = (v * 1e3 for v in abba(lambda tree: cpu_per_program(1500, tree), args.against))
        print(f"CPU per typical program in one process (1,500 programs, A B B A): this tree {this_ms:.2f} ms, "
              f"{args.against} {other_ms:.2f} ms, ratio of throughputs {other_ms / this_ms:.3f}; load {os.getloadavg()[0]:.2f}")
        this_s, other_s = abba(lambda tree: start_cpu(10, tree), args.against)
        print(f"CPU per worker start (10 one-worker pools, A B B A): this tree {this_s:.3f} s, {args.against} "
              f"{other_s:.3f} s, ratio {other_s / this_s:.2f}; load {os.getloadavg()[0]:.2f}")
    else:
        print(f"CPU per worker start (10 one-worker pools): {start_cpu(10, None):.3f} s")


if __name__ == "__main__":
    main()
