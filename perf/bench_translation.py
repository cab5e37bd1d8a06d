"""Translation scoring end to end (sandbox + exact-area PIoU): attempts/s at the paper's scale.

    .venv/bin/python perf/bench_translation.py [--n 13920] [--workers 2]

Attempts are the canonical transcriptions of the 145 sampled references with seeded perturbations
(numbers nudged by +-1..3, parts dropped, extra shapes), 96 per reference = 13,920 (the paper's count).
Scoring runs in the parent while the sandbox workers execute the next chunk's programs.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

from bench.translation.references import canonical_program, load_references


def perturbed(program: str, rng: random.Random) -> str:
    lines = program.splitlines()
    out = []
    for ln in lines:
        if ln.startswith(("rect", "circle", "line", "poly", "set_pixel")) and rng.random() < 0.08:
            continue  # dropped part
        if rng.random() < 0.3:
            ln = re.sub(r"\b(\d+)\b", lambda m: str(max(0, int(m.group(1)) + rng.choice([-3, -2, -1, 1, 2, 3]))) if rng.random() < 0.3 else m.group(1), ln)
        out.append(ln)
    if rng.random() < 0.2:
        out.append(f"rect({rng.randint(0, 20)}, {rng.randint(0, 20)}, 3, 3, 'red')")
    return "Here is the code:\n```python\n" + "\n".join(out) + "\n```"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=13_920)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    from experiments.stages.translation import score_attempts

    refs = load_references("sampled")
    rng = random.Random(0)
    per = -(-args.n // len(refs))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with open(tmp / "refs.jsonl", "w") as f:
            for r in refs:
                f.write(json.dumps(r.to_json()) + "\n")
        rows = [{"ref_id": r.id, "sample": k, "text": perturbed(canonical_program(r), rng)} for r in refs for k in range(per)][: args.n]
        with open(tmp / "att.jsonl", "w") as f:
            f.writelines(json.dumps(a) + "\n" for a in rows)
        t0 = time.perf_counter()
        summary = score_attempts(tmp / "refs.jsonl", tmp / "att.jsonl", tmp / "out.jsonl", workers=args.workers)
        dt = time.perf_counter() - t0
    print(f"attempts: {len(rows)} (145 sampled references x {per}, seeded perturbations); workers: {args.workers}")
    print(f"end to end (sandbox + PIoU): {len(rows) / dt:8.1f} attempts/s   ({dt:.1f} s)")
    print(f"summary: valid {summary['valid_rate']:.3f}, mean PIoU {summary['piou_mean']:.3f}, median {summary['piou_median']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
