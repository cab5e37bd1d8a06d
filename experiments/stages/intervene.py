"""Interventions (Exp. 3, stage 2): splice coordinates into a model's own code and watch it continue.

Interventions are per task (layout by default, as the paper). Sources: every valid canvas attempt of
the model on the task, greedy and sampled (the paper's 731 generations for two models need them), that
has a spliceable drawing statement. The cut is after the last spliceable top-level drawing statement
(the completed picture, as in the paper; `cut="all"` cuts after each one). Every source attempt and cut
is recorded in `RUN/intervention_cuts.jsonl` with whether its statement carries a same-line comment
(kept byte-identical when the statement moves, and flagged: the paper stratified comments), whether
the program had more code after the cut, the splice identity check of each moved arm, or the reason it
was excluded (no spliceable statement, e.g. code inside a `def`; no qualifying displacement; a splice
error). For each cut, the four arms of `bench.intervene.splice.cut_arms`; for each arm, N continuations
(paper: 9), seeded by sha256(run seed, attempt key, cut, arm, k), sampled at the generation temperature through
`Runtime.continue_batch`, which computes the shared prefix (prompt + code before the cut statement)
once for all arms and continuations of a cut. A continuation *continued drawing* when it emits at
least one more primitive call before its code block closes.

Model input for an arm: the prompt's tokens, then the answer text up to the cut with the arm's
statement, tokenised in two pieces (the code before the cut statement, then the statement line) so
that every arm shares the first piece. Rows go to `RUN/interventions.jsonl`, one per continuation,
written a cut at a time, keyed by the whole attempt key (model, task, protocol, medium, prompt, sample)
and the cut: resumable (finished cuts are skipped), and two models' cuts never shadow each other.

The cut plan and the model input of an arm (`plan_cuts`, `cut_tokens`) live one floor down in
`experiments.cuts`, shared with the patch stage; the patching table in `experiments.patching_table`.

`ambench patch` (`patch_stage`) goes beyond the paper: for cuts whose moved and as-is statement
lines have the same number of tokens, it replaces the residual stream (resid_pre of layer L) at
the statement's token positions of one arm with the other arm's, for every layer L, and samples
continuations; the continuation rate per layer shows which layers carry the geometric state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bench.intervene.splice import ARMS, continued_drawing
from bench.sandbox.boundary import clean_text
from experiments.cuts import EXCLUSIONS, cut_tokens, plan_cuts, prompt_items, protocol_from_label
from experiments.patching_table import patching_table, plot_patching
from experiments.rates import cluster_ci
from experiments.rundir import AttemptKey, RunDir, RunError, content_hash, derive_seed, reading, writing

INTERVENTIONS = RunDir.INTERVENTIONS
CUTS = RunDir.CUTS


@dataclass(frozen=True)
class InterveneSettings:
    """How the intervention stage samples continuations (paper: 9 per arm at the generation temperature)."""

    task: str = "layout"  #: interventions are per task; the paper's are on layout attempts
    arms: tuple[str, ...] = ARMS  #: which of the four arms to continue
    continuations: int = 9  #: continuations per arm and cut
    temperature: float = 0.7  #: sampling temperature of the continuations
    max_new_tokens: int = 96  #: tokens per continuation
    seed: int = 0  #: every continuation's seed derives from it, the attempt key, the cut, the arm and k
    cut: str = "last"  #: "last" (after the completed picture, as the paper) or "all" spliceable statements
    samples: tuple[int, ...] | None = None  #: which attempts are sources (None: all valid ones, greedy and sampled)
    limit: int | None = None  #: only the first N cuts (None: all)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)



def _write_records(rd: RunDir, model: str, task: str, records: list[dict[str, Any]]) -> None:
    """RUN/intervention_cuts.jsonl: this model and task's records replace its earlier ones (the plan is a
    function of the generations and renders, so a rerun writes the same rows)."""
    keep = [x for x in rd.rows(CUTS) if (x["model"], x["task"]) != (model, task)]
    rd.write_rows(CUTS, keep + records)


def cut_input(c: dict[str, Any], s: Any) -> str:
    """What a cut's continuations are made from: the source answer, the arms' texts and the settings."""
    return content_hash(c["answer"], [(a.arm, a.prefix) for a in c["arms"]], s.continuations, s.temperature, s.max_new_tokens, s.seed)


def intervene_stage(rt: Any, run: Any, model: str | None = None, s: InterveneSettings = InterveneSettings(),
                    progress: Callable[[int], None] | None = None, shard: tuple[int, int] | None = None,
                    say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Continuations for every cut's arms into RUN/interventions.jsonl; returns counts computed from the rows
    on disk. Work units are the cuts in plan order: resumable (a cut whose rows were made from the same
    inputs, all of them, is skipped; one made from other inputs, or with rows missing, is dropped and redone)
    and shardable (`shard=(i, n)` runs the cuts whose index is i mod n). Settings are recorded per model and
    task: another command's other settings are refused, naming them, before anything changes."""
    bad = set(s.arms) - set(ARMS)
    if bad:
        raise RunError(f"unknown arm {sorted(bad)[0]!r}: use {', '.join(ARMS)}")
    if s.cut not in ("last", "all"):
        raise RunError(f"cut {s.cut!r}: use last or all")
    with writing(run) as rd:
        return _intervene(rt, rd, model or rt.info.name, s, progress, shard, say or (lambda m: None))


