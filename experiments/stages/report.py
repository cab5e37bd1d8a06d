"""`RUN/report/index.html` and `ambench report RUN... --out DIR`: one self-contained page (every image inline)
that leads with the evidence.

Order: a table of contents (every section of every run links from it); the summary (the paper's questions, the runs' answers with CIs, one sentence each saying what the
numbers support, and how many of the methods recovered the answers built into the model organisms); then
"the methods, validated": per method, the organism, the constructed answer, the measured value with its CI
and whether it was recovered, computed from the organism runs' rows (`experiments.verdicts.verdicts`),
beside the organisms' per-layer R^2 plots and patching profile; then each real model's results: the
paper's tables reproduced from the run, each with the paper's published values beside it
(`experiments/data/paper.json`), where every table that could not be computed says in one line why and
which command or preset computes it (steering included: "not computed", why and the command, until a run has
steering rows); the mosaics; the configuration last. The page has no timestamps, so the same runs give the same
bytes.

Honest at small n (issue 30): every rate is shown with its n (prompts, cuts, continuations) and its prompt-clustered
95% CI, and where one prompt is all there is the cell says "n = 1, no interval" (a bootstrap of one prompt is a
point: "[0.333, 0.333]" read as certainty); figures are drawn 1,100 px wide and shown at full page width, so their
10-11 pt text reads at 14-15 px (the interventions figure was squeezed into half the page, text ~6 px).

The page is `experiments/templates/report.html.j2`, rendered by Jinja2 with autoescaping on: the
sections below return data (headings, texts, tables of formatted cells, figures), never markup, so no
value from a run can become HTML. Numbers are shown to 3 significant digits (`experiments.numbers`).
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from experiments.numbers import text as num
from experiments.rundir import RunDir, reading, safe_name, writing
from experiments.stages.probe import beyond_verdict, delta_verdict

Block = dict[str, Any]
Answer = dict[str, str]
#: the kinds of known answer a probe checks (their runs' per-layer R^2 plots go beside the verdicts); the others
#: are checked by interventions and patching (their runs' patching profile goes beside them)
PROBE_KINDS = ("stated-geometry", "hidden-plan", "no-plan")


def paper_values() -> dict[str, Any]:
    return json.loads(resources.files("experiments").joinpath("data/paper.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- blocks (what the template draws)


def heading(text: str, level: int = 1) -> Block:
    """A section heading: level 1 a section of a run, 2 a subsection."""
    return {"kind": "heading", "level": level, "text": text}


def para(text: str, kind: str = "text") -> Block:
    """A paragraph: `text`, `paper` (the paper's values), `note` (how to read a table) or `missing`."""
    return {"kind": kind, "text": text}


def missing(what: str, why: str, how: str) -> Block:
    """One line for a table that could not be computed: what, why, and the command or preset that computes it."""
    return para(f"{what}: not computed — {why}. {how}.", "missing")


def cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, (bool, int, float)):
        return num(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(cell(x) for x in v) + "]"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {x}" for k, x in v.items())
    return str(v)


def table(rows: Sequence[dict[str, Any]], cols: list[str], heads: list[str] | None = None) -> Block:
    return {"kind": "table", "heads": heads or cols, "rows": [[cell(r.get(c)) for c in cols] for r in rows]}


def figure(path: Path, alt: str) -> Block | None:
    if not path.is_file():
        return None
    return {"kind": "figure", "alt": alt, "data": base64.b64encode(path.read_bytes()).decode()}


def ci(pair: Any) -> str:
    lo, hi = (pair or [None, None])[:2]
    return f"[{num(lo)}, {num(hi)}]"


def interval(pair: Any, n: Any = None) -> str:
    """A 95% CI cell: "[lo, hi]", or "n = 1, no interval" where there is none (one prompt: a bootstrap of one prompt
    is a point, and "[0.333, 0.333]" would read as certainty)."""
    lo, hi = (pair or [None, None])[:2]
    if lo is None or hi is None:
        return f"n = {n if n is not None else 1}, no interval"
    return f"[{num(lo)}, {num(hi)}]"


def figure_of(fig: Any, alt: str) -> Block:
    """A matplotlib figure drawn for the page itself (the page is read-only on runs: nothing is written)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})  # no version string: the same rows, the same bytes
    return {"kind": "figure", "alt": alt, "data": base64.b64encode(buf.getvalue()).decode()}


def _excludes_zero(pair: Any) -> bool:
    return bool(pair) and pair[0] is not None and pair[1] is not None and (pair[0] > 0 or pair[1] < 0)


Section = Callable[[RunDir, dict[str, Any]], "tuple[list[Block], list[Answer]]"]


# --------------------------------------------------------------------------- sections of a real model's run


def _translation(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    from experiments.stages.translation import summarise

    title = heading("Exp. 1 control: translation (median PIoU ≥ 0.6)")
    rows = run.rows(RunDir.TRANSLATION_SCORES)
    summary = [{"model": m, **summarise([r for r in rows if r["model"] == m])} for m in sorted({r["model"] for r in rows})]
    if not summary:
        return [title, missing("Translation scores", "this run has no scored translation attempts",
                               "`ambench run` (any preset) generates and scores them; `ambench translation score` scores a file")], []
    p = paper["translation"]
    answers = [f"{t['model']}: median PIoU {num(t['piou_median'])} over {t['attempts']} attempts ({num(100 * t['pass_rate'])}% "
               f"≥ {p['tau']}); it {'passes' if t['passes_gate'] else 'fails'} the translation gate (paper: median "
               f"{num(p['median_piou'])} for all eight models)." for t in summary]
    ref = ", ".join(f"{k} {num(v)}" for k, v in p["mean_piou"].items())
    blocks = [title, table(summary, ["model", "attempts", "valid_rate", "piou_mean", "piou_median", "pass_rate", "passes_gate"]),
              para(f"Paper: median PIoU {num(p['median_piou'])} for every model, {num(100 * p['pass_rate'])}% of "
                   f"{p['attempts']:,} attempts pass; mean PIoU {ref}; null baseline mean {p['null_mean']}, 95th percentile "
                   f"{p['null_p95']}.", "paper")]
    return blocks, [{"q": "Is writing the code the bottleneck? (translation gate)", "a": " ".join(answers)}]


def _layout(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    lt = run.json(RunDir.LAYOUT_TABLE)
    p = paper["layout"]
    blocks: list[Block] = [heading("Exp. 1: layout validity and triviality per tier")]
    answers: list[str] = []
    if lt:
        blocks += [table(lt, ["model", "protocol", "tier", "attempts", "valid_rate", "trivial_rate", "trivial_of_valid"]),
                   para(f"Paper: validity above {num(100 * p['validity_min'])}% for every model and tier, "
                        f"{num(100 * p['trivial_rate'])}% trivial overall (CodeLlama 34B on T1: "
                        f"{num(100 * p['trivial_codellama_t1'])}%).", "paper")]
        for r in (x for x in lt if x["tier"] == "all"):
            good = r["valid"] - r["trivial"]
            answers.append(f"{r['model']} ({r['protocol']}): {good}/{r['attempts']} layout attempts valid and non-trivial "
                           f"({num(100 * good / max(r['attempts'], 1))}%).")
    else:
        blocks.append(missing("Layout validity and triviality", "this run has no layout attempts",
                              "`ambench run` (any preset) generates them; `ambench layout table --run RUN` tabulates a run"))
    js = run.rows(RunDir.JUDGE_SCORES)
    blocks.append(heading("Judges", 2))
    if js:
        from experiments.stages.judge import inversion_table, pass_at_k_table

        inv = inversion_table(js)
        blocks += [table(pass_at_k_table(js), ["judge", "model", "protocol", "prompts", "pass@1", "pass@3", "pass@5", "pass@10"]),
                   table(inv, ["judge", "model", "protocol", "T2", "T3", "inverted"]),
                   para(f"Paper (pooled): judge 1 T2 {p['judge1_tier']['T2']} vs T3 {p['judge1_tier']['T3']}, judge 2 T2 "
                        f"{p['judge2_tier']['T2']} vs T3 {p['judge2_tier']['T3']} (the T2/T3 inversion); pass@10 "
                        f"{p['pass_at_10'][0]}–{p['pass_at_10'][1]}.", "paper")]
        answers += [f"{r['judge']} on {r['model']}: T2 {num(r['T2'])}, T3 {num(r['T3'])} "
                    f"({'inverted, as in the paper' if r['inverted'] else 'not inverted'})." for r in inv]
    else:
        blocks.append(missing("Judge scores (pass@k, the T2/T3 inversion)", "no judge was configured",
                              "Give `ambench run` a VLM endpoint with `--judge-url URL --judge-model NAME`, or run "
                              "`ambench judge --run RUN`"))
        if lt:
            answers.append("No judge scores in this run (give --judge-url): validity and triviality only.")
    return blocks, ([{"q": "How well do models compose open-ended layouts?", "a": " ".join(answers)}] if answers else [])


def _media(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    title = heading("Exp. 2: the output medium (paired per-prompt delta, prompt-clustered bootstrap CI)")
    rows = run.json(RunDir.MEDIA_TABLE) or []
    if not rows:
        return [title, missing("The SVG − canvas comparison", "this run has no SVG arm",
                               "`ambench run --svg` adds it (on in the paper preset)")], []
    p = paper["svg"]
    answers = [f"{r['model']}, {r['metric']}: {r['b']} − {r['a']} = {num(r['delta'], True)} {ci(r['ci'])} over {r['prompts']} "
               f"prompts ({'the CI excludes 0' if _excludes_zero(r['ci']) else 'the CI includes 0'})." for r in rows]
    blocks = [title, table(rows, ["model", "metric", "a", "b", "prompts", "delta", "ci"]),
              para(f"Paper: SVG − canvas judge score {num(p['pooled_delta'], True)} {ci(p['pooled_ci'])} pooled "
                   f"(resolution-matched; native {num(p['native_delta'], True)}); CodeLlama 34B "
                   f"{num(p['per_model']['CodeLlama 34B'], True)}, Qwen2.5-Coder 32B "
                   f"{num(p['per_model']['Qwen2.5-Coder 32B'], True)}.", "paper")]
    return blocks, [{"q": "Does the output medium change what models can express? (Exp. 2)", "a": " ".join(answers)}]


def _tier_gaps(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    """Issue 16: the T2/T3 gap per medium and its difference between media (layout.tier_gap_table)."""
    title = heading("Is the T2/T3 inversion a property of the 24x24 medium? (beyond the paper)")
    rows = run.json(RunDir.TIER_GAPS) or []
    if not rows:
        return [title, missing("The T2/T3 gap per medium", "this run draws on one canvas medium",
                               "`ambench run --medium v1-48` (or `--medium outline`) adds a second one")], []
    p = paper["layout"]
    gaps = [r for r in rows if r["kind"] == "gap"]
    contrasts = [r for r in rows if r["kind"] == "contrast"]
    blocks = [title,
              para("T3 − T2 of the per-prompt score (positive: compositions beat icons, the paper's inversion), and its "
                   "difference between each medium and the paper's canvas over the prompts both scored; 95% CIs from a "
                   "prompt bootstrap stratified by tier and paired across media."),
              table(gaps, ["metric", "model", "protocol", "medium", "n_T2", "n_T3", "T2", "T3", "gap", "ci", "inverted"]),
              table(contrasts, ["metric", "model", "protocol", "a", "b", "n_T2", "n_T3", "gap_a", "gap_b", "difference", "ci"],
                    ["metric", "model", "protocol", "A", "B", "T2 prompts", "T3 prompts", "gap A", "gap B", "gap B − gap A",
                     "95% CI"]),
              para(f"Paper (24x24 canvas only, pooled): judge 1 T2 {p['judge1_tier']['T2']} vs T3 {p['judge1_tier']['T3']}, "
                   f"judge 2 T2 {p['judge2_tier']['T2']} vs T3 {p['judge2_tier']['T3']}; the paper attributes the inversion "
                   "to the 24x24 resolution and did not test another medium.", "paper")]
    answers = [f"{r['model']}, {r['metric']}: T3 − T2 {num(r['gap_a'], True)} on {r['a']}, {num(r['gap_b'], True)} on {r['b']}; "
               f"difference {num(r['difference'], True)} {ci(r['ci'])} over {r['n_T2']}+{r['n_T3']} prompts "
               f"({'the gap depends on the medium' if _excludes_zero(r['ci']) else 'no medium effect on the gap shown'})."
               for r in contrasts]
    return blocks, ([{"q": "Is the T2/T3 inversion a property of the 24x24 medium?", "a": " ".join(answers)}] if answers else [])


def delta_note(rows: Sequence[dict[str, Any]], key: str = "delta_r2", text_key: str = "r2_text") -> Block | None:
    """Why a ΔR² above 1 is no error, under any table that shows one."""
    big = [r for r in rows if (r.get(key) or 0) > 1]
    if not big:
        return None
    worst = min(big, key=lambda r: r.get(text_key) if r.get(text_key) is not None else 0)
    return para(f"ΔR² = R²(probe) − R²(text baseline), so it exceeds 1 when the text baseline's R² is negative, i.e. "
                f"the baseline predicts worse than the mean of the targets (here down to {num(worst.get(text_key))}); "
                "both R² are shown beside it.", "note")


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


def _probes(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
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

            named = sorted({b for r in beyond for b in (r.get("compared_with") or [r["baseline"]])},
                           key=lambda b: list(READS).index(b) if b in READS else len(READS))
            blocks.append(para("Beyond these text features: the probe against the strongest of the text baselines "
                               "below (the text ceiling), with a Freedman-Lane permutation test whose null is \"nothing "
                               "beyond that baseline\". The baselines: " + "; ".join(f"{b}: {READS.get(b, b)}" for b in named)
                               + ". A verdict is about these features, not about \"the text\": a reading of the words no "
                               "baseline makes counts as beyond them. The test also rejects when the activations hold a "
                               "text feature along one direction that a baseline must learn from noisy targets; so the "
                               "verdict asks, besides q < 0.05 and the interval above 0, that the text features reproduce "
                               f"less than {READABLE_MAX:.0%} of what the probe decodes (\"text-readable\": the best "
                               "baseline fitted to the probe's own out-of-fold predictions); above that the row reads "
                               "\"a reading of the text, not evidence of a plan\" (docs/probes.md)."))
            blocks.append(table(beyond, ["model", "target", "position", "n_prompts", "r2_resid", "baseline", "r2_baseline",
                                         "delta_beyond", "delta_ci", "p_fl", "q_bh", "text_readable", "grouping",
                                         "permutation", "n_perm"],
                                ["model", "target", "position", "prompts", "R² best layer", "text ceiling", "R² ceiling",
                                 "beyond-text ΔR²", "95% CI", "p (Freedman-Lane)", "q (BH)", "text-readable share",
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


def _selectivity(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    """Issue 16: the model x model decoding table and the own-minus-others gap (stages/selectivity.py)."""
    title = heading("Cross-model selectivity: does a model decode its own layouts better than the others'?", 2)
    rows = run.rows(RunDir.SELECTIVITY)
    if not rows:
        return [title, missing("Cross-model selectivity", "it needs two or more models' activations and was not asked for",
                               "`ambench run --selectivity` with two `--model`s (on in the paper preset), or "
                               "`ambench selectivity --run RUN`")], []
    p = paper["probes"]
    gaps = [r for r in rows if r["kind"] in ("gap", "mean_gap")]
    blocks = [title,
              para("R² of the best-layer probe from one model's activations (row) to each model's consensus layouts (target); "
                   "the gap is own − the mean over the other models; 95% CIs from one prompt-clustered bootstrap across "
                   "every cell."),
              table(gaps, ["task", "position", "kind", "model", "n_models", "own_r2", "others_mean_r2", "gap", "ci", "own_best"],
                    ["task", "position", "row", "model (activations)", "models", "R² own", "R² others (mean)", "gap",
                     "95% CI", "own best"]),
              table([r for r in rows if r["kind"] == "cell"],
                    ["task", "position", "model", "target", "n_prompts", "r2", "ci", "chosen_layers"],
                    ["task", "position", "activations of", "targets of", "prompts", "R² (best layer)", "95% CI",
                     "layer per outer fold"])]
    blocks += [para(f"{r['task']}: skipped ({r['reason']})") for r in rows if r["kind"] == "skipped"]
    blocks.append(para(f"Paper (8 models): mean own-minus-others gap {num(p['cross_model_gap'], True)}; own layouts best decoded "
                       f"for {p['cross_model_own_best']['own_best']} of {p['cross_model_own_best']['models']} models "
                       f"({p['cross_model_own_best']['which']}); GLM-4 9B {num(p['cross_model_gap_lowest']['GLM-4 9B'], True)}.",
                       "paper"))
    answers = []
    for r in (x for x in rows if x["kind"] == "mean_gap"):
        lo = r["ci"][0]
        verdict = ("models decode their own layouts better than the others'" if lo is not None and lo > 0 else
                   "no model-specific layout shown: models decode one another's layouts about as well as their own")
        answers.append(f"{r['task']}, {r['position']} token: mean own-minus-others gap {num(r['gap'])} {ci(r['ci'])} over "
                       f"{r['n_models']} models, own best for {r['own_best']} ({verdict}).")
    return blocks, ([{"q": "Do models decode their own layouts better than other models' (cross-model selectivity)?",
                      "a": " ".join(answers)}] if answers else [])


def _attention(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    """Issue 16: the attention focus of drawing statements on the prompt's spatial words (stages/attention.py)."""
    title = heading("Attention focus on the prompt's spatial words, quantified (beyond the paper)")
    rows = run.json(RunDir.ATTENTION_TABLE) or []
    if not rows:
        return [title, missing("Attention focus", "it was not asked for",
                               "`ambench run --attention` (on in the paper preset), or `ambench attention --run RUN --model M`")], []
    blocks = [title,
              para("Per valid attempt: the attention (mean over heads) of its drawing statements' tokens on the request's "
                   "spatial words, as a share of their attention on the prompt, divided by the share uniform attention over "
                   "the prompt gives (1 = no focus), averaged over statements and layers; its distribution over attempts, a "
                   "prompt-clustered 95% CI of the mean, and the layer where the mean peaks."),
              table(rows, ["model", "task", "attempts", "prompts", "mean", "ci", "median", "q1", "q3", "peak_layer", "skipped"],
                    ["model", "task", "attempts", "prompts", "mean focus", "95% CI", "median", "25%", "75%", "peak layer",
                     "skipped (reason: attempts)"]),
              para("Paper: attention maps of GLM-4 32B look more tightly focused than CodeLlama 34B's, from the most focused "
                   "of several candidate generations; illustrative, not a statistic.", "paper"),
              figure(run.file(RunDir.ATTENTION_PLOT), "attention focus per layer")]
    answers = []
    for t in (t for t in rows if t.get("mean") is not None):
        lo = t["ci"][0]
        answers.append(f"{t['model']}: focus {num(t['mean'])} {ci(t['ci'])} (median {num(t['median'])}, IQR {num(t['q1'])}–"
                       f"{num(t['q3'])}) over {t['attempts']} attempts; "
                       + ("the drawing statements attend to the spatial words more than uniformly." if lo is not None and lo > 1
                          else "no focus above uniform attention shown."))
    return blocks, ([{"q": "How much do the drawing statements attend to the prompt's spatial words?", "a": " ".join(answers)}]
                    if answers else [])


def _no_patching(run: RunDir) -> str:
    """The one reason this run has no patching rows, read from its files (issue 40: the report said "no cut kept its
    token count, or patching did not run" when config.json shows which)."""
    try:
        stages = run.config().get("stages", {})
    except Exception:  # noqa: BLE001 - a damaged settings record: the report says what it can
        stages = {}
    ran = sorted(k.split("/", 2)[1] for k in stages if k.startswith("patch/"))
    if not ran:
        return "the patch stage did not run in this run (no `patch/...` settings in its config.json)"
    return (f"the patch stage ran for {', '.join(ran)} and no cut could be patched: in every cut the moved statement "
            "tokenised to another number of tokens than the as-is one (a coordinate such as 3 vs 12), so the two "
            "arms' statement positions cannot be aligned, or the cut had no moved-unused arm")


def _interventions(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    title = heading("Exp. 3, stage 2: do models track the geometry already in their code?")
    t = run.json(RunDir.INTERVENTIONS_TABLE)
    if not t:
        return [title, missing("Interventions and activation patching", "the run has no intervention rows",
                               "`ambench run` runs them after generation; `ambench intervene --run RUN` and "
                               "`ambench patch --run RUN` on a run")], []
    p = paper["interventions"]
    arms = [dict(r, paired=f"{num(r['paired_asis_rate'])} → {num(r['paired_rate'])}" if "paired_rate" in r else None,
                 prompts=_prompts(r), rate_ci=interval(r.get("rate_ci"), _prompts(r)),
                 delta_ci=interval(r["delta_ci"], _prompts(r)) if "delta_ci" in r else None)
            for r in t["arms"]]
    pu = p["moved_unused"]
    blocks = [title,
              para("Every rate is the share of continuations that drew again, with its n (cuts, continuations, prompts) and "
                   "a prompt-clustered bootstrap 95% CI; one prompt gives no interval (said so in the cell)."),
              table(arms, ["model", "task", "arm", "prompts", "cuts", "continuations", "rate", "rate_ci", "paired_cuts",
                           "paired", "delta_vs_asis", "delta_ci", "p_perm", "q_bh", "mean_distance"],
                    ["model", "task", "arm", "prompts", "cuts", "continuations", "rate (all)", "95% CI", "paired cuts",
                     "null-asis → arm (paired)", "Δ vs null-asis", "Δ 95% CI", "p (sign flip)", "q (BH)", "mean distance"]),
              para(f"Paper: moved to unused cells, continued drawing GLM-4 32B {num(pu['GLM-4 32B']['asis'])} → "
                   f"{num(pu['GLM-4 32B']['moved'])} (Δ {num(pu['GLM-4 32B']['delta'], True)}), Gemma 2 27B "
                   f"{num(pu['Gemma 2 27B']['asis'])} → {num(pu['Gemma 2 27B']['moved'])} (Δ {num(pu['Gemma 2 27B']['delta'], True)}), "
                   f"q = {p['q']}; the small move onto used cells Δ {', '.join(num(v, True) for v in p['moved_used_delta'].values())} "
                   "(dose-response).", "paper")]
    if t.get("counts"):
        blocks += [heading("Cuts, splices and exclusions", 2),
                   table(t["counts"], ["model", "task", "cuts", "cuts_with_rows", "continuations", "splices_byte_identical", "excluded"])]
    if t.get("strata"):
        blocks += [heading("By stratum (same-line comment; code after the cut)", 2),
                   table([r for r in t["strata"] if "delta_vs_asis" in r],
                         ["model", "task", "stratum", "arm", "paired_cuts", "paired_asis_rate", "paired_rate", "delta_vs_asis",
                          "delta_ci", "q_bh"])]
    for png in sorted(run.path.glob("interventions-*.png")):
        blocks.append(figure(png, f"{png.stem.split('-', 1)[1]}: continued drawing per arm and by displacement "
                                  "(prompt-clustered 95% CI; hollow: one prompt, no interval; n = continuations)"))
    dose = t.get("dose_response") or []
    blocks.append(heading("Dose-response: continued drawing by displacement", 2))
    if dose:
        blocks.append(table([dict(r, prompts=_prompts(r), rate_ci=interval(r.get("rate_ci"), _prompts(r))) for r in dose],
                            ["model", "task", "bin", "mean_distance", "prompts", "cuts", "continuations", "rate", "rate_ci"],
                            ["model", "task", "displacement bin (cells)", "mean displacement", "prompts", "cuts",
                             "continuations", "rate", "95% CI"]))
    else:
        blocks.append(missing("Dose-response", "no moved arm has continuations", "`ambench intervene --run RUN`"))
    blocks.append(heading("Activation patching at the cut (beyond the paper)", 2))
    if t.get("patching"):
        blocks.append(table([dict(r, prompts=_prompts(r), rate_ci=interval(r.get("rate_ci"), _prompts(r)))
                             for r in t["patching"]],
                            ["model", "task", "direction", "layer", "prompts", "cuts", "continuations", "rate", "rate_ci"],
                            ["model", "task", "direction", "patched layer", "prompts", "cuts", "continuations", "rate",
                             "95% CI"]))
    else:
        blocks.append(missing("Activation patching", _no_patching(run),
                              "`ambench patch --run RUN` (or `ambench run --patch-cuts N`)"))
    for png in sorted(run.path.glob("patching-*.png")):
        blocks.append(figure(png, f"{png.stem.split('-', 1)[1]}: continued drawing by patched layer, with the unpatched "
                                  "null-asis rate (solid grey) and moved arm's rate (dashed) for reference"))
    answers = []
    for r in t["arms"]:
        if r["arm"] != "moved-unused" or "delta_vs_asis" not in r:
            continue
        lo = (r.get("delta_ci") or [None])[0]
        sig = r.get("q_bh", 1) < 0.05 and lo is not None and lo > 0
        answers.append(f"{r['model']} ({r['task']}): moving the last statement to unused cells changes continued drawing "
                       f"{num(r['paired_asis_rate'])} → {num(r['paired_rate'])} (Δ {num(r['delta_vs_asis'], True)} "
                       f"{interval(r['delta_ci'], _prompts(r))}, q {num(r.get('q_bh'))}, {r['paired_cuts']} cuts): "
                       f"{'the model tracks the geometry in its code' if sig else 'no tracking shown at this power'}.")
    return blocks, ([{"q": "During generation, do models track the evolving geometry rather than a fixed plan? (Exp. 3)",
                      "a": " ".join(answers)}] if answers else [])


def _prompts(r: dict[str, Any]) -> Any:
    """A table row's number of prompts (rows written before issue 30 did not record it: None, shown as "–")."""
    return r.get("prompts")


def steering_table(rows: list[dict[str, Any]], n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Per (model, task, layer, position, region, strength): attempts, valid renders, prompts, the mean occupancy of the
    steered region over valid renders with its prompt-clustered 95% CI (none with one prompt), and of the rest."""
    from experiments.rates import cluster_ci

    def key_of(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["model"], r.get("task", "layout"), r["layer"], r.get("position", "last"), r["region"], r["strength"])

    out = []
    for key in sorted({key_of(r) for r in rows}):
        sel = [r for r in rows if key_of(r) == key]
        valid = [r for r in sel if r.get("valid")]
        per_prompt: dict[str, list[float]] = {}
        for r in valid:
            per_prompt.setdefault(r["prompt_id"], []).append(float(r["region_occupancy"]))
        out.append({"model": key[0], "task": key[1], "layer": key[2], "position": key[3], "region": key[4],
                    "strength": key[5], "attempts": len(sel), "valid": len(valid), "prompts": len(per_prompt),
                    "region_occupancy": float(np.mean([r["region_occupancy"] for r in valid])) if valid else None,
                    "ci": cluster_ci(per_prompt, n_boot, seed) if valid else [None, None],
                    "other_occupancy": float(np.mean([r["other_occupancy"] for r in valid])) if valid else None})
    return out


def plot_steering(table_rows: list[dict[str, Any]]) -> Any:
    """The steered region's occupancy by strength, one line per (model, layer, position, region), with 95% CI bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.4), dpi=110)
    for i, key in enumerate(sorted({(r["model"], r["layer"], r["position"], r["region"]) for r in table_rows})):
        sel = [r for r in table_rows if (r["model"], r["layer"], r["position"], r["region"]) == key
               and r["region_occupancy"] is not None]
        if not sel:
            continue
        have = [r for r in sel if r["ci"][0] is not None]
        ax.plot([r["strength"] for r in sel], [r["region_occupancy"] for r in sel], marker="o", color=f"C{i}",
                label=f"{key[0]}, layer {key[1]} at {key[2]}: {key[3]} half")
        if have:
            ax.errorbar([r["strength"] for r in have], [r["region_occupancy"] for r in have],
                        yerr=[[r["region_occupancy"] - r["ci"][0] for r in have], [r["ci"][1] - r["region_occupancy"] for r in have]],
                        color=f"C{i}", ls="none", capsize=4)
        for r in sel:
            ax.annotate(f"n={r['valid']}", (r["strength"], r["region_occupancy"]), textcoords="offset points",
                        xytext=(6, 4), fontsize=9, color=f"C{i}")
    ax.set_xlabel("steering strength (multiples of the layer's mean residual norm)", fontsize=11)
    ax.set_ylabel("occupancy of the steered region", fontsize=11)
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("steering along the probe direction (bars: prompt-clustered 95% CI; n = valid renders)", fontsize=11)
    ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def _steering(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    """Beyond the paper: generation steered along a probe's direction (stages/steer.py)."""
    title = heading("Steering along a probe direction (beyond the paper)")
    rows = run.rows(RunDir.STEERING)
    if not rows:
        return [title, missing("Steering", "the run has no steering rows: steering needs a fitted probe's layer and a "
                               "region, and no preset of `ambench run` steers",
                               "`ambench steer --run RUN --layer L --region left --strength 0 --strength 0.5` steers "
                               "along the occupancy probe's direction at layer L and adds this section")], []
    import matplotlib.pyplot as plt

    st = steering_table(rows)
    fig = plot_steering(st)
    blocks = [title,
              para("Each strength adds s × (the layer's mean residual norm) × the unit direction along which the probe's "
                   "predicted occupancy of the region grows fastest; the steered region's occupancy is averaged over valid "
                   "renders (strength 0 is the unsteered baseline)."),
              table([dict(r, ci=interval(r["ci"], r["prompts"])) for r in st],
                    ["model", "task", "layer", "position", "region", "strength", "attempts", "valid", "prompts",
                     "region_occupancy", "ci", "other_occupancy"],
                    ["model", "task", "layer", "position", "region", "strength", "attempts", "valid", "prompts",
                     "region occupancy", "95% CI", "rest of the canvas"]),
              figure_of(fig, "steering: occupancy of the steered region by strength")]
    plt.close(fig)
    answers = []
    for key in sorted({(r["model"], r["layer"], r["position"], r["region"]) for r in st}):
        sel = sorted((r for r in st if (r["model"], r["layer"], r["position"], r["region"]) == key
                      and r["region_occupancy"] is not None), key=lambda r: r["strength"])
        if len(sel) >= 2:
            a, b = sel[0], sel[-1]
            answers.append(f"{key[0]}, layer {key[1]}, {key[3]} half: occupancy {num(a['region_occupancy'])} "
                           f"{interval(a['ci'], a['prompts'])} at strength {num(a['strength'])} → "
                           f"{num(b['region_occupancy'])} {interval(b['ci'], b['prompts'])} at {num(b['strength'])} "
                           f"({b['valid']} valid renders).")
    return blocks, ([{"q": "Does steering along the probe's direction move the drawing? (beyond the paper)",
                      "a": " ".join(answers)}] if answers else [])


def _trajectory(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    """The open question: plan or state along the generation (probes at every statement boundary)."""
    title = heading("Open question: a plan ahead of the drawing, or a state that follows it?")
    rows = run.rows(RunDir.TRAJECTORY)
    if not any(r.get("probe") for r in rows):
        return [title, missing("Plan or state along the generation", "it was not asked for",
                               "`ambench run --trajectory` (on in the paper preset), or `ambench trajectory --run RUN --model M`")], []
    from experiments.stages.trajectory import verdict

    blocks = [title,
              para("At boundary 0 (the last prompt token) and after each top-level drawing statement of the greedy attempts, "
                   "probes decode (a) the canvas drawn so far, (b) the final canvas, and, without activations, the final canvas "
                   "from the drawn canvas alone (state). final-state is what the activations hold of the final canvas beyond "
                   "the code drawn so far (paired prompt-bootstrap CI).")]
    answers = []
    for (model, task) in sorted({(r["model"], r["task"]) for r in rows if r.get("probe")}):
        mine = [r for r in rows if (r["model"], r["task"]) == (model, task)]
        blocks += [heading(f"{model} ({task})", 2),
                   table([r for r in mine if r.get("probe")], ["boundary", "n", "probe", "r2", "ci", "layers"]),
                   figure(run.file(f"{RunDir.TRAJECTORY_PLOTS}/{safe_name(model)}-{safe_name(task)}.png"),
                          f"plan or state: {model}")]
        answers.append(f"{model}: {verdict(mine)}.")
    return blocks, [{"q": "Do models hold the final canvas before they draw it? (open question)", "a": " ".join(answers)}]


def _consistency(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    """Appendix E.2/E.3: DINO concept consistency per model and tier, and the entropy confound across models."""
    title = heading("Appendix: concept consistency (DINO) and the entropy confound")
    rows = run.rows(RunDir.CONSISTENCY)
    coh = [r for r in rows if r.get("kind") == "coherence"]
    if not coh:
        return [title, missing("DINO concept consistency", "it needs DINO weights, which are never downloaded",
                               "`ambench run --dino-folder DIR` with a local DINO ViT folder, or "
                               "`ambench consistency --run RUN --dino-folder DIR`")], []
    from experiments.stages.consistency import PAPER

    blocks = [title,
              para("Per model and tier: mean DINO distance between renders of the same prompt (d_intra) and of different "
                   "prompts (d_inter), their ratio (lower: the model draws one concept per prompt), the silhouette of the "
                   "prompts as clusters, and the local-structure distance between attempts of a prompt."),
              table(coh, ["model", "arm", "tier", "n_renders", "n_prompts", "d_intra", "d_inter", "ratio", "silhouette",
                          "local_distance"])]
    answers = []
    for c in [r for r in rows if r.get("kind") == "confound"]:
        ent = [r for r in rows if r.get("kind") == "entropy" and r.get("arm") == c["arm"]]
        blocks.append(table(ent, ["model", "arm", "mean_entropy", "local_distance", "fitted", "residual"]))
        rho = "not computable" if c["rho"] is None else f"{num(c['rho'])} (p = {num(c['p'])})"
        note = f" ({c['note']})" if c.get("note") else ""
        answers.append(f"arm {c['arm']}: Spearman rho between mean token entropy and local-structure distance over "
                       f"{c['n_models']} models = {rho}{note}.")
    for r in rows:
        if r.get("kind") == "map":
            blocks.append(figure(run.file(f"{RunDir.CONSISTENCY_PLOTS}/map-{safe_name(r['model'])}-{safe_name(r['arm'])}.png"),
                                 f"DINO map of {r['model']}, {r['arm']}"))
    blocks.append(para(f"Paper: rho = {PAPER['rho']} over {PAPER['n_models']} models (p {PAPER['p']}); entropy-adjusted "
                       "residuals " + ", ".join(f"{k} {num(v, True)}" for k, v in PAPER["residual"].items()) + ".", "paper"))
    if not answers:
        answers = [f"{len({r['model'] for r in coh})} model(s) analysed; the confound needs at least 3 models."]
    return blocks, [{"q": "Is local-structure consistency more than token entropy? (appendix E.3)", "a": " ".join(answers)}]


def _mosaics(run: RunDir) -> list[Block]:
    from bench.canvas.png import png_bytes, scale_for
    from bench.layout.prompts import by_id
    from experiments.rundir import arm_of
    from experiments.stages.render import read_renders, row_key

    gens = run.rows(RunDir.GENERATIONS)
    if not gens:
        return []
    renders = read_renders(run)
    prompts = by_id()
    grid: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in gens:
        if r["task"] != "layout":
            continue
        x = renders.get(row_key(r))
        if x is None:
            continue
        arm = f"{r['model']} {arm_of(r)}"
        label = f"{arm} sample {r['sample']}: {x['outcome']}" + (" (trivial)" if x["trivial"] else "")
        if x["outcome"] == "ok":  # a mosaic as an inline PNG of 120 pixels whatever its resolution
            c = {"label": label, "data": base64.b64encode(png_bytes(x["pixels"], scale_for(x["pixels"], 120))).decode()}
        else:
            c = {"label": label, "data": None, "outcome": x["outcome"], "reason": x["reason"]}
        grid.setdefault(r["prompt_id"], {}).setdefault(arm, []).append(c)
    if not grid:
        return []
    items = [{"id": pid, "text": prompts[pid].text if pid in prompts else pid,
              "arms": [{"name": a, "cells": c} for a, c in sorted(grid[pid].items())]} for pid in sorted(grid)]
    return [heading("Layout mosaics"), {"kind": "mosaics", "prompts": items}]


def _config(run: RunDir, title: str) -> dict[str, Any] | None:
    cfg = run.json(RunDir.CONFIG) or {}
    study = cfg.get("stages", {}).get("study", {})
    if not study:
        return None
    rows = [{"setting": k, "value": v} for k, v in sorted(study.get("config", {}).items())]
    rows += [{"setting": f"version: {k}", "value": v} for k, v in sorted(study.get("versions", {}).items())]
    seen = set()
    for k, v in sorted(cfg.get("stages", {}).items()):
        m = v.get("model") if k.startswith("generate/") else None
        if m and m["name"] not in seen:
            seen.add(m["name"])
            rows.append({"setting": f"model: {m['name']}", "value": f"{m['architecture']}, {m['n_layers']} layers, d_model "
                         f"{m['d_model']}, {m['dtype']} on {m['device']}, weights {m['weights_digest']}"})
    return {"title": title, "table": table(rows, ["setting", "value"])}


SECTIONS: tuple[Section, ...] = (_translation, _layout, _media, _tier_gaps, _probes, _selectivity, _interventions, _steering,
                                 _attention, _trajectory, _consistency)


# --------------------------------------------------------------------------- the methods, validated


def is_run(path: Path) -> bool:
    """A run directory: it has the settings record or attempts."""
    return (Path(path) / RunDir.CONFIG).is_file() or (Path(path) / RunDir.GENERATIONS).is_file()


def organism_runs(path: Path) -> list[Path]:
    """The run directories of `path`: itself when it is one, else the runs in it (the organisms preset's parts)."""
    path = Path(path)
    if is_run(path):
        return [path]
    return sorted(p for p in path.iterdir() if is_run(p)) if path.is_dir() else []


def validation_rows(run: Path) -> list[dict[str, Any]]:
    """The known-answer verdicts of one run (`experiments.verdicts.verdicts`): empty for a run whose models
    declare no constructed answer (any real model)."""
    from experiments.verdicts import verdicts

    return verdicts(run)


def _short(model: str) -> str:
    """An organism's name as verdict rows give it (`organism:NAME@SEED` -> NAME; a folder -> its name)."""
    return model.split(":", 1)[1].split("@")[0] if model.startswith("organism:") else Path(model).name or model


_VERDICT = {True: ("yes", "recovered"), False: ("NO", "not-recovered"), None: ("not measured", "")}


def _validated(groups: list[tuple[Path, list[dict[str, Any]]]]) -> tuple[dict[str, Any] | None, list[Answer]]:
    """The section of verdicts, one group per organism run, with its probe plots and patching profile beside it."""
    groups = [(run, rows) for run, rows in groups if rows]
    if not groups:
        return None, []
    out = []
    for run, rows in groups:
        probed = {r["organism"] for r in rows if r.get("kind") in PROBE_KINDS}
        figures: list[Block | None] = []
        models = sorted({r["model"] for r in reading(run).rows(RunDir.PROBES) if r.get("features") == "resid"})
        for m in (m for m in models if _short(m) in probed):
            for task in ("layout", "translation"):
                figures.append(figure(run / RunDir.PROBE_PLOTS / f"{safe_name(m)}-{task}.png",
                                      f"{_short(m)}: per-layer R² of the occupancy probe ({task}), text baseline dashed"))
        if any("patching" in r["method"] for r in rows):
            figures.append(figure(run / "patching-layout.png",
                                  f"{run.name}: activation patching profile (continued drawing by patched layer)"))
        table_rows = [{**r, "verdict": _VERDICT[r["recovered"]][0], "css": _VERDICT[r["recovered"]][1]} for r in rows]
        big = [r["values"] for r in rows if isinstance(r.get("values"), dict) and (r["values"].get("delta_r2") or 0) > 1]
        notes = [n["text"] for n in [delta_note(big)] if n]
        out.append({"title": f"{run.name} ({', '.join(sorted({r['organism'] for r in rows}))})", "rows": table_rows,
                    "figures": [f for f in figures if f], "notes": notes})
    rows = [r for _, rs in groups for r in rs]
    yes = [r for r in rows if r["recovered"] is True]
    no = [r for r in rows if r["recovered"] is False]
    unmeasured = [r for r in rows if r["recovered"] is None]
    missed = "; ".join(f"{r['organism']}, {r['method']}" for r in no)
    answer = (f"{len(yes)} of {len(rows)} checks recovered the answer constructed into the organism"
              + (f"; NOT recovered: {missed}" if no else "")
              + (f"; {len(unmeasured)} not measured (no rows for them)" if unmeasured else "")
              + ". Every verdict is computed from the organism runs' result rows, with thresholds that can fail.")
    intro = ("Small models trained here with a constructed plan (docs/organisms.md): each method below must recover what was "
             "built into them before its number on a real model means anything. The verdicts are computed from the runs' "
             "rows by experiments.organisms (the same code as known_answers.md); measured values with their 95% CIs.")
    return ({"intro": intro, "groups": out},
            [{"q": "Do the methods recover answers built into model organisms? (the methods, validated)", "a": answer}])


# --------------------------------------------------------------------------- the page


def text_node(v: Any) -> Any:
    """A value escaped for element content: <, > and & (what can open markup there); quotes stay as they are,
    so "the prompt's words" reads the same in the HTML source. Attribute values keep Jinja2's full escaping."""
    import html

    from markupsafe import Markup

    return Markup(html.escape(str(v), quote=False))


def contents(runs: list[dict[str, Any]], validated: bool, config: bool) -> list[dict[str, Any]]:
    """The table of contents: the summary, the validated methods, each run and its sections (the level-1 headings of
    its blocks, which get their anchor ids here), the configuration. A page of 10,000 pixels needs one."""
    toc: list[dict[str, Any]] = [{"id": "summary", "text": "Summary", "children": []}]
    if validated:
        toc.append({"id": "validated", "text": "The methods, validated: known answers in model organisms", "children": []})
    for i, run in enumerate(runs, 1):
        children = []
        for j, b in enumerate(run["blocks"]):
            if b.get("kind") == "heading" and b.get("level") == 1:
                b["id"] = f"run-{i}-section-{j}"
                children.append({"id": b["id"], "text": b["text"]})
        toc.append({"id": f"run-{i}", "text": run["title"], "children": children})
    if config:
        toc.append({"id": "configuration", "text": "Configuration", "children": []})
    return toc


def render_page(paths: Sequence[Path]) -> str:
    """The report of `paths` (run directories, or folders of runs such as the organisms preset's output) as one
    HTML page. A folder of runs contributes its known-answer verdicts; a run contributes its results and, when its
    models declare a constructed answer, its verdicts too."""
    import jinja2

    paper = paper_values()
    summary: list[Answer] = []
    groups: list[tuple[Path, list[dict[str, Any]]]] = []
    runs: list[dict[str, Any]] = []
    config: list[dict[str, Any]] = []
    answers_by_run: list[tuple[str, list[Answer]]] = []
    for path in map(Path, paths):
        single = is_run(path)
        for run in organism_runs(path):
            groups.append((run, validation_rows(run)))
        if not single:
            continue
        rd = reading(path)
        models = sorted({r["model"] for r in rd.rows(RunDir.GENERATIONS)})
        blocks: list[Block] = []
        answers: list[Answer] = []
        for section in SECTIONS:
            b, a = section(rd, paper)
            blocks += [x for x in b if x]
            answers += a
        blocks += _mosaics(rd)
        name = path.resolve().name
        runs.append({"title": f"Results: {', '.join(models) or 'no models yet'} (run {name})", "blocks": blocks})
        answers_by_run.append((name, answers))
        c = _config(rd, f"run {name}")
        if c:
            config.append(c)
    validated, v_answers = _validated(groups)
    summary += v_answers
    for name, answers in answers_by_run:
        summary += [{"q": a["q"] + (f" [run {name}]" if len(answers_by_run) > 1 else ""), "a": a["a"]} for a in answers]
    if not validated:
        summary.append({"q": "Do the methods recover answers built into model organisms? (the methods, validated)",
                        "a": "Not shown on this page: `ambench run --preset organisms --out ORG` validates every method on "
                             "model organisms, and `ambench report ORG RUN --out DIR` puts those verdicts beside this run."})
    toc = contents(runs, validated is not None, bool(config))
    env = jinja2.Environment(loader=jinja2.PackageLoader("experiments", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["text"] = text_node
    intro = ("The paper's questions and the answers of these runs. Each of the paper's tables below is reproduced from a run "
             f"with the paper's published values beside it for reference: {paper['source']}.")
    return env.get_template("report.html.j2").render(title="AM-Bench report", intro=intro, summary=summary,
                                                     validated=validated, runs=runs, config=config, toc=toc)


def write_report(run: Any) -> Path:
    """`RUN/report/index.html` for one run (under the run's lock)."""
    with writing(run) as rd:
        rd.write_text(RunDir.REPORT, render_page([rd.path]))
        return rd.file(RunDir.REPORT)


def write_combined(paths: Sequence[Path], out: Path) -> Path:
    """`out/index.html`: the report of several runs (`ambench report RUN... --out DIR`), written atomically; the
    runs are only read."""
    page = render_page(paths)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".index-", suffix=".html")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(page)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the page from a web server or another user
    os.replace(tmp, out / "index.html")
    return out / "index.html"


__all__ = ["SECTIONS", "contents", "delta_note", "interval", "is_run", "organism_runs", "paper_values", "render_page", "validation_rows", "write_combined",
           "write_report"]
