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

Issue 39: every setting runs the probe stage's own grid (PCA 4..64, 15 alphas, 5 x 5 folds; `ProbeSettings().grid`)
and its code path (`interp.grouping.design`, the baselines with every component); `--grid reduced` runs the grid of
the tables before (PCA 2..16, 7 alphas), and every table says which. The clustered populations add unequal families
(sizes 3..17), few families (6 x 25) and a family-level effect with distinct sizes; an interval where both probes
predict the mean is counted as "no signal" (the stage prints no interval there) and coverage is given over the rest
and over all. `--only text`: the beyond-text test on activations that hold one text feature exactly (a word's
place, the word count and its parity, the order of two words, the XOR of two words), on words only, and on a hidden
plan: the share of p <= 0.05 and of the verdict "beyond these text features" (p <= 0.05 and the text features
reproducing less than READABLE_MAX of what the probe decodes).

    .venv/bin/python perf/bench_coverage.py [--reps 200] [--workers 2] [--family-reps 200] [--only families|designs|text]
        [--grid stage|reduced]

Seeded: the same table on every run. Monte Carlo error of a coverage over R data sets: sqrt(p(1-p)/R)
(1.5 points at 95% and R = 200).
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

#: the reduced grid of the tables before issue 39 (`--grid reduced`); the default is the stage's (`_stage_grid`)
REDUCED = dict(pca=(2, 4, 8, 16), alphas=tuple(float(a) for a in np.logspace(-2, 4, 7)), outer=5, inner=5)
GRID_ARGS: dict = {}  # set by main(): the grid every worker builds (passed in each job)


def _grid(args: dict):
    from experiments.stages.probe import ProbeSettings
    from interp.probes import Grid

    return Grid(**args) if args else ProbeSettings().grid


TEXT = dict(seed=1, vocab=20, words=4, relevant=2, text_share=0.3, act_noise=0.3)


def _intervals(job: tuple[str, int, int, int]) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.simulate import Population, interval_replications

    kind, n, reps, seed = job
    with threadpool_limits(1):
        return job, interval_replications(Population(kind, seed=1), n, reps, _grid(GRID_ARGS), seed=seed)


