"""SVG answers rendered per second: through the sandbox pool vs in this process, side by side.

    .venv/bin/python perf/bench_svg.py [--repeat 4] [--workers 2]

Both sides do the render stage's work per answer: sanitise, draw at native 512 (PNG) and at 24x24 from
the vector source, with the bundled fonts. The corpus is the benign icon-style set of
tests/corpus/svg_benign.jsonl (141 files: stroke and filled icons, design-tool files, model answers
with text, filters and gradients), repeated. The pool's worker start-up is timed. Issue 12's goal:
the sandbox costs at most 2x in-process rendering per core (`pool, 1 worker` vs `in-process`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.sandbox.job import Job  # noqa: E402
from bench.sandbox.pool import SandboxPool  # noqa: E402
from bench.svg.render import NATIVE, render_answer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    corpus = [json.loads(line)["text"] for line in open(ROOT / "tests" / "corpus" / "svg_benign.jsonl")]
    texts = corpus * args.repeat

    render_answer(texts[0], 24, NATIVE)  # import and font warm-up, as a worker does before its first job
    t0 = time.perf_counter()
    inproc = [render_answer(t, 24, NATIVE) for t in texts]
    t_in = time.perf_counter() - t0

    rates = {}
    for workers in sorted({1, args.workers}):
        t0 = time.perf_counter()
        with SandboxPool(workers=workers) as pool:  # workers start inside run_jobs(): start-up is timed
            pooled = pool.run_jobs([Job(t, kind="svg", size=24, native=NATIVE) for t in texts])
        rates[workers] = (len(texts) / (time.perf_counter() - t0), pooled)

    same = all(a.outcome == b.outcome and (a.pixels is None or (a.pixels == b.pixels).all())
               for a, b in zip(inproc, rates[1][1]))
    r_in = len(texts) / t_in
    load = os.getloadavg()
    print(f"answers: {len(texts)} ({len(corpus)} benign SVGs x {args.repeat}), {sum(r.valid for r in inproc)} rendered")
    print(f"load average at start of run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    print(f"in-process           : {r_in:8.1f} answers/s")
    for workers, (rate, _) in rates.items():
        what = f"sandbox cost {r_in / rate:5.2f}x (goal <= 2x)" if workers == 1 else f"speed-up {rate / r_in:5.2f}x"
        print(f"pool, {workers} worker{'s' if workers > 1 else ' '}       : {rate:8.1f} answers/s   {what}")
    print(f"pool and in-process agree on every outcome and pixel: {same}")


if __name__ == "__main__":
    main()