def _intervene(rt: Any, rd: RunDir, model: str, s: InterveneSettings, progress: Callable[[int], None] | None,
               shard: tuple[int, int] | None, say: Callable[[str], None]) -> dict[str, Any]:
    from interp.runtime import Sampling, StopRule

    rd.record_config(f"intervene/{model}/{s.task}", s.as_dict())
    arms = [a for a in ARMS if a in set(s.arms)]
    item = prompt_items(rd)
    cuts, records = plan_cuts(rd, model, s.task, s.samples, s.cut, s.limit)
    if shard is None or shard[0] == 0:
        _write_records(rd, model, s.task, records)
    inputs = {(c["key"], c["cut"]): cut_input(c, s) for c in cuts}
    # a cut is done only when every row it makes is there: (arm, k) for each present arm and continuation
    wanted = {(c["key"], c["cut"]): {(a.arm, k) for a in c["arms"] if a.arm in arms for k in range(s.continuations)}
              for c in cuts}
    rows = rd.rows(INTERVENTIONS)
    stale = {(AttemptKey.of(x), x["cut"]) for x in rows if inputs.get((AttemptKey.of(x), x["cut"]), x.get("input")) != x.get("input")}
    have: dict[tuple[AttemptKey, int], list[tuple[str, int]]] = {}
    for x in rows:
        have.setdefault((AttemptKey.of(x), x["cut"]), []).append((x["arm"], x["k"]))
    torn = {u for u, got in have.items() if u in wanted and u not in stale
            and (len(got) != len(set(got)) or set(got) != wanted[u])}
    if torn:
        say(f"{len(torn)} intervention cuts of {model} had only part of their rows (a torn or edited file): computing them again")
    stale |= torn
    if stale:
        rd.write_rows(INTERVENTIONS, [x for x in rows if (AttemptKey.of(x), x["cut"]) not in stale])
        rows = rd.rows(INTERVENTIONS)
    done = {(AttemptKey.of(x), x["cut"]) for x in rows}
    wrote = bool(stale)
    for ci, c in enumerate(cuts):
        key = c["key"]
        if (shard is not None and ci % shard[1] != shard[0]) or (key, c["cut"]) in done:
            if progress:
                progress(1)
            continue
        shared, suffixes = cut_tokens(rt, c, item(key.task, key.prompt_id))
        present = [a for a in c["arms"] if a.arm in arms]
        rows_in, sfx, smp = [], [], []
        for a in present:
            for k in range(s.continuations):
                seed = derive_seed(s.seed, *key, c["cut"], a.arm, k)
                rows_in.append((a, k, seed))
                sfx.append(suffixes[a.arm])
                smp.append(Sampling(s.temperature, seed))
        gens = rt.continue_batch(shared, sfx, smp, StopRule(max_new_tokens=s.max_new_tokens, open_fence=True))
        out = []
        for (a, k, seed), g in zip(rows_in, gens):
            out.append({**key.fields(), "cut": c["cut"], "statement": c["stmt"].name, "comment": c["stmt"].comment,
                        "code_after": c["stmt"].code_after, "arm": a.arm, "k": k, "seed": seed,
                        "temperature": s.temperature, "dr": a.dr, "dc": a.dc, "distance": a.distance,
                        "overlap": a.overlap, "continuation": clean_text(g.text), "stop": g.stop, "n_tokens": len(g.tokens),
                        "continued": continued_drawing(g.text), "input": inputs[(key, c["cut"])]})
        rd.append(INTERVENTIONS, out)
        wrote = True
        if progress:
            progress(1)
    if wrote:  # a cut redone after the others comes back to its place
        rd.sort_rows(INTERVENTIONS, intervention_unit)
    return intervention_counts(rd, model, s.task)


