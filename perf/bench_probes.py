"""Probe sweep speed: one-decomposition nested CV vs GridSearchCV inside cross_val_predict, side by side.

    .venv/bin/python perf/bench_probes.py [--prompts 145] [--d 4096] [--layers 31] [--naive-probes 3]

Synthetic activations of realistic shape (145 prompts x 31 sites x 3 positions x d_model 4096, a
planted signal in some layers) and 36-cell targets. Grid: PCA sizes (4, 8, 16, 32, 64) x 15 alphas,
5 outer x 5 inner folds. The fast path runs the full sweep (layers x positions probes); the
straightforward scikit-learn version (StandardScaler -> PCA(svd_solver="full") -> Ridge in
GridSearchCV with the same folds and the same inner criterion, inside cross_val_predict) runs on
the first `--naive-probes` probes only, and the fast path is timed on the same probes for the ratio.
Both R^2 values are printed for those probes; they agree to 1e-9.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=145)
    ap.add_argument("--d", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=31)
    ap.add_argument("--positions", type=int, default=3)
    ap.add_argument("--naive-probes", type=int, default=3)
    args = ap.parse_args()

    from sklearn.decomposition import PCA
    from sklearn.linear_model import Ridge
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GridSearchCV, KFold, cross_val_predict
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    from interp.probes import Grid, nested_cv, pooled_r2

    rng = np.random.default_rng(0)
    n, d = args.prompts, args.d
    y = rng.uniform(size=(n, 36))
    code = rng.normal(size=(36, d)) / 6
    probes = []
    for layer in range(args.layers):
        strength = max(0.0, 1 - abs(layer - args.layers // 2) / (args.layers / 3))
        for _ in range(args.positions):
            probes.append((rng.normal(size=(n, d)) + strength * (y - 0.5) @ code).astype(np.float64))
    grid = Grid()
    seed = 0

    def naive(x: np.ndarray) -> float:
        pipe = Pipeline([("s", StandardScaler()), ("pca", PCA(svd_solver="full")), ("ridge", Ridge())])
        search = GridSearchCV(pipe, {"pca__n_components": list(grid.pca), "ridge__alpha": list(grid.alphas)},
                              cv=KFold(grid.inner, shuffle=True, random_state=seed + 1), scoring=make_scorer(pooled_r2))
        p = cross_val_predict(search, x, y, cv=KFold(grid.outer, shuffle=True, random_state=seed))
        return pooled_r2(y, p)

    k = args.naive_probes
    t = time.perf_counter()
    naive_r2 = [naive(x) for x in probes[:k]]
    t_naive = time.perf_counter() - t
    t = time.perf_counter()
    fast_r2 = [nested_cv(x, y, grid, seed).r2 for x in probes[:k]]
    t_fast = time.perf_counter() - t
    t = time.perf_counter()
    all_r2 = [nested_cv(x, y, grid, seed).r2 for x in probes]
    t_all = time.perf_counter() - t
    print(f"{n} prompts, d_model {d}, {len(probes)} probes ({args.layers} layers x {args.positions} positions), "
          f"grid {len(grid.pca)} PCA sizes x {len(grid.alphas)} alphas, {grid.outer}x{grid.inner} folds")
    print(f"{'probe':>5} {'naive R2':>14} {'fast R2':>14} {'|diff|':>9}")
    for i, (a, b) in enumerate(zip(naive_r2, fast_r2)):
        print(f"{i:>5} {a:14.10f} {b:14.10f} {abs(a - b):9.1e}")
    print(f"first {k} probes: naive {t_naive:.1f} s, fast {t_fast:.2f} s -> {t_naive / t_fast:.1f}x")
    print(f"full sweep, fast: {t_all:.1f} s ({t_all / len(probes):.2f} s per probe); naive extrapolated: "
          f"{t_naive / k * len(probes) / 60:.1f} min; best layer R2 {max(all_r2):.3f}")


if __name__ == "__main__":
    main()
