"""Coverage and size of the many-pair patching inference (`interp.pair_effects.pair_inference`), by simulation.

    .venv/bin/python perf/bench_pair_effects.py [--reps 1000] [--no-organism]

Two tables, nominal 95% intervals and a 0.05 test, the code path `PairScan.to_frame()` runs:

1. **Simulated effects** on designs the method was not tuned to: 15 groups x 10 pairs, 15 groups of unequal sizes
   (3..17), 6 groups x 25, 5 groups x 6 and 30 ungrouped pairs; effects normal, heavy-tailed (t, 3 df) or skewed
   (centred lognormal), each with a group-level random effect (sd 0.5 of the pair-level one). Coverage: the
   interval holds the true mean effect (1.0); size: a mean-0 effect rejected at p <= 0.05.
2. **Real scans** on the xor-planner: 192 clean/corrupt pairs (the colour word flipped), the exact scan at 12 sites
   (resid_pre of every block and the last block's output, at the last token and the one before). The pool's mean is
   the true value; 1,000 draws of 24 pairs (template groups) give the coverage, and the same draws of the effects
   centred on each site's pool mean (the real shape under "no effect") give the size.

Seeded: every rerun prints the same table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interp.pair_effects import pair_inference  # noqa: E402

DESIGNS = {"15 x 10": [10] * 15, "15 unequal (3..17)": list(range(3, 18)), "6 x 25": [25] * 6, "5 x 6": [6] * 5,
           "30 ungrouped": None}


def _noise(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    if kind == "normal":
        return rng.normal(size=n)
    if kind == "t3":
        return rng.standard_t(3, size=n) / np.sqrt(3.0)
    return (rng.lognormal(0.0, 1.0, size=n) - np.exp(0.5)) / np.sqrt((np.e - 1) * np.e)


def simulate(reps: int) -> None:
    print(f"simulated effects, {reps} data sets per cell (nominal 95%, test at 0.05)")
    print(f"{'design':20s} {'effects':8s} {'coverage':>9s} {'size':>6s}")
    for name, sizes in DESIGNS.items():
        for kind in ("normal", "t3", "skewed"):
            rng = np.random.default_rng(20261206)
            cover = reject = 0
            for r in range(reps):
                if sizes is None:
                    g, groups = np.arange(30), None
                    e = _noise(rng, kind, 30)
                else:
                    g = np.repeat(np.arange(len(sizes)), sizes)
                    groups = g
                    e = 0.5 * _noise(rng, kind, len(sizes))[g] + _noise(rng, kind, g.size)
                both = np.stack([1.0 + e, e], axis=1)  # site 0: true mean 1; site 1: true mean 0 (the null)
                inf = pair_inference(both, groups, n_flips=999, seed=r)
                cover += inf.lo[0] <= 1.0 <= inf.hi[0]
                reject += inf.p[1] <= 0.05
            print(f"{name:20s} {kind:8s} {cover / reps:9.3f} {reject / reps:6.3f}")


def organism(reps: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "interp"))
    from interp.runtime import Runtime
    from tests.interp.test_pair_scans import _planner_pairs

    rt = Runtime.load("organism:xor-planner", device="cpu")
    cleans, corrupts, metrics, groups = _planner_pairs(rt, n=192, seed=11)
    n = rt.info.n_layers
    names = [f"blocks.{layer}.hook_resid_pre" for layer in range(n)] + [f"blocks.{n - 1}.hook_resid_post"]
    t0 = time.perf_counter()
    scan = rt.patch_scan(corrupts, cleans, metrics, names, positions=[-2, -1], groups=groups)
    took = time.perf_counter() - t0
    eff = scan.effect.reshape(scan.n_pairs, -1).double().numpy()
    keep = np.abs(eff).max(0) > 1e-4  # sites whose every effect is ~0 have nothing to cover
    eff = eff[:, keep]
    truth = eff.mean(0)
    labels = np.array([hash(g) for g in groups])
    rng = np.random.default_rng(20261207)
    cover = np.zeros(eff.shape[1])
    reject = np.zeros(eff.shape[1])
    for r in range(reps):
        pick = rng.choice(len(eff), size=24, replace=False)
        inf = pair_inference(eff[pick], labels[pick], n_flips=999, seed=r)
        cover += (inf.lo <= truth) & (truth <= inf.hi)
        null = pair_inference(eff[pick] - truth, labels[pick], n_flips=999, seed=r)
        reject += null.p <= 0.05
    print(f"\nreal scans: xor-planner, {scan.n_pairs} pairs scanned at {len(names) * 2} sites in {took:.1f} s; "
          f"{keep.sum()} sites with non-zero effects; {reps} draws of 24 pairs ({len(set(groups))} templates)")
    print(f"{'site':34s} {'pool mean':>10s} {'coverage':>9s} {'size':>6s}")
    sites = [(nm, p) for nm in names for p in (-2, -1)]
    for j, k in enumerate(np.flatnonzero(keep)):
        print(f"{sites[k][0] + ' @ ' + str(sites[k][1]):34s} {truth[j]:10.3f} {cover[j] / reps:9.3f} {reject[j] / reps:6.3f}")
    print(f"{'all sites':34s} {'':10s} {cover.sum() / (reps * len(cover)):9.3f} {reject.sum() / (reps * len(cover)):6.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--no-organism", action="store_true")
    args = ap.parse_args()
    simulate(args.reps)
    if not args.no_organism:
        organism(args.reps)


if __name__ == "__main__":
    main()