def intervention_unit(r: Any) -> tuple:
    """A continuation's place within its attempt (the canonical order of interventions.jsonl): cut, arm, k."""
    return (r["cut"], ARMS.index(r["arm"]) if r["arm"] in ARMS else len(ARMS), r["k"])


def intervention_counts(run: Any, model: str, task: str) -> dict[str, Any]:
    """Counts of one model and task, from the rows written (never assumed)."""
    rd = reading(run)
    rows = [x for x in rd.rows(INTERVENTIONS) if (x["model"], x["task"]) == (model, task)]
    recs = [x for x in rd.rows(CUTS) if (x["model"], x["task"]) == (model, task)]
    cut_recs = [x for x in recs if x["status"] == "cut"]
    checks = [ok for x in cut_recs for ok in x["splice_identical"].values()]
    excluded: dict[str, int] = {}
    for x in recs:
        for reason in ([x["reason"]] if x["status"] == "excluded" else x["missing"]):
            excluded[reason] = excluded.get(reason, 0) + 1
    return {"model": model, "task": task, "cuts": len(cut_recs),
            "cuts_with_rows": len({(AttemptKey.of(x), x["cut"]) for x in rows}), "continuations": len(rows),
            "splices_byte_identical": f"{sum(checks)}/{len(checks)}", "excluded": excluded}


# --------------------------------------------------------------------------- statistics


def _cut_id(r: dict[str, Any]) -> tuple[Any, ...]:
    return (*AttemptKey.of(r), r["cut"])


STRATA = (("all", lambda r: True), ("comment", lambda r: bool(r.get("comment"))),
          ("no comment", lambda r: not r.get("comment")), ("code after cut", lambda r: bool(r.get("code_after"))),
          ("no code after cut", lambda r: not r.get("code_after")))


def arm_table(rows: list[dict[str, Any]], n_boot: int = 2000, n_perm: int = 2000, seed: int = 0,
              strata: bool = False) -> list[dict[str, Any]]:
    """Continued-drawing rates per (model, task, arm) and the paired delta of each arm vs null-asis.

    `rate` is over all of the arm's continuations (unpaired); `paired_rate` and `paired_asis_rate` are over
    the cuts that have both arms (the mean over those cuts of each cut's rate), so that
    `paired_asis_rate -> paired_rate` is exactly `delta_vs_asis`. The delta has a prompt-clustered bootstrap
    CI and a sign-flip permutation p (arm labels swapped within a cut, each cut independently, under the
    sharp null), BH-adjusted across models and arms within each task and stratum. With `strata`, the table
    repeats per stratum: statements with / without a same-line comment, programs with / without code
    after the cut (the paper stratified comments)."""
    from interp.probes import benjamini_hochberg

    out = []
    for sname, keep in (STRATA if strata else STRATA[:1]):
        fam: list[dict[str, Any]] = []
        for model, task in sorted({(r["model"], r.get("task", "layout")) for r in rows}):
            mine = [r for r in rows if r["model"] == model and r.get("task", "layout") == task and keep(r)]
            by_cut: dict[tuple, dict[str, list[float]]] = {}
            for r in mine:
                by_cut.setdefault(_cut_id(r), {}).setdefault(r["arm"], []).append(float(r["continued"]))
            for arm in ARMS:
                vals = [r for r in mine if r["arm"] == arm]
                if not vals:
                    continue
                per_prompt: dict[str, list[float]] = {}
                for r in vals:
                    per_prompt.setdefault(r["prompt_id"], []).append(float(r["continued"]))
                row: dict[str, Any] = {"model": model, "task": task, "stratum": sname, "arm": arm,
                                       "continuations": len(vals), "cuts": len({_cut_id(r) for r in vals}),
                                       "prompts": len(per_prompt_of(vals)),
                                       "rate": float(np.mean([r["continued"] for r in vals])),
                                       "rate_ci": cluster_ci(per_prompt, n_boot, seed), "n_boot": n_boot, "seed": seed}
                if arm != "null-asis":
                    pairs = [(cid, c[arm], c["null-asis"]) for cid, c in sorted(by_cut.items()) if arm in c and "null-asis" in c]
                    if pairs:
                        a = np.array([np.mean(x) for _, x, _ in pairs])
                        b = np.array([np.mean(y) for _, _, y in pairs])
                        deltas = a - b
                        per_prompt_delta: dict[str, list[float]] = {}
                        for (cid, _, _), dlt in zip(pairs, deltas):
                            per_prompt_delta.setdefault(cid[4], []).append(float(dlt))
                        rng = np.random.default_rng(seed)
                        signs = rng.choice([-1.0, 1.0], size=(n_perm, deltas.size))
                        null = signs @ deltas / deltas.size
                        obs = float(deltas.mean())
                        row.update({"paired_cuts": len(pairs), "paired_rate": float(a.mean()),
                                    "paired_asis_rate": float(b.mean()), "delta_vs_asis": obs,
                                    "delta_ci": cluster_ci(per_prompt_delta, n_boot, seed),
                                    "p_perm": float((1 + np.sum(np.abs(null) >= abs(obs) - 1e-12)) / (1 + n_perm)),
                                    "n_perm": n_perm, "mean_distance": float(np.mean([r["distance"] for r in vals]))})
                fam.append(row)
        tested = [r for r in fam if "p_perm" in r]
        for task in sorted({r["task"] for r in tested}):
            sel = [r for r in tested if r["task"] == task]
            for r, q in zip(sel, benjamini_hochberg([r["p_perm"] for r in sel])):
                r["q_bh"] = q
        out += fam
    return out


