"""The probes (Exp. 3, stage 1): ΔR² over the text baseline, beyond-text tests, per-layer plots."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.stages.probe import beyond_verdict, delta_verdict
from experiments.stages.report.blocks import Answer, Block, ci, delta_note, figure, heading, missing, para, table


def _procedure(r: dict[str, Any]) -> str:
    """One phrase naming the procedure behind a probe row (grouped or not, the permutation scheme, what moved)."""
    proc = r.get("grouping", "none")
    if proc == "groups":
        moved = r.get("perm_moved_share")
        return (f"grouped: {r.get('n_groups')} groups ({r.get('group_sizes', '?')} prompts each), {r.get('folds', '?')}-fold, "
                f"{r.get('permutation', 'blocks')} permutations" + ("" if moved is None else f" moving {moved:.0%} of rows"))
    if proc == "too-few-groups":
        return f"prompt-level: only {r.get('n_groups')} groups"
    return "prompt-level: no groups declared"


def _skip_line(task: str, reasons: list[str]) -> Block:
    return missing(f"{task.capitalize()} probes", "; ".join(reasons),
                   "More prompts compute them: `ambench run --layout-per-subcategory 2` (30 layout prompts), "
                   "`--translation-prompts 40`, or the paper preset")


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    title = heading("Exp. 3, stage 1: is a layout plan decodable before generation?")
    pr = run.rows(RunDir.PROBES)
    if not pr:
        why = "the run has no activations" if not run.activation_stores() else "the probe stage has not run"
        return [title, missing("Probes", why, "`ambench run` captures and probes; `ambench probe --run RUN` probes a run")], []
    p = paper["probes"]
    blocks, answers = [title], []
    for task in ("layout", "translation"):
        delta = [r for r in pr if r.get("features") == "delta" and r["task"] == task]
        info = [r for r in pr if r.get("task") == task and r.get("kind") in ("targets", "ceiling", "shared_coverage")]
        skipped = [r for r in pr if r.get("task") == task and r.get("kind") == "skipped"]
        if not delta and not info and not skipped:
            continue
        role = "headline" if task == "layout" else "positive control: the prompt states the geometry"
        blocks.append(heading(f"{task} ({role})", 2))
        if info:
            blocks.append(table(info, ["model", "kind", "target", "kept", "dropped", "n_prompts", "r_half", "ceiling",
                                       "shared_prompts", "contributors"]))
        if skipped:
            blocks.append(_skip_line(task, [f"{r['model']}: {r['reason']} with targets and activations, and nested "
                                            f"cross-validation needs 10" for r in skipped]))
        if delta:
            blocks.append(table(delta, ["model", "target", "position", "n_prompts", "r2_resid", "r2_text", "delta_r2",
                                        "delta_mean", "delta_ci", "p_perm", "q_bh", "n_perm", "grouping", "permutation",
                                        "perm_moved_share", "chosen_layers"],
                                ["model", "target", "position", "prompts", "R² best layer", "R² text (TF-IDF)", "ΔR² (pooled)",
                                 "ΔR² (CI centre)", "95% CI of the centre", "p (perm.)", "q (BH)", "permutations",
                                 "procedure", "permutations", "share of rows moved", "layer per outer fold"]))
            blocks.append(para("ΔR² (pooled) is the paper's statistic on the study's own folds; the 95% CI belongs to "
                               "the CI centre, the repeated-CV estimate of the expected ΔR² on new prompts. With prompt "
                               "groups (layout: subcategories) folds, permutations and intervals keep each group "
                               "together, and every number estimates new prompts of new groups; the paper's procedure "
                               "(groups ignored: new prompts of the same groups) is kept in each row's `paper` field. A CI "
                               "that covers 0 while the test rejects means an association whose expected size on new "
                               "prompts is not shown above 0 (docs/probes.md)."))
            note = delta_note(delta)
            if note:
                blocks.append(note)
            fam = next((r["bh_family"] for r in delta if r.get("bh_family")), None)
            notes = sorted({r["grouping_note"] for r in delta if r.get("grouping_note")})
            if fam or notes:
                blocks.append(para(" ".join(([f"q (BH) corrects over {fam}."] if fam else [])
                                            + [f"Grouping: {n}." for n in notes]), "note"))
        beyond = [r for r in pr if r.get("features") == "beyond_text" and r["task"] == task]
        if beyond:  # "beyond these text features": against the strongest of the listed baselines (docs/probes.md)
            from interp.baselines import READABLE_MAX, READS

            named = sorted({b for r in beyond for b in (r.get("compared_with") or [r.get("baseline")]) if b},
                           key=lambda b: list(READS).index(b) if b in READS else len(READS))
            blocks.append(para("Beyond these text features: the probe against the strongest of the text baselines "
                               "below (the text ceiling). Two Freedman-Lane permutation tests of one null, \"nothing the "
                               "activations read beyond that baseline\", must both reject (p is the larger of the two): "
                               "the beyond-text ΔR² itself, and the probe's R² of what the ceiling leaves of the targets "
                               "(its out-of-fold residuals); each alone fails where the other holds (docs/probes.md). "
                               "The baselines: " + "; ".join(f"{b}: {READS.get(b, b)}" for b in named)
                               + ". Each lexical baseline is a candidate twice more, through its 4 and its 16 columns most "
                               "associated with the target, chosen on each fold's training rows (a ceiling named b/4): a "
                               "sparse feature, one word's place among hundreds of place columns, is drowned under one "
                               "ridge penalty over the whole design. A verdict is about these features, not about \"the text\": a reading of the words no "
                               "baseline makes counts as beyond them. Activations that hold a text feature more exactly "
                               "than a baseline learns it from noisy targets can still leave it a residual to read; so the "
                               "verdict asks, besides q < 0.05 and the interval above 0, that the text features reproduce "
                               f"less than {READABLE_MAX:.0%} of what the probe decodes (\"text-readable\": the best "
                               "baseline fitted to the probe's own out-of-fold predictions); above that the row reads "
                               "\"a reading of the text, not evidence of a plan\" (docs/probes.md)."))
            blocks.append(table(beyond, ["model", "target", "position", "n_prompts", "r2_resid", "baseline", "r2_baseline",
                                         "delta_beyond", "delta_ci", "p_fl", "q_bh", "text_readable", "grouping",
                                         "permutation", "n_perm"],
                                ["model", "target", "position", "prompts", "R² best layer", "text ceiling", "R² ceiling",
                                 "beyond-text ΔR²", "95% CI", "p (Freedman-Lane, both tests)", "q (BH)", "text-readable share",
                                 "procedure", "permutations", "count"]))
            note = delta_note(beyond, "delta_beyond", "r2_baseline")
            if note:
                blocks.append(note)
            fam = next((r["bh_family"] for r in beyond if r.get("bh_family")), None)
            if fam:
                blocks.append(para(f"q (BH) corrects over {fam}.", "note"))
        if task == "layout":
            blocks.append(para(
                f"Paper (layout, 8 models): mean ΔR² {num(p['delta_r2_mean'], True)} (range {num(p['delta_r2_range'][0], True)} "
                f"to {num(p['delta_r2_range'][1], True)}), every model q ≤ {p['q_max']}; shared component R² "
                f"{', '.join(f'{k} {num(v)}' for k, v in p['shared_r2'].items())} (text baseline "
                f"{', '.join(num(v) for v in p['shared_text_r2'].values())}); specific component R² "
                f"{', '.join(num(v, True) for v in p['specific_r2'].values())}; split-half ceiling "
                f"{p['ceiling_range'][0]}–{p['ceiling_range'][1]}.", "paper"))
        for r in delta:
            if r["target"] != "own" or task != "layout":
                continue
            answers.append(f"{r['model']} at the {r['position']} token: ΔR² {num(r['delta_r2'])} {ci(r['delta_ci'])} (probe R² "
                           f"{num(r['r2_resid'])}, text {num(r['r2_text'])}), q {num(r.get('q_bh'))} over {r['n_prompts']} "
                           f"prompts ({_procedure(r)}): {delta_verdict(r)}.")
        for r in beyond:
            if r["target"] != "own" or task != "layout":
                continue
            answers.append(f"{r['model']} at the {r['position']} token, beyond-text ΔR² {num(r['delta_beyond'])} "
                           f"{ci(r['delta_ci'])} against {r['baseline']}, q {num(r.get('q_bh'))}: {beyond_verdict(r)}.")
        if task == "layout":
            for m in sorted({r["model"] for r in delta}):
                best = {r["target"]: r for r in delta if r["model"] == m and r["position"] == "last"}
                if "shared" in best and "specific" in best:
                    answers.append(f"{m} (last token): shared component R² {num(best['shared']['r2_resid'])}, specific "
                                   f"{num(best['specific']['r2_resid'])} (paper: only the shared component is decodable).")
            if skipped and not delta:
                answers.append("Layout probes not computed: " + "; ".join(f"{r['model']}: {r['reason']}" for r in skipped)
                               + " (nested cross-validation needs 10 prompts with targets; see the probes section).")
    plots = run.file(RunDir.PROBE_PLOTS)
    for png in sorted(plots.glob("*.png")) if plots.is_dir() else []:
        blocks.append(figure(png, f"per-layer R² (nested CV) with the text baseline: {png.stem}"))
    return blocks, ([{"q": "Is a coarse layout plan decodable before generation, above the text baseline? (Exp. 3)",
                      "a": " ".join(answers)}] if answers else [])
