"""Calibration of the beyond-text test on real transformer activations, and its power on a hidden plan (issue 28).

    .venv/bin/python perf/bench_beyond_text.py [--sets 40] [--broken-sets 20] [--perms 99] [--position last]

Real activations: the random-planner organism's (a trained 4-layer transformer, `interp/organisms/`) at the
`--position` token of its 208 held-out prompts. Targets that depend on the text only (so nothing is beyond it):
- one word: share 0.3 of the variance follows whether the prompt's colour word is "teal";
- word order: on the same prompts with "by the {place}" moved before "at {time}" in a seeded half of them, share
  0.3 follows that order bit (the place and time words are never adjacent).
Each target over `--sets` seeded data sets (new directions and noise): the share of p <= 0.05 of the stage's test
(issue 39: the probe's R^2 of the ceiling's residuals, Freedman-Lane null worlds from the ceiling's in-sample fit;
every lexical baseline and its screened columns), beside the broken variant (the Delta of the two R^2 against the
whole designs' in-sample fitted values, the test before issue 28) over `--broken-sets`. Goal: <= 7%.
A hidden plan: simulated activations that hold a plan no word states (`interp.simulate`, planted, n = 80): the
share of p <= 0.05 (goal: power >= 90%). Seeded: the same table on every run.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sets", type=int, default=40)
    ap.add_argument("--broken-sets", type=int, default=20)
    ap.add_argument("--perms", type=int, default=99)
    ap.add_argument("--position", default="last")
    ap.add_argument("--plan-sets", type=int, default=20)
    ap.add_argument("--grid", choices=("stage", "reduced"), default="stage",
                    help="stage: the probe stage's grid (issue 39, default); reduced: PCA 4..32, 3 inner folds (before)")
    a = ap.parse_args()
    from threadpoolctl import threadpool_limits

    from interp.probes import Grid
    from interp.simulate import (Population, beyond_text_replications, beyond_text_test, organism_activations,
                                 organism_prompts, word_targets)

    t0, load0 = time.time(), os.getloadavg()[0]
    from experiments.stages.probe import ProbeSettings
    from interp.baselines import READABLE_MAX

    grid = ProbeSettings().grid if a.grid == "stage" else Grid(pca=(4, 8, 16, 32), outer=5, inner=3)
    rows = []
    with threadpool_limits(1):
        for target, swapped in (("one word (teal)", False), ("word order (place before time)", True)):
            items, bits = organism_prompts(swapped=swapped)
            xs = organism_activations(items, position=a.position)
            texts = [i.text for i in items]
            feature = bits if swapped else np.array([" teal " in f" {t} " for t in texts], float)
            for fitted, count in (("stage", a.sets), ("in-sample", a.broken_sets)):
                kw = {} if fitted == "stage" else dict(fitted=fitted, screened=False, statistic="difference")
                got = [beyond_text_test(xs, texts, y, grid, a.perms, r, **kw)
                       for r, y in enumerate(word_targets(feature, count, seed=11))]
                rows.append((target, fitted, got))
        plan = beyond_text_replications(Population("planted", seed=1, vocab=20, words=4, relevant=2, text_share=0.3,
                                                   act_noise=0.3), 80, a.plan_sets, grid, a.perms)
    print(f"beyond-text test on the random planner's activations at `{a.position}` (208 prompts), {a.perms} permutations; "
          f"grid: {a.grid}; verdict 'beyond these text features' = p <= 0.05 and text-readable share < {READABLE_MAX}")
    print(f"{'target':32s} {'fitted values':13s} {'sets':>5s} {'p<=.05':>7s} {'verdict':>7s} {'mean beyond':>11s} {'ceilings'}")
    for target, fitted, got in rows:
        tops = {}
        for g in got:
            tops[g["baseline"]] = tops.get(g["baseline"], 0) + 1
        if not got:
            continue
        verdict = np.mean([g["p_fl"] <= 0.05 and g["text_readable"] < READABLE_MAX for g in got])
        print(f"{target:32s} {fitted:13s} {len(got):5d} {np.mean([g['p_fl'] <= 0.05 for g in got]):7.3f} {verdict:7.3f} "
              f"{np.mean([g['beyond'] for g in got]):11.3f} {tops}")
    verdict = np.mean([r["p_fl"] <= 0.05 and r["text_readable"] < READABLE_MAX for r in plan])
    print(f"{'hidden plan (simulated, n=80)':32s} {'stage':13s} {len(plan):5d} {np.mean([r['p_fl'] <= 0.05 for r in plan]):7.3f} "
          f"{verdict:7.3f} {np.mean([r['beyond'] for r in plan]):11.3f}")
    print(f"\n{time.time() - t0:.0f} s; load average {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
