"""Permutation test of the reported best row vs the unpermuted probe sweep, side by side in one run.

    .venv/bin/python perf/bench_permutations.py [--prompts 145] [--layers 65] [--d 5120] [--perms 2500]

The paper's headline test (Exp. 3): Delta R^2 of the best row (layer, k and alpha chosen inside the
folds) against the TF-IDF text baseline, with a permutation test that refits both probes on every
permutation. Shape: 145 prompts x 65 residual sites x d_model 5120 (one position, as one test
uses), 36-cell targets, PCA (4..64) x 15 alphas, 5 outer x 5 inner folds; synthetic activations with a
planted signal in a few layers.

1. The unpermuted sweep: decompositions of every (fold, layer), the 65 per-layer probes, the best
   row, and the text baseline (what the probe stage computes anyway for this position and target).
2. The permutation test: `--perms` permutations of the best-row test and of the text probe, each a
   full nested refit with layer selection, reusing the decompositions of step 1 (`LayerSweep`).
3. A small case checked against the naive refit (a fresh nested CV per permutation): the null values
   and the p-value must be identical.
4. Issue 19: the Delta interval (from the study's own folds: no refit) and the beyond-text test's `--perms`
   Freedman-Lane permutations of each of its two tests (issue 39: the probe's R^2 of the ceiling's residuals, worlds
   from the ceiling's in-sample fit; and the Delta itself, worlds from its cross-fitted values; the decompositions of
   step 1 reused); the total for one target and position (goal: <= 10 minutes).
5. Issue 28: with `--groups G` (default 15, the paper's subcategories; 0: none) steps 1-4 use grouped folds and
   block permutations, as the stage does on grouped prompts, and the stage's extra work is timed too: the
   paper's procedure (prompt-level folds: one more sweep of the probe and the text baseline, and its `--perms`
   permutations) for the Delta row's `paper` field. The decomposition cost grows with the layers, the
   permutations' with the layers too: `--layers 8` times an eighth of the work at the paper's 65.
Prints the times and their ratio.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=145)
    ap.add_argument("--layers", type=int, default=65)
    ap.add_argument("--d", type=int, default=5120)
    ap.add_argument("--perms", type=int, default=2500)
    ap.add_argument("--groups", type=int, default=15, help="prompt groups (0: independent prompts)")
    args = ap.parse_args()

    from interp.probes import Grid, LayerSweep, nested_cv_layers, perm_p, permutations, pooled_r2

    rng = np.random.default_rng(0)
    n, L, d = args.prompts, args.layers, args.d
    f = rng.normal(size=(n, 6))
    y = np.clip(f @ rng.normal(size=(6, 36)) * 0.1 + 0.3 + rng.normal(scale=0.05, size=(n, 36)), 0, 1)
    mix = rng.normal(size=(6, d)).astype(np.float32)
    xs = []
    for layer in range(L):
        x = rng.normal(size=(n, d)).astype(np.float32)
        if L // 3 <= layer < L // 2:
            x += 2 * (f @ mix).astype(np.float32)
        xs.append(x)
    text = (rng.random((n, 400)) < 0.03).astype(np.float64)  # a sparse bag-of-words stand-in
    grid = Grid()
    groups = np.arange(n) % args.groups if args.groups else None
    from interp.grouping import design

    dsg = design(groups, grid)  # the stage's grouping design (issue 39): folds, and the permutation scheme
    grid = dsg.grid
    print(f"shape: {n} prompts x {L} layers x d_model {d}, 36 outputs, grid {len(grid.pca)} PCA x {len(grid.alphas)} alphas, "
          f"{grid.outer}x{grid.inner} folds; {os.cpu_count()} cores; load {os.getloadavg()[0]:.2f}")

    t0 = time.perf_counter()
    sweep = LayerSweep(xs, grid, seed=0, groups=groups)
    per_layer = [sweep.layer(y, li).r2 for li in range(L)]
    best = sweep.best(y)
    tsweep = LayerSweep([text], grid.with_full(), seed=0, groups=groups)  # the stage's baseline grid (issue 39)
    text_r2 = tsweep.layer(y, 0).r2
    t_sweep = time.perf_counter() - t0
    delta = best.r2 - text_r2
    print(f"unpermuted sweep: {t_sweep:.1f} s (best row R^2 {best.r2:.3f}, text {text_r2:.3f}, "
          f"max per-layer {max(per_layer):.3f}, Delta {delta:.3f})")

    perms = dsg.permutations(n, args.perms, 1)
    print(f"grouping: {dsg.procedure}, permutations: {dsg.scheme}")
    t0 = time.perf_counter()
    null_act = sweep.permuted_r2(y, perms)
    null_text = tsweep.permuted_r2(y, perms)
    t_perm = time.perf_counter() - t0
    null = null_act - null_text
    p = perm_p(null, delta)
    print(f"{args.perms} permutations of the best-row Delta test (both probes refitted): {t_perm:.1f} s; "
          f"p = {p:.5f} (smallest possible {1 / (1 + args.perms):.5f}); null mean {null.mean():.4f}")
    print(f"ratio permutations / sweep: {t_perm / t_sweep:.2f}x (goal <= 3x)")

    # issue 19: the interval of every row (no extra fit: the study's own folds) and the beyond-text test, whose
    # Freedman-Lane permutations refit both probes on fitted values + permuted residuals of the strongest baseline
    from interp.baselines import both_p, ceiling_fit, freedman_lane, residual_test
    from interp.intervals import delta_interval, fold_sums, test_over_train

    t0 = time.perf_counter()
    sse_b, sst = fold_sums(y, best.pred, sweep.outer)
    sse_t, _ = fold_sums(y, tsweep.layer(y, 0).pred, sweep.outer)
    iv = delta_interval(sse_b[None], sse_t[None], sst[None], n, test_over_train(n, grid.outer))
    t_iv = time.perf_counter() - t0
    t0 = time.perf_counter()
    # the stage's test (issue 39): two of one null, both must reject - the probe's R^2 of the ceiling's residuals
    # (worlds from its in-sample fit) and the Delta itself (worlds from its cross-fitted values)
    perms_fl = dsg.permutations(n, args.perms, 3)
    fitted = ceiling_fit(text, y, grid.with_full(), 0, groups)
    p_res, _, _ = residual_test(sweep, tsweep, fitted, y, perms_fl)
    p_del, _ = freedman_lane(sweep, tsweep, tsweep.layer(y, 0).pred, y, delta, args.perms, seed=3, perms=perms_fl)
    p_fl = both_p(p_del, p_res)
    t_fl = time.perf_counter() - t0
    t_paper = 0.0
    if groups is not None:  # the Delta row's `paper` field: the paper's procedure, prompt-level folds and permutations
        t0 = time.perf_counter()
        psweep, ptext = LayerSweep(xs, grid, seed=0), LayerSweep([text], grid.with_full(), seed=0)
        pd = psweep.best(y).r2 - ptext.layer(y, 0).r2
        pp = permutations(n, args.perms, seed=1)
        p_paper = perm_p(psweep.permuted_r2(y, pp) - ptext.permuted_r2(y, pp), pd)
        t_paper = time.perf_counter() - t0
        print(f"the paper's procedure beside it (a second sweep and {args.perms} permutations): {t_paper:.1f} s; "
              f"Delta {pd:.3f}, p = {p_paper:.5f}")
    print(f"Delta interval (corrected K-fold variance): [{iv.lo:.3f}, {iv.hi:.3f}] in {t_iv * 1e3:.1f} ms")
    print(f"2 x {args.perms} Freedman-Lane permutations of the beyond-text test (its two tests): {t_fl:.1f} s; "
          f"p = {p_fl:.5f}")
    total = t_sweep + t_perm + t_iv + t_fl + t_paper
    print(f"one target and position with every test: {total:.1f} s = {total / 60:.1f} min (goal <= 10 min); "
          f"load {os.getloadavg()[0]:.2f} at the end")

    # identical p to a naive refit on a small case
    small = Grid(pca=(2, 4, 8), alphas=(0.1, 1.0, 10.0, 100.0), outer=5, inner=4)
    xs_s = [x[:40, :50].astype(np.float64) for x in xs[L // 3: L // 3 + 4]]
    y_s = y[:40]
    obs = nested_cv_layers(xs_s, y_s, small, 0).r2
    ps = permutations(40, 30, seed=2)
    naive = np.array([nested_cv_layers(xs_s, y_s[pp], small, 0).r2 for pp in ps])
    fast = LayerSweep(xs_s, small, 0).permuted_r2(y_s, ps)
    print(f"small case (40 prompts, 4 layers, 30 permutations): max |naive - fast| = {np.abs(naive - fast).max():.2e}; "
          f"p naive {perm_p(naive, obs):.4f}, p fast {perm_p(fast, obs):.4f}, identical: {perm_p(naive, obs) == perm_p(fast, obs)}")


if __name__ == "__main__":
    main()
