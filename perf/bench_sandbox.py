"""Sandboxed batch executor vs a process-per-program harness (human-eval style), programs/s side by side.

    .venv/bin/python perf/bench_sandbox.py [--n 27120] [--baseline-n 400] [--workers 2] [--against DIR]

`--against DIR` also runs the same programs through a pool whose workers import `bench` from DIR (another
checkout, e.g. `git worktree add /tmp/base main`), right before this tree's pool: before and after side by
side in one run, on the same machine and load.

The baseline starts one `multiprocessing.Process` per program with a timeout, the way human-eval's
`check_correctness` does, running the same in-process executor inside it (same work per program).
The paper scores 27,120 programs; the goal is <= 50 s for them on an idle 2-core machine and >= 7x the
baseline (issue 22).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=27_120)
    ap.add_argument("--baseline-n", type=int, default=400)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--against", type=Path, default=None, help="another checkout whose workers run the same programs")
    args = ap.parse_args()
    texts = typical_programs(args.n, seed=0)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")

    if args.against is not None:
        # the workers are fresh interpreters (`python -m bench.sandbox.worker`): PYTHONPATH makes them import
        # the other checkout's bench; the host side (pool, boundary) is this tree's, unchanged by the meter
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(args.against.resolve())
        try:
            t0 = time.perf_counter()
            with SandboxPool(workers=args.workers) as pool:
                other = pool.run(texts)
            t_other = time.perf_counter() - t0
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH")
            else:
                os.environ["PYTHONPATH"] = saved
        print(f"pool, workers from {args.against}: {len(other) / t_other:8.1f} programs/s ({args.n} in {t_other:.1f} s; "
              f"load {os.getloadavg()[0]:.2f})")

    t0 = time.perf_counter()
    base = process_per_program(texts[: args.baseline_n])
    t_base = time.perf_counter() - t0
    base_rate = len(base) / t_base

    t0 = time.perf_counter()
    with SandboxPool(workers=args.workers) as pool:  # workers start inside run(): their start-up is timed
        results = pool.run(texts)
    t_pool = time.perf_counter() - t0
    pool_rate = len(results) / t_pool
    valid = sum(r.valid for r in results)
    agree = all(b == r.outcome for b, r in zip(base, results))

    print(f"programs: {args.n} typical (seed 0), {valid} valid; workers: {args.workers}")
    print(f"process-per-program : {base_rate:8.1f} programs/s  ({args.baseline_n} programs in {t_base:.1f} s)")
    print(f"batch pool          : {pool_rate:8.1f} programs/s  ({args.n} programs in {t_pool:.1f} s, worker start-up included)")
    print(f"ratio pool/baseline : {pool_rate / base_rate:8.1f}x   outcomes agree on the shared programs: {agree}")
    print(f"27,120 programs at this rate: {27120 / pool_rate:.1f} s (goal <= 50 s, >= 7x); load at end {os.getloadavg()[0]:.2f}")
    if args.against is not None:
        print(f"this tree / {args.against}: {t_other / t_pool:.3f} (programs/s ratio); outcomes agree: "
              f"{all(a.outcome == b.outcome for a, b in zip(other, results))}")


if __name__ == "__main__":
    main()
