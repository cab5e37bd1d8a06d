"""Coverage of the probe stage's intervals and calibration of its tests, by simulation (issue 19).

Simulated studies whose answers are constructed (`interp.simulate`): for each setting, many data sets of n
prompts drawn from one population. Printed side by side in one run, per setting:
- the interval the probe stage reports (`interp.intervals`: the Nadeau-Bengio corrected K-fold variance) and
  the prompt bootstrap of fixed out-of-fold predictions it reported before: coverage of the estimand (the
  expected R^2 of the procedure trained on (K-1)/K of n prompts, computed on fresh prompts by
  `simulate.expected_r2`), mean width, and with nothing planted the share of Delta intervals that exclude 0;
- the beyond-text test (Freedman-Lane against the strongest lexical baseline) beside the paper's permutation
  test of Delta against TF-IDF: the share of p <= 0.05 when the activations hold only the prompt's words, and
  of p < 0.01 when they hold a hidden plan.
Goals (issue 19): coverage >= 93% at nominal 95%, null intervals exclude 0 in <= 6%, text-only p <= 0.05 in
<= 6% of >= 100 data sets, planted p < 0.01.

Prompts in families (issue 28), at the paper's 15 subcategories x 10 prompts: a family null (activations and
targets carry independent family effects), a shared family latent (one family effect in both), and a planted
prompt-level plan with independent family effects. Printed: coverage of the grouped procedure's intervals for its
estimand (new prompts of new families) beside the paper's procedure (prompt-level folds and sums); the share of
p <= 0.05 of the headline Delta test under the family null for grouped folds with whole-block + within-block
permutations (the stage's), grouped folds with within-block permutations only, and the paper's procedure; and
the power (p <= 0.05) on the planted plan, grouped beside the paper's. Goals: coverage >= 93%, p <= 0.05 in 3-7%
under the family null.

    .venv/bin/python perf/bench_coverage.py [--reps 200] [--workers 2] [--family-reps 200] [--only families]

Seeded: the same table on every run. Monte Carlo error of a coverage over R data sets: sqrt(p(1-p)/R)
(1.5 points at 95% and R = 200).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

GRID_ARGS = dict(pca=(2, 4, 8, 16), alphas=tuple(float(a) for a in np.logspace(-2, 4, 7)), outer=5, inner=5)
TEXT = dict(seed=1, vocab=20, words=4, relevant=2, text_share=0.3, act_noise=0.3)


def _intervals(job: tuple[str, int, int, int]) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.probes import Grid
    from interp.simulate import Population, interval_replications

    kind, n, reps, seed = job
    with threadpool_limits(1):
        return job, interval_replications(Population(kind, seed=1), n, reps, Grid(**GRID_ARGS), seed=seed)


def _truth(job: tuple[str, int]) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.probes import Grid
    from interp.simulate import Population, expected_r2

    kind, n = job
    with threadpool_limits(1):
        return job, expected_r2(Population(kind, seed=1), n - n // 5, ["resid", "tfidf"], Grid(**GRID_ARGS), draws=40)


def _beyond(job: tuple[str, int, int, int, int]) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.probes import Grid
    from interp.simulate import Population, beyond_text_replications

    kind, n, reps, n_perm, seed = job
    grid = Grid(**{**GRID_ARGS, "pca": (2, 4, 8, 16, 32)})
    with threadpool_limits(1):
        return job, beyond_text_replications(Population(kind, **TEXT), n, reps, grid, n_perm, seed=seed)


FAMILY = dict(seed=1, family_size=10)
FAMILY_N = 150  # 15 families x 10 prompts, the paper's layout prompts


def _family_truth(job: tuple[str, str, int]) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.probes import Grid
    from interp.simulate import Population, expected_r2

    kind, family, draws = job
    with threadpool_limits(1):
        return job[:2], expected_r2(Population(kind, family=family, **FAMILY), FAMILY_N - FAMILY_N // 5, ["resid", "tfidf"],
                                    Grid(**GRID_ARGS), draws=draws)


def _family_intervals(job: tuple[str, str, bool, int, int]) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.probes import Grid
    from interp.simulate import Population, interval_replications

    kind, family, grouped, reps, seed = job
    with threadpool_limits(1):
        return job, interval_replications(Population(kind, family=family, **FAMILY), FAMILY_N, reps, Grid(**GRID_ARGS),
                                          seed=seed, grouped=grouped)


def _family_tests(job: tuple[str, str, str, int, int, int]) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.probes import Grid
    from interp.simulate import Population, delta_test_replications

    kind, family, procedure, reps, n_perm, seed = job
    with threadpool_limits(1):
        return job, delta_test_replications(Population(kind, family=family, **FAMILY), FAMILY_N, reps, Grid(**GRID_ARGS),
                                            n_perm, seed=seed, procedure=procedure)


def families(ex, reps: int, n_perm: int, draws: int = 40, chunks: int = 4) -> None:
    """The clustered settings (issue 28), printed."""
    pops = [("null", "independent"), ("null", "shared"), ("planted", "independent")]
    truth = dict(ex.map(_family_truth, [(k, f, draws) for k, f in pops]))
    ijobs = [(k, f, g, c, 300 + sum(_split(reps, chunks)[:i])) for k, f in pops for g in (True, False)
             for i, c in enumerate(_split(reps, chunks))]
    got: dict[tuple, list] = {}
    for (k, f, g, _, _), rows in ex.map(_family_intervals, ijobs):
        got.setdefault((k, f, g), []).extend(rows)
    tjobs = [("null", "independent", proc, c, n_perm, 700 + sum(_split(reps, chunks)[:i]))
             for proc in ("grouped", "within", "paper") for i, c in enumerate(_split(reps, chunks))]
    tjobs += [("planted", "independent", proc, c, n_perm, 900 + sum(_split(max(1, reps // 2), chunks)[:i]))
              for proc in ("grouped", "paper") for i, c in enumerate(_split(max(1, reps // 2), chunks))]
    tests: dict[tuple, list] = {}
    for (k, f, proc, *_), rows in ex.map(_family_tests, tjobs):
        tests.setdefault((k, f, proc), []).extend(rows)
    print(f"prompts in families: {FAMILY_N // FAMILY['family_size']} x {FAMILY['family_size']}; estimand of the grouped "
          f"procedure: expected R^2 on new prompts of new families (trained on 12 whole families; {draws} draws)")
    print(f"{'population':30s} {'procedure':9s} {'reps':>5s} {'stat':5s} {'truth':>7s} {'cover':>6s} {'width':>6s} "
          f"{'excl 0':>6s} {'mean est':>8s}")
    for k, f in pops:
        label = {("null", "independent"): "family null (independent)", ("null", "shared"): "shared family latent",
                 ("planted", "independent"): "prompt-level plan + families"}[(k, f)]
        t = truth[(k, f)]
        for g in (True, False):
            rows = got[(k, f, g)]
            for stat, key, tv in (("R^2", "new_r2", t["resid"]), ("Delta", "new_delta", t["resid"] - t["tfidf"])):
                ivs = [r[key] for r in rows]
                print(f"{label:30s} {'grouped' if g else 'paper':9s} {len(rows):5d} {stat:5s} {tv:7.3f} "
                      f"{np.mean([i.lo <= tv <= i.hi for i in ivs]):6.3f} {np.mean([i.hi - i.lo for i in ivs]):6.3f} "
                      f"{np.mean([i.lo > 0 or i.hi < 0 for i in ivs]):6.3f} {np.mean([i.value for i in ivs]):8.3f}")
    print()
    print(f"headline Delta test (vs TF-IDF), {n_perm} permutations: share of p <= 0.05")
    print(f"{'population':30s} {'procedure':40s} {'reps':>5s} {'p<=.05':>7s} {'mean Delta':>10s}")
    names = {"grouped": "grouped folds, whole + within-block perms", "within": "grouped folds, within-block perms only",
             "paper": "the paper's (prompt-level folds, perms)"}
    for (k, f, proc), rows in tests.items():
        label = "family null (independent)" if k == "null" else "prompt-level plan + families"
        print(f"{label:30s} {names[proc]:40s} {len(rows):5d} {np.mean([r['p'] <= 0.05 for r in rows]):7.3f} "
              f"{np.mean([r['delta'] for r in rows]):10.3f}")


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200, help="data sets per setting (n = 145 gets half)")
    ap.add_argument("--text-reps", type=int, default=100, help="data sets of the text-only beyond-text check")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--family-reps", type=int, default=200, help="data sets per clustered setting (issue 28)")
    ap.add_argument("--family-perm", type=int, default=99, help="permutations per clustered test")
    ap.add_argument("--truth-draws", type=int, default=40, help="training sets behind each clustered estimand")
    ap.add_argument("--only", choices=("all", "families"), default="all", help="families: the clustered settings only")
    a = ap.parse_args()
    t0, load0 = time.time(), os.getloadavg()[0]
    if a.only == "families":
        with ProcessPoolExecutor(a.workers) as ex:
            families(ex, a.family_reps, a.family_perm, a.truth_draws)
        print(f"\n{time.time() - t0:.0f} s with {a.workers} workers; load average {load0:.2f} at the start, "
              f"{os.getloadavg()[0]:.2f} at the end")
        return
    settings = [("planted", 60), ("null", 60), ("planted", 145), ("null", 145)]
    jobs = []
    for kind, n in settings:
        reps = a.reps if n == 60 else max(1, a.reps // 2)
        chunks = _split(reps, 4)
        jobs += [(kind, n, c, 100 + sum(chunks[:i])) for i, c in enumerate(chunks)]
    with ProcessPoolExecutor(a.workers) as ex:
        truth = dict(ex.map(_truth, settings))
        got: dict[tuple[str, int], list] = {}
        for (kind, n, _, _), rows in ex.map(_intervals, jobs):
            got.setdefault((kind, n), []).extend(rows)
        bjobs = [("text-only", 80, c, 99, 500 + sum(_split(a.text_reps, 4)[:i])) for i, c in enumerate(_split(a.text_reps, 4))]
        bjobs += [("planted", 80, 10, 199, 900)]
        beyond: dict[str, list] = {}
        for (kind, *_), rows in ex.map(_beyond, bjobs):
            beyond.setdefault(kind, []).extend(rows)

    def cov(rows, key, t):
        cis = [(r[key].lo, r[key].hi) if hasattr(r[key], "lo") else r[key] for r in rows]
        return np.mean([lo <= t <= hi for lo, hi in cis]), np.mean([hi - lo for lo, hi in cis]), \
            np.mean([lo > 0 or hi < 0 for lo, hi in cis])

    print(f"coverage of nominal 95% intervals (estimand: expected R^2 of the procedure trained on 4/5 of n prompts)")
    print(f"{'setting':16s} {'reps':>5s} {'statistic':9s} {'truth':>7s} | {'new: cover':>10s} {'width':>6s} {'excl 0':>6s} | "
          f"{'old: cover':>10s} {'width':>6s} {'excl 0':>6s}")
    for kind, n in settings:
        rows, t = got[(kind, n)], truth[(kind, n)]
        for stat, new, old, tv in (("R^2", "new_r2", "old_r2", t["resid"]),
                                   ("Delta", "new_delta", "old_delta", t["resid"] - t["tfidf"])):
            c1, w1, e1 = cov(rows, new, tv)
            c0, w0, e0 = cov(rows, old, tv)
            # "excl 0" is the null's false-positive rate of a Delta interval; an expected R^2 is negative with nothing
            # to find, so an R^2 interval may rightly exclude 0
            e1s, e0s = (f"{e1:6.3f}", f"{e0:6.3f}") if stat == "Delta" else ("     -", "     -")
            print(f"{kind + ' n=' + str(n):16s} {len(rows):5d} {stat:9s} {tv:7.3f} | {c1:10.3f} {w1:6.3f} {e1s} | "
                  f"{c0:10.3f} {w0:6.3f} {e0s}")
    print()
    print("beyond-text test (Freedman-Lane vs the strongest lexical baseline) beside the paper's Delta test (vs TF-IDF)")
    print(f"{'activations hold':22s} {'sets':>5s} {'beyond-text Delta':>18s} {'FL p<=.05':>10s} {'FL p<.01':>9s} | "
          f"{'paper Delta':>11s} {'p<=.05':>7s}")
    for kind, label in (("text-only", "only the prompt's words"), ("planted", "a hidden plan too")):
        rows = beyond[kind]
        p_fl = np.array([r["p_fl"] for r in rows])
        p_pa = np.array([r["p_paper"] for r in rows])
        print(f"{label:22s} {len(rows):5d} {np.mean([r['beyond'] for r in rows]):18.3f} {np.mean(p_fl <= 0.05):10.3f} "
              f"{np.mean(p_fl < 0.01):9.3f} | {np.mean([r['paper_delta'] for r in rows]):11.3f} {np.mean(p_pa <= 0.05):7.3f}")
    print()
    with ProcessPoolExecutor(a.workers) as ex:
        families(ex, a.family_reps, a.family_perm, a.truth_draws)
    print(f"\n{time.time() - t0:.0f} s with {a.workers} workers; load average {load0:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