def _truth(job: tuple[str, int]) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.simulate import Population, expected_r2

    kind, n = job
    with threadpool_limits(1):
        return job, expected_r2(Population(kind, seed=1), n - n // 5, ["resid", "tfidf"], _grid(GRID_ARGS), draws=40)


def _beyond(job: tuple[str, int, int, int, int]) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.simulate import Population, beyond_text_replications

    kind, n, reps, n_perm, seed = job
    grid = _grid(GRID_ARGS)
    with threadpool_limits(1):
        return job, beyond_text_replications(Population(kind, **TEXT), n, reps, grid, n_perm, seed=seed)


FAMILY_N = 150  # 15 families x 10 prompts, the paper's layout prompts
#: the designs of prompt families (issue 39: the grouping must hold on designs it was not tuned to)
DESIGNS = {"15 x 10": dict(family_size=10), "sizes 3..17": dict(family_size=1, family_sizes=tuple(range(3, 18))),
           "6 x 25": dict(family_size=25)}
#: (population kind, family effect, design) of the clustered settings
SETTINGS = [("null", "independent", "15 x 10"), ("null", "independent", "sizes 3..17"), ("null", "independent", "6 x 25"),
            ("null", "shared", "15 x 10"), ("null", "shared", "sizes 3..17"), ("planted", "independent", "15 x 10")]
LABELS = {("null", "independent"): "family null", ("null", "shared"): "family-level effect",
          ("planted", "independent"): "prompt-level plan + families"}


def _pop(kind: str, family: str, dsg: str):
    from interp.simulate import Population

    return Population(kind, seed=1, family=family, **DESIGNS[dsg])


def _family_truth(job: tuple) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.simulate import expected_r2

    kind, family, dsg, draws = job
    with threadpool_limits(1):
        return job[:3], expected_r2(_pop(kind, family, dsg), FAMILY_N - FAMILY_N // 5, ["resid", "tfidf"],
                                    _grid(GRID_ARGS), draws=draws, n_full=FAMILY_N)


def _family_intervals(job: tuple) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.simulate import interval_replications

    kind, family, dsg, grouped, reps, seed = job
    with threadpool_limits(1):
        return job, interval_replications(_pop(kind, family, dsg), FAMILY_N, reps, _grid(GRID_ARGS), seed=seed,
                                          grouped=grouped)


def _family_tests(job: tuple) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.simulate import delta_test_replications

    kind, family, dsg, procedure, reps, n_perm, seed = job
    with threadpool_limits(1):
        return job, delta_test_replications(_pop(kind, family, dsg), FAMILY_N, reps, _grid(GRID_ARGS), n_perm, seed=seed,
                                            procedure=procedure)


def families(ex, reps: int, n_perm: int, draws: int = 40, chunks: int = 4, paper: bool = True) -> None:
    """The clustered settings (issues 28, 39), printed: interval coverage per design, with the intervals where both
    probes predict the mean ("no signal") counted apart; the headline test's size and power per design."""
    truth = dict(ex.map(_family_truth, [(*k, draws) for k in SETTINGS]))
    procs = (True, False) if paper else (True,)
    ijobs = [(*k, g, c, 300 + sum(_split(reps, chunks)[:i])) for k in SETTINGS for g in procs
             for i, c in enumerate(_split(reps, chunks))]
    got: dict[tuple, list] = {}
    for (k, f, d, g, _, _), rows in ex.map(_family_intervals, ijobs):
        got.setdefault((k, f, d, g), []).extend(rows)
    tjobs = []
    for k, f, d in SETTINGS:
        tests = ("grouped", "same-size", "paper") if (k, f) == ("null", "independent") and paper else ("grouped",)
        if d == "sizes 3..17" and (k, f) == ("null", "shared"):
            tests = ("grouped", "same-size")  # power against a family-level effect, and the stage before issue 39
        count = reps if k == "null" else max(1, reps // 2)
        tjobs += [(k, f, d, proc, c, n_perm, 700 + sum(_split(count, chunks)[:i]))
                  for proc in tests for i, c in enumerate(_split(count, chunks))]
    tests_got: dict[tuple, list] = {}
    for (k, f, d, proc, *_), rows in ex.map(_family_tests, tjobs):
        tests_got.setdefault((k, f, d, proc), []).extend(rows)
    grid = _grid(GRID_ARGS)
    print(f"prompts in families, n = {FAMILY_N}; grid: {'reduced (PCA 2..16, 7 alphas)' if GRID_ARGS else 'the stage grid'} "
          f"(PCA {grid.pca}, {len(grid.alphas)} alphas, {grid.outer}x{grid.inner} folds asked); estimand of the grouped "
          f"procedure: expected R^2 on new prompts of new families ({draws} training sets)")
    print(f"{'population':28s} {'design':12s} {'procedure':15s} {'reps':>5s} {'stat':5s} {'truth':>7s} {'no sig':>6s} "
          f"{'cover':>6s} {'cov all':>7s} {'width':>6s} {'excl 0':>6s} {'mean est':>8s}")
    for k, f, d in SETTINGS:
        t = truth[(k, f, d)]
        for g in procs:
            rows = got[(k, f, d, g)]
            proc = rows[0]["procedure"] if g else "paper"
            for stat, key, tv in (("R^2", "new_r2", t["resid"]), ("Delta", "new_delta", t["resid"] - t["tfidf"])):
                ivs = [r[key] for r in rows]
                flat = np.array([stat == "Delta" and r["at_mean"] for r in rows])
                cov = np.array([i.lo <= tv <= i.hi for i in ivs])
                kept = cov[~flat]
                print(f"{LABELS[(k, f)]:28s} {d:12s} {proc:15s} {len(rows):5d} {stat:5s} {tv:7.3f} {flat.mean():6.3f} "
                      f"{kept.mean() if kept.size else float('nan'):6.3f} {cov.mean():7.3f} "
                      f"{np.mean([i.hi - i.lo for i in ivs]):6.3f} {np.mean([i.lo > 0 or i.hi < 0 for i in ivs]):6.3f} "
                      f"{np.mean([i.value for i in ivs]):8.3f}")
    print("  (no sig: the probe predicts the mean, the stage reports \"no signal\" and no Delta interval; cover: over the "
          "rest; cov all: over every data set)")
    print()
    print(f"headline Delta test (vs TF-IDF), {n_perm} permutations: share of p <= 0.05")
    print(f"{'population':28s} {'design':12s} {'procedure':44s} {'reps':>5s} {'p<=.05':>7s} {'moved':>6s} {'mean Delta':>10s}")
    names = {"grouped": "the stage's grouping design", "same-size": "grouped, blocks only among equal sizes (before)",
             "paper": "the paper's (prompt-level folds, perms)"}
    for (k, f, d, proc), rows in tests_got.items():
        scheme = {r["scheme"] for r in rows} if proc == "grouped" else set()
        label = names[proc] + (f" ({', '.join(sorted(scheme))})" if scheme else "")
        moved = [r["moved"] for r in rows if r["moved"] is not None]
        print(f"{LABELS[(k, f)]:28s} {d:12s} {label:44s} {len(rows):5d} {np.mean([r['p'] <= 0.05 for r in rows]):7.3f} "
              f"{np.mean(moved) if moved else float('nan'):6.3f} {np.mean([r['delta'] for r in rows]):10.3f}")


TEXT_POP = dict(seed=1, vocab=20, words=6, relevant=2, text_share=0.3, act_noise=0.3)
TEXT_KINDS = ("text-place", "text-count", "text-order", "text-cooccur", "text-only", "planted")
#: the beyond-text test's ceilings: the stage's (every lexical reading's whole design, ridge with every component, and
#: its SCREEN most associated columns), and the whole designs alone (the test before the screened ceilings)
TEXT_VARIANTS = {"stage": ("full", True, "both"), "residual": ("full", True, "residual"),
                 "difference": ("full", True, "difference"), "whole": ("full", False, "difference")}
TEXT_LABELS = {"stage": "both, whole + screened (stage)", "residual": "residual alone, whole + screened",
               "difference": "Delta alone, whole + screened (before)", "whole": "Delta alone, whole designs (before)"}


def _text(job: tuple) -> tuple:
    from threadpoolctl import threadpool_limits

    from interp.simulate import Population, beyond_text_replications

    kind, n, reps, n_perm, seed, variant = job
    bgrid, screened, statistic = TEXT_VARIANTS[variant]
    with threadpool_limits(1):
        return job, beyond_text_replications(Population(kind, **TEXT_POP), n, reps, _grid(GRID_ARGS), n_perm, seed=seed,
                                             baseline_grid=bgrid, screened=screened, statistic=statistic)


def text_features(ex, reps: int, n_perm: int, n: int = 80, chunks: int = 4, seed0: int = 500,
                  variants: tuple[str, ...] = tuple(TEXT_VARIANTS)) -> None:
    """The beyond-text test where the activations hold one text feature exactly (issue 39), printed."""
    from interp.baselines import READABLE_MAX

    jobs = [(k, n, c, n_perm, seed0 + sum(_split(reps, chunks)[:i]), v) for k in TEXT_KINDS for v in variants
            for i, c in enumerate(_split(reps, chunks))]
    got: dict[tuple, list] = {}
    for (k, _, _, _, _, bg), rows in ex.map(_text, jobs):
        got.setdefault((k, bg), []).extend(rows)
    print(f"beyond-text test (Freedman-Lane vs the strongest baseline: the stage's p, the larger of the Delta test's and "
          f"the residual test's, beside each alone), n = {n}, {n_perm} permutations, seeds {seed0}..; "
          f"verdict 'beyond these text features' = p <= 0.05 and text-readable share < {READABLE_MAX}")
    print(f"{'activations hold':16s} {'statistic, ceilings':34s} {'sets':>5s} {'p<=.05':>7s} {'verdict':>7s} {'readable':>8s} "
          f"{'beyond':>7s} ceilings")
    for (k, bg), rows in got.items():
        p = np.array([r["p_fl"] for r in rows])
        rd = np.array([r["text_readable"] for r in rows])
        tops: dict[str, int] = {}
        for r in rows:
            tops[r["baseline"]] = tops.get(r["baseline"], 0) + 1
        print(f"{k:16s} {TEXT_LABELS[bg]:34s} {len(rows):5d} "
              f"{np.mean(p <= 0.05):7.3f} {np.mean((p <= 0.05) & (rd < READABLE_MAX)):7.3f} "
              f"{np.min(rd):.2f}-{np.max(rd):.2f} {np.mean([r['beyond'] for r in rows]):7.3f} {tops}")


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
    ap.add_argument("--only", choices=("all", "families", "text"), default="all",
                    help="families: the clustered settings only; text: the text-feature known answers only")
    ap.add_argument("--text-sets", type=int, default=40, help="data sets per text-feature population")
    ap.add_argument("--grid", choices=("stage", "reduced"), default="stage",
                    help="stage: the probe stage's grid (default); reduced: the grid of the tables before issue 39")
    ap.add_argument("--no-paper", action="store_true", help="leave out the paper's and the old procedures")
    ap.add_argument("--text-seed", type=int, default=500, help="first data set seed of the text-feature populations")
    ap.add_argument("--text-variants", default=",".join(TEXT_VARIANTS),
                    help=f"comma-separated, of {', '.join(TEXT_VARIANTS)} (stage: the stage's test)")
    a = ap.parse_args()
    GRID_ARGS.update(REDUCED if a.grid == "reduced" else {})
    t0, load0 = time.time(), os.getloadavg()[0]
    if a.only == "text":
        with ProcessPoolExecutor(a.workers) as ex:
            text_features(ex, a.text_sets, a.family_perm, seed0=a.text_seed, variants=tuple(a.text_variants.split(",")))
        print(f"\n{time.time() - t0:.0f} s with {a.workers} workers; load average {load0:.2f} at the start, "
              f"{os.getloadavg()[0]:.2f} at the end")
        return
    if a.only == "families":
        with ProcessPoolExecutor(a.workers) as ex:
            families(ex, a.family_reps, a.family_perm, a.truth_draws, paper=not a.no_paper)
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