def per_prompt_of(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    """prompt id -> the continued-drawing outcomes (0/1) of its continuations: the clusters of every interval here."""
    out: dict[str, list[float]] = {}
    for r in rows:
        out.setdefault(r["prompt_id"], []).append(float(r["continued"]))
    return out


def dose_response(rows: list[dict[str, Any]], bins: Iterable[float] = (0, 3, 5, 7, 10, 20), n_boot: int = 2000,
                  seed: int = 0) -> list[dict[str, Any]]:
    """Continuation rate of the moved arms by displacement distance bin, per model, with its prompt-clustered 95%
    CI (None with fewer than two prompts in the bin) and its n (continuations, cuts, prompts)."""
    edges = list(bins)
    out = []
    for model, task in sorted({(r["model"], r.get("task", "layout")) for r in rows}):
        moved = [r for r in rows if r["model"] == model and r.get("task", "layout") == task and r["arm"].startswith("moved")]
        for lo, hi in zip(edges, edges[1:]):
            sel = [r for r in moved if lo <= r["distance"] < hi]
            if sel:
                per_prompt = per_prompt_of(sel)
                out.append({"model": model, "task": task, "bin": [lo, hi], "continuations": len(sel),
                            "cuts": len({_cut_id(r) for r in sel}), "prompts": len(per_prompt),
                            "rate": float(np.mean([r["continued"] for r in sel])),
                            "rate_ci": cluster_ci(per_prompt, n_boot, seed), "n_boot": n_boot, "seed": seed,
                            "mean_distance": float(np.mean([r["distance"] for r in sel]))})
    return out


def _errorbars(rows: list[dict[str, Any]], key: str = "rate", ci: str = "rate_ci") -> tuple[list[int], list[list[float]]]:
    """The indices of the rows that have an interval and their [below, above] error-bar lengths (a row without an
    interval, n = 1 prompt, is drawn as a hollow point with no bar: a bar of zero length would read as certainty)."""
    have = [i for i, r in enumerate(rows) if r.get(ci) and r[ci][0] is not None]
    return have, [[rows[i][key] - rows[i][ci][0] for i in have], [rows[i][ci][1] - rows[i][key] for i in have]]


def plot_interventions(rd: RunDir, table: list[dict[str, Any]], dose: list[dict[str, Any]], task: str = "layout") -> Path:
    """`RUN/interventions-<task>.png`: the continuation rate per arm and the dose-response, each point with its
    prompt-clustered 95% CI (none where one prompt is all there is: a hollow point) and its n, legible at full page
    width (1100 px wide, text 10 pt and up)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = [r for r in table if r["task"] == task and r.get("stratum", "all") == "all"]
    dose = [r for r in dose if r["task"] == task]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.6), dpi=110)
    models = sorted({r["model"] for r in table} | {r["model"] for r in dose})
    for mi, model in enumerate(models):
        colour = f"C{mi}"
        shift = (mi - (len(models) - 1) / 2) * 0.08  # models side by side at each arm, not on top of one another
        for ax, rows, x_of in ((a1, [r for r in table if r["model"] == model], lambda r: ARMS.index(r["arm"]) + shift),
                               (a2, [r for r in dose if r["model"] == model], lambda r: r["mean_distance"])):
            if not rows:
                continue
            xs = [x_of(r) for r in rows]
            have, err = _errorbars(rows)
            if ax is a2:  # the line runs through every point the table has, hollow ones included (issue 40: it
                # joined only the points with an interval, so a hollow 0.0 between them vanished from the trend)
                order = sorted(range(len(rows)), key=lambda i: xs[i])
                ax.plot([xs[i] for i in order], [rows[i]["rate"] for i in order], "-", color=colour, zorder=1)
            ax.errorbar([xs[i] for i in have], [rows[i]["rate"] for i in have], yerr=err, marker="o", capsize=4,
                        color=colour, ls="none", label=model)
            bare = [i for i in range(len(rows)) if i not in have]
            if bare:
                ax.plot([xs[i] for i in bare], [rows[i]["rate"] for i in bare], marker="o", mfc="white", color=colour,
                        ls="none", label=f"{model}: n = 1 prompt, no interval" if ax is a1 else None)
            for x, r in zip(xs, rows):
                ax.annotate(f"n={r['continuations']}", (x, r["rate"]), textcoords="offset points", xytext=(6, 4),
                            fontsize=9, color=colour)
    a1.set_xticks(range(len(ARMS)), ARMS, fontsize=10)
    a1.set_xlim(-0.5, len(ARMS) - 0.5)
    a1.set_ylabel("continued drawing (share)", fontsize=11)
    a1.set_ylim(-0.05, 1.1)
    a1.set_title(f"{task}: continuation rate per arm", fontsize=11)
    a2.set_xlabel("displacement of the moved statement (cells)", fontsize=11)
    a2.set_ylabel("continued drawing (moved arms)", fontsize=11)
    a2.set_ylim(-0.05, 1.1)
    a2.set_title("dose-response (distance bins)", fontsize=11)
    if models:
        a1.legend(fontsize=9, loc="upper left")
    fig.text(0.5, 0.005, "points: share of continuations that drew again; bars: prompt-clustered bootstrap 95% CI; "
             "n = continuations", ha="center", va="bottom", fontsize=9, color="#444")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    out = rd.save_figure(fig, f"interventions-{task}.png")
    plt.close(fig)
    return out


def summarise_interventions(run: Any, seed: int = 0, n_boot: int = 2000, n_perm: int = 2000) -> dict[str, Any] | None:
    """Write RUN/interventions_table.json (arms, strata, dose-response, counts and exclusions per model and
    task, patching) and the plots, from the rows on disk; None without rows."""
    with writing(run) as rd:
        return _summarise(rd, seed, n_boot, n_perm)


def _summarise(rd: RunDir, seed: int, n_boot: int, n_perm: int) -> dict[str, Any] | None:
    run = rd
    rows = rd.rows(INTERVENTIONS)
    if not rows:
        return None
    table = arm_table(rows, n_boot=n_boot, n_perm=n_perm, seed=seed, strata=True)
    dose = dose_response(rows, n_boot=n_boot, seed=seed)
    pairs = sorted({(r["model"], r["task"]) for r in rows} | {(r["model"], r["task"]) for r in rd.rows(CUTS)})
    out: dict[str, Any] = {"arms": [r for r in table if r["stratum"] == "all"], "strata": [r for r in table if r["stratum"] != "all"],
                           "dose_response": dose, "counts": [intervention_counts(run, m, t) for m, t in pairs]}
    patch_rows = rd.rows(RunDir.PATCHING)
    if patch_rows:
        out["patching"] = patching_table(patch_rows)
    rd.write_json(RunDir.INTERVENTIONS_TABLE, out)
    for task in sorted({r["task"] for r in rows}):
        plot_interventions(run, table, dose, task)
    for task in sorted({r["task"] for r in patch_rows}):
        plot_patching(run, patch_rows, task)
    return out


__all__ = ["CUTS", "EXCLUSIONS", "INTERVENTIONS", "InterveneSettings", "arm_table", "dose_response", "intervene_stage",
           "intervention_counts", "per_prompt_of", "plan_cuts", "plot_interventions", "protocol_from_label", "summarise_interventions"]
