"""How much CPU a program can spend inside its work-unit budget, per construct, side by side in one run.

    .venv/bin/python perf/bench_meter.py [--max-ops 10000000]

Outcomes must depend on the program, not on the machine's load, so `budget` (deterministic work
units, bench.sandbox.meter) must stop every program long before the CPU-time limit (2 s), which
stays a backstop: CPU time measured beside busy processes grows (0.65 s -> 0.92 s on this machine,
past 2 s for a 1.1 s program on a CI machine). Each program below stresses one construct until the
budget stops it (or ends just under it, so its shapes are computed too); the run prints its units,
its CPU time, the CPU per unit, and the CPU a program of exactly `--max-ops` units of that kind
would use, as a share of the CPU limit. Goal: every row at most a third of the limit (0.67 s).
Run in-process (bench.sandbox.runtime.execute) with the CPU limit raised, on an otherwise idle machine.
Each row is the median of `--repeats` runs (default 3): on this 2-core virtual machine the same program's
CPU time varied by up to 25% between runs minutes apart with nothing else running, and a single run
measured the machine's moment as much as the program.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from bench.canvas.medium import Limits
from bench.sandbox.runtime import execute
from tests.corpus.stress import REFUSED, programs

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-ops", type=int, default=Limits().max_ops)
    ap.add_argument("--repeats", type=int, default=3, help="runs per program; the row shows their median CPU")
    args = ap.parse_args()
    limit = Limits().cpu_seconds
    limits = Limits(max_ops=args.max_ops, cpu_seconds=120, max_calls=10**6)
    print(f"load average at start: {os.getloadavg()[0]:.2f}; budget {args.max_ops:,} units; CPU limit {limit:g} s; "
          f"each row the median of {args.repeats} runs")
    print(f"{'construct':22s} {'outcome':8s} {'units':>12s} {'cpu s':>7s} {'ns/unit':>8s} {'cpu at budget':>14s} {'share of limit':>15s}")
    worst = 0.0
    for name, text in programs(args.max_ops).items():
        runs = []
        for _ in range(args.repeats):
            t = time.process_time()
            r = execute(text, limits=limits)
            runs.append(time.process_time() - t)
        cpu = statistics.median(runs)
        units = max(1, min(r.ops, args.max_ops))
        at_budget = cpu * args.max_ops / units
        if not name.endswith("(deep)"):  # stopped by the depth bound after a few units: nothing to extrapolate
            worst = max(worst, at_budget)
        print(f"{name:22s} {r.outcome:8s} {units:12,d} {cpu:7.3f} {cpu / units * 1e9:8.1f} {at_budget:13.3f}s {at_budget / limit:14.0%}"
              + ("" if r.outcome in ("ok", "budget") else f"  {r.reason[:60]}"))
    print(f"worst: {worst:.3f} s of CPU at the full budget = {worst / limit:.0%} of the {limit:g} s limit (goal <= 30%, 0.6 s)")
    # refused before they run (issue 22): their CPU until the refusal, at the default limits
    for name, text in REFUSED.items():
        t = time.process_time()
        r = execute(text)
        print(f"{name:22.22s} {r.outcome:8s} {r.ops:12,d} {time.process_time() - t:7.3f}  {r.reason[:60]}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
