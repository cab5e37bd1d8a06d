"""Size and power of the causal stage's test (issue 41), by repetition on the organisms, through the stage's code path.

    .venv/bin/python perf/bench_causal.py RUN [--reps 60] [--models organism:random-planner,organism:xor-planner]

RUN is a finished study of the planners (`ambench run --preset organisms --out ORG` makes ORG/planners; any study
with probe rows works). For each model and repetition r the stage (`experiments.stages.causal.causal_stage`) runs
with seed r and `when="always"`, exactly as `ambench run` calls it except for the seed: each seed draws another 64
of the held-out prompts, other (source, decoy) pairs, another erasure control and, where the drawings are sampled
(the planners' targets are sampled attempts), other sampling seeds. The table gives the share of repetitions whose
interchange test had p <= 0.05 (size where nothing is used: the random planner, whose layout is drawn at random
per attempt; power where the plan is used: the xor-planner), the share called "used", and the median effect.

`--null misrouted` measures the size where drawings *do* change: the interchange puts in the activation of a third
prompt (each base prompt's source is another base prompt's, a seeded permutation) while the test still compares the
drawing with the recorded source and decoy. On the xor-planner, which redraws whatever plan is put in, the drawings
move every time, but towards a prompt independent of the (source, decoy) pair: a null with real movement (the
random planner's null is one where the drawing rarely moves at all, so its effects are mostly exactly 0).

The run's causal.jsonl is restored afterwards. Seeded: a rerun prints the same table.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--models", default="organism:random-planner,organism:xor-planner")
    ap.add_argument("--first-seed", type=int, default=1000)
    ap.add_argument("--null", choices=("none", "misrouted"), default="none",
                    help="misrouted: put in a third prompt's activation, not the recorded source's (a null that moves)")
    a = ap.parse_args()
    if a.null == "misrouted":
        from interp import causal

        real = causal.interchange_hook

        def misrouted(basis, sources):
            n = len(sources)  # a cyclic shift by 1..n-1: no base prompt keeps its own source
            shift = 1 + int(np.random.default_rng(n).integers(n - 1))
            return real(basis, np.asarray(sources)[(np.arange(n) + shift) % n])

        causal.interchange_hook = misrouted

    from experiments.rundir import RunDir
    from experiments.stages.causal import causal_stage
    from experiments.study.config import StudyConfig
    from interp.runtime import Runtime

    rd = RunDir(a.run)
    config = StudyConfig.from_dict(rd.config()["stages"]["study"]["config"])
    settings = replace(config.causal_settings(), when="always")
    saved = rd.file(RunDir.CAUSAL).read_bytes() if rd.file(RunDir.CAUSAL).exists() else None
    print(f"null: {a.null}; run {a.run}: drawings {'greedy' if settings.temperature == 0 else f'sampled at {settings.temperature}'}, "
          f"{settings.max_prompts} prompts a repetition, seeds {a.first_seed}..{a.first_seed + a.reps - 1}")
    try:
        for model in a.models.split(","):
            rt = Runtime.load(model, device="cpu")
            ps, effects, used, t0 = [], [], [], time.time()
            for r in range(a.reps):
                row = causal_stage(rt, a.run, model, replace(settings, seed=a.first_seed + r))
                ic = row.get("methods", {}).get("interchange", {})
                if ic.get("p") is not None:
                    ps.append(ic["p"])
                    effects.append(ic["effect"])
                    used.append(row["outcome"] == "used")
            ps_ = np.array(ps)
            k = int((ps_ <= 0.05).sum())
            se = np.sqrt(max(k, 1) * (len(ps) - k) / len(ps) ** 3) if ps else float("nan")
            print(f"{model}: p <= 0.05 in {k}/{len(ps)} = {k / max(len(ps), 1):.3f} (+/- {se:.3f}); called used "
                  f"{int(np.sum(used))}/{len(ps)}; median effect {np.median(effects):+.4f}; "
                  f"{(time.time() - t0) / max(a.reps, 1):.1f} s a repetition")
    finally:
        if saved is None:
            rd.file(RunDir.CAUSAL).unlink(missing_ok=True)
        else:
            rd.file(RunDir.CAUSAL).write_bytes(saved)


if __name__ == "__main__":
    main()
