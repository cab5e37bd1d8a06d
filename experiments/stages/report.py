"""`RUN/report/index.html`: one self-contained page (every image inline) that answers the paper's questions.

Order: a short summary (the paper's questions, this run's answers with CIs, one sentence each saying
what the numbers support); then the paper's tables reproduced from the run, each with the paper's
published values beside it for reference (`experiments/data/paper.json`): translation PIoU and
validity, layout validity/triviality and judge scores by tier, the SVG medium delta, probes
(own/shared/specific, text baseline, ceiling, Delta R^2 and q), intervention arms (rates, Delta, q),
activation patching; then the mosaics and plots; the configuration last, as a table. The page has no
timestamps, so the same run gives the same bytes.
"""

from __future__ import annotations

import base64
import html
import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from experiments.rundir import RunDir, reading, safe_name, writing


def paper_values() -> dict[str, Any]:
    return json.loads(resources.files("experiments").joinpath("data/paper.json").read_text(encoding="utf-8"))


def _img_file(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _img_pixels(pixels: np.ndarray, alt: str, side: int = 120) -> str:
    """A mosaic as an inline PNG of `side` pixels whatever its resolution (24 cells x5, 48 cells x2.5 -> x2)."""
    from bench.canvas.png import png_bytes, scale_for

    data = base64.b64encode(png_bytes(pixels, scale_for(pixels, side))).decode()
    return f'<img class="mosaic" alt="{html.escape(alt)}" title="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _fmt(v: Any) -> str:
    if v is None:
        return "&ndash;"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return html.escape(", ".join(f"{k}: {x}" for k, x in v.items()))
    return html.escape(str(v))


def _table(rows: list[dict[str, Any]], cols: list[str], heads: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in (heads or cols))
    body = "".join("<tr>" + "".join(f"<td>{_fmt(r.get(c))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _ci(lo: Any, hi: Any) -> str:
    return f"[{_fmt(lo)}, {_fmt(hi)}]"


def _read(run: RunDir, name: str) -> list[dict[str, Any]]:
    return run.rows(name)


def _json(run: RunDir, name: str) -> Any:
    return run.json(name)


# --------------------------------------------------------------------------- sections


def _translation(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    from experiments.stages.translation import summarise

    rows = _read(run, RunDir.TRANSLATION_SCORES)
    table = [{"model": m, **summarise([r for r in rows if r["model"] == m])} for m in sorted({r["model"] for r in rows})]
    if not table:
        return [], []
    p = paper["translation"]
    answers = []
    for t in table:
        verdict = "passes" if t["passes_gate"] else "fails"
        answers.append(f"{html.escape(t['model'])}: median PIoU {t['piou_median']:.3f} over {t['attempts']} attempts "
                       f"({100 * t['pass_rate']:.1f}% &ge; {p['tau']}); it {verdict} the translation gate "
                       f"(paper: median {p['median_piou']:.3f} for all eight models).")
    ref = ", ".join(f"{k} {v:.3f}" for k, v in p["mean_piou"].items())
    section = ("<h2>Exp. 1 control: translation (median PIoU &ge; 0.6)</h2>" +
               _table(table, ["model", "attempts", "valid_rate", "piou_mean", "piou_median", "pass_rate", "passes_gate"]) +
               f"<p class='paper'>Paper: median PIoU {p['median_piou']:.3f} for every model, {100 * p['pass_rate']:.1f}% of "
               f"{p['attempts']:,} attempts pass; mean PIoU {ref}; null baseline mean {p['null_mean']}, 95th percentile "
               f"{p['null_p95']}.</p>")
    return [section], [{"q": "Is writing the code the bottleneck? (translation gate)", "a": " ".join(answers)}]


def _layout(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    lt = _json(run, RunDir.LAYOUT_TABLE)
    parts, answers = [], []
    p = paper["layout"]
    if lt:
        parts.append("<h2>Exp. 1: layout validity and triviality per tier</h2>" +
                     _table(lt, ["model", "protocol", "tier", "attempts", "valid_rate", "trivial_rate", "trivial_of_valid"]) +
                     f"<p class='paper'>Paper: validity above {100 * p['validity_min']:.0f}% for every model and tier, "
                     f"{100 * p['trivial_rate']:.1f}% trivial overall (CodeLlama 34B on T1: {100 * p['trivial_codellama_t1']:.1f}%).</p>")
        for r in (x for x in lt if x["tier"] == "all"):
            good = r["valid"] - r["trivial"]
            answers.append(f"{html.escape(r['model'])} ({html.escape(r['protocol'])}): {good}/{r['attempts']} layout attempts "
                           f"valid and non-trivial ({100 * good / max(r['attempts'], 1):.1f}%).")
    js = _read(run, RunDir.JUDGE_SCORES)
    if js:
        from experiments.stages.judge import inversion_table, pass_at_k_table  # noqa: I001

        inv = inversion_table(js)
        parts.append("<h3>Judges</h3>" + _table(pass_at_k_table(js), ["judge", "model", "protocol", "prompts", "pass@1", "pass@3", "pass@5", "pass@10"]))
        parts.append(_table(inv, ["judge", "model", "protocol", "T2", "T3", "inverted"]) +
                     f"<p class='paper'>Paper (pooled): judge 1 T2 {p['judge1_tier']['T2']} vs T3 {p['judge1_tier']['T3']}, judge 2 "
                     f"T2 {p['judge2_tier']['T2']} vs T3 {p['judge2_tier']['T3']} (the T2/T3 inversion); pass@10 "
                     f"{p['pass_at_10'][0]}&ndash;{p['pass_at_10'][1]}.</p>")
        for r in inv:
            answers.append(f"{html.escape(r['judge'])} on {html.escape(r['model'])}: T2 {r['T2']:.2f}, T3 {r['T3']:.2f} "
                           f"({'inverted, as in the paper' if r['inverted'] else 'not inverted'}).")
    elif lt:
        answers.append("No judge scores in this run (give --judge-url): validity and triviality only.")
    return parts, ([{"q": "How well do models compose open-ended layouts?", "a": " ".join(answers)}] if answers else [])


def _media(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    rows = _json(run, RunDir.MEDIA_TABLE) or []
    if not rows:
        return [], []
    p = paper["svg"]
    table = [{**r, "ci": r["ci"]} for r in rows]
    answers = [f"{html.escape(r['model'])}, {html.escape(r['metric'])}: {html.escape(r['b'])} &minus; {html.escape(r['a'])} = "
               f"{r['delta']:+.3f} {_ci(*r['ci'])} over {r['prompts']} prompts "
               f"({'the CI excludes 0' if r['ci'][0] > 0 or r['ci'][1] < 0 else 'the CI includes 0'})." for r in rows]
    section = ("<h2>Exp. 2: the output medium (paired per-prompt delta, prompt-clustered bootstrap CI)</h2>" +
               _table(table, ["model", "metric", "a", "b", "prompts", "delta", "ci"]) +
               f"<p class='paper'>Paper: SVG &minus; canvas judge score {p['pooled_delta']:+.2f} {_ci(*p['pooled_ci'])} pooled "
               f"(resolution-matched; native {p['native_delta']:+.2f}); CodeLlama 34B {p['per_model']['CodeLlama 34B']:+.2f}, "
               f"Qwen2.5-Coder 32B {p['per_model']['Qwen2.5-Coder 32B']:+.2f}.</p>")
    return [section], [{"q": "Does the output medium change what models can express? (Exp. 2)", "a": " ".join(answers)}]


def _tier_gaps(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Issue 16: the T2/T3 gap per medium and its difference between media (layout.tier_gap_table)."""
    rows = _json(run, RunDir.TIER_GAPS) or []
    if not rows:
        return [], []
    p = paper["layout"]
    gaps = [r for r in rows if r["kind"] == "gap"]
    contrasts = [r for r in rows if r["kind"] == "contrast"]
    section = ("<h2>Is the T2/T3 inversion a property of the 24x24 medium? (beyond the paper)</h2>"
               "<p>T3 &minus; T2 of the per-prompt score (positive: compositions beat icons, the paper's inversion), and its "
               "difference between each medium and the paper's canvas over the prompts both scored; 95% CIs from a prompt "
               "bootstrap stratified by tier and paired across media.</p>" +
               _table(gaps, ["metric", "model", "protocol", "medium", "n_T2", "n_T3", "T2", "T3", "gap", "ci", "inverted"]) +
               _table(contrasts, ["metric", "model", "protocol", "a", "b", "n_T2", "n_T3", "gap_a", "gap_b", "difference", "ci"],
                      ["metric", "model", "protocol", "A", "B", "T2 prompts", "T3 prompts", "gap A", "gap B", "gap B − gap A",
                       "95% CI"]) +
               f"<p class='paper'>Paper (24x24 canvas only, pooled): judge 1 T2 {p['judge1_tier']['T2']} vs T3 "
               f"{p['judge1_tier']['T3']}, judge 2 T2 {p['judge2_tier']['T2']} vs T3 {p['judge2_tier']['T3']}; the paper "
               "attributes the inversion to the 24x24 resolution and did not test another medium.</p>")
    answers = [f"{html.escape(r['model'])}, {html.escape(r['metric'])}: T3 &minus; T2 {r['gap_a']:+.3f} on {html.escape(r['a'])}, "
               f"{r['gap_b']:+.3f} on {html.escape(r['b'])}; difference {r['difference']:+.3f} {_ci(*r['ci'])} over "
               f"{r['n_T2']}+{r['n_T3']} prompts ("
               f"{'the gap depends on the medium' if r['ci'][0] > 0 or r['ci'][1] < 0 else 'no medium effect on the gap shown'})."
               for r in contrasts]
    return [section], ([{"q": "Is the T2/T3 inversion a property of the 24x24 medium?", "a": " ".join(answers)}]
                       if answers else [])


def _probes(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    pr = _read(run, RunDir.PROBES)
    if not pr:
        return [], []
    p = paper["probes"]
    parts, answers = ["<h2>Exp. 3, stage 1: is a layout plan decodable before generation?</h2>"], []
    for task in ("layout", "translation"):
        delta = [r for r in pr if r.get("features") == "delta" and r["task"] == task]
        info = [r for r in pr if r.get("task") == task and r.get("kind") in ("targets", "skipped", "ceiling", "shared_coverage")]
        if not delta and not info:
            continue
        role = "headline" if task == "layout" else "positive control: the prompt states the geometry"
        parts.append(f"<h3>{task} ({role})</h3>")
        parts.append(_table(info, ["model", "kind", "target", "kept", "dropped", "reason", "n_prompts", "r_half", "ceiling",
                                   "shared_prompts", "contributors"]))
        if delta:
            parts.append(_table(delta, ["model", "target", "position", "n_prompts", "r2_resid", "r2_text", "delta_r2", "delta_ci",
                                        "p_perm", "q_bh", "n_perm", "chosen_layers"],
                                ["model", "target", "position", "prompts", "R² best layer", "R² text (TF-IDF)", "ΔR²",
                                 "ΔR² 95% CI", "p (perm.)", "q (BH)", "permutations", "layer per outer fold"]))
        if task == "layout":
            parts.append(f"<p class='paper'>Paper (layout, 8 models): mean &Delta;R&sup2; {p['delta_r2_mean']:+.3f} (range "
                         f"{p['delta_r2_range'][0]:+.3f} to {p['delta_r2_range'][1]:+.3f}), every model q &le; {p['q_max']}; shared "
                         f"component R&sup2; {', '.join(f'{k} {v:.3f}' for k, v in p['shared_r2'].items())} (text baseline "
                         f"{', '.join(f'{v:.3f}' for v in p['shared_text_r2'].values())}); specific component R&sup2; "
                         f"{', '.join(f'{v:+.3f}' for v in p['specific_r2'].values())}; split-half ceiling "
                         f"{p['ceiling_range'][0]}&ndash;{p['ceiling_range'][1]}.</p>")
        for r in delta:
            if r["target"] != "own" or task != "layout":
                continue
            sig = r.get("q_bh") is not None and r["q_bh"] < 0.05 and r["delta_ci"][0] is not None and r["delta_ci"][0] > 0
            answers.append(f"{html.escape(r['model'])} at the {r['position']} token: &Delta;R&sup2; {_fmt(r['delta_r2'])} "
                           f"{_ci(*r['delta_ci'])}, q {_fmt(r.get('q_bh'))} over {r['n_prompts']} prompts: "
                           f"{'decodable above the text baseline' if sig else 'not shown above the text baseline at this power'}.")
        if task == "layout":
            for m in sorted({r["model"] for r in delta}):
                best = {r["target"]: r for r in delta if r["model"] == m and r["position"] == "last"}
                if "shared" in best and "specific" in best:
                    answers.append(f"{html.escape(m)} (last token): shared component R&sup2; {_fmt(best['shared']['r2_resid'])}, "
                                   f"specific {_fmt(best['specific']['r2_resid'])} (paper: only the shared component is decodable).")
    plots = run.file(RunDir.PROBE_PLOTS)
    for png in sorted(plots.glob("*.png")) if plots.is_dir() else []:
        parts.append(_img_file(png, png.stem))
    return parts, ([{"q": "Is a coarse layout plan decodable before generation, above the text baseline? (Exp. 3)",
                     "a": " ".join(answers)}] if answers else [])


def _selectivity(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Issue 16: the model x model decoding table and the own-minus-others gap (stages/selectivity.py)."""
    rows = _read(run, RunDir.SELECTIVITY)
    if not rows:
        return [], []
    p = paper["probes"]
    gaps = [r for r in rows if r["kind"] in ("gap", "mean_gap")]
    section = ("<h3>Cross-model selectivity: does a model decode its own layouts better than the others'?</h3>"
               "<p>R&sup2; of the best-layer probe from one model's activations (row) to each model's consensus layouts "
               "(target); the gap is own &minus; the mean over the other models; 95% CIs from one prompt-clustered "
               "bootstrap across every cell.</p>" +
               _table(gaps, ["task", "position", "kind", "model", "n_models", "own_r2", "others_mean_r2", "gap", "ci", "own_best"],
                      ["task", "position", "row", "model (activations)", "models", "R² own", "R² others (mean)", "gap",
                       "95% CI", "own best"]) +
               _table([r for r in rows if r["kind"] == "cell"],
                      ["task", "position", "model", "target", "n_prompts", "r2", "ci", "chosen_layers"],
                      ["task", "position", "activations of", "targets of", "prompts", "R² (best layer)", "95% CI",
                       "layer per outer fold"]) +
               "".join(f"<p>{html.escape(r['task'])}: skipped ({html.escape(r['reason'])})</p>" for r in rows if r["kind"] == "skipped") +
               f"<p class='paper'>Paper (8 models): mean own-minus-others gap {p['cross_model_gap']:+.3f}; own layouts best "
               f"decoded for {p['cross_model_own_best']['own_best']} of {p['cross_model_own_best']['models']} models "
               f"({p['cross_model_own_best']['which']}); GLM-4 9B {p['cross_model_gap_lowest']['GLM-4 9B']:+.3f}.</p>")
    answers = []
    for r in (x for x in rows if x["kind"] == "mean_gap"):
        lo, hi = r["ci"]
        verdict = ("models decode their own layouts better than the others'" if lo is not None and lo > 0 else
                   "no model-specific layout shown: models decode one another's layouts about as well as their own")
        answers.append(f"{html.escape(r['task'])}, {html.escape(r['position'])} token: mean own-minus-others gap {_fmt(r['gap'])} "
                       f"{_ci(lo, hi)} over {r['n_models']} models, own best for {r['own_best']} ({verdict}).")
    return [section], ([{"q": "Do models decode their own layouts better than other models' (cross-model selectivity)?",
                         "a": " ".join(answers)}] if answers else [])


def _attention(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Issue 16: the attention focus of drawing statements on the prompt's spatial words (stages/attention.py)."""
    table = _json(run, RunDir.ATTENTION_TABLE) or []
    if not table:
        return [], []
    parts = ["<h2>Attention focus on the prompt's spatial words, quantified (beyond the paper)</h2>"
             "<p>Per valid attempt: the attention (mean over heads) of its drawing statements' tokens on the request's "
             "spatial words, as a share of their attention on the prompt, divided by the share uniform attention over "
             "the prompt gives (1 = no focus), averaged over statements and layers; its distribution over attempts, a "
             "prompt-clustered 95% CI of the mean, and the layer where the mean peaks.</p>",
             _table(table, ["model", "task", "attempts", "prompts", "mean", "ci", "median", "q1", "q3", "peak_layer", "skipped"],
                    ["model", "task", "attempts", "prompts", "mean focus", "95% CI", "median", "25%", "75%", "peak layer",
                     "skipped (reason: attempts)"]),
             "<p class='paper'>Paper: attention maps of GLM-4 32B look more tightly focused than CodeLlama 34B's, from the "
             "most focused of several candidate generations; illustrative, not a statistic.</p>"]
    plot = run.file(RunDir.ATTENTION_PLOT)
    if plot.is_file():
        parts.append(_img_file(plot, "attention focus per layer"))
    answers = []
    for t in (t for t in table if t.get("mean") is not None):
        lo, hi = t["ci"]
        answers.append(f"{html.escape(t['model'])}: focus {_fmt(t['mean'])} {_ci(lo, hi)} (median {_fmt(t['median'])}, IQR "
                       f"{_fmt(t['q1'])}&ndash;{_fmt(t['q3'])}) over {t['attempts']} attempts; "
                       + ("the drawing statements attend to the spatial words more than uniformly." if lo is not None and lo > 1
                          else "no focus above uniform attention shown."))
    return parts, ([{"q": "How much do the drawing statements attend to the prompt's spatial words?", "a": " ".join(answers)}]
                   if answers else [])


def _interventions(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    t = _json(run, RunDir.INTERVENTIONS_TABLE)
    if not t:
        return [], []
    p = paper["interventions"]
    arms = [dict(r, paired=f"{r['paired_asis_rate']:.3f} → {r['paired_rate']:.3f}" if "paired_rate" in r else None)
            for r in t["arms"]]
    parts = ["<h2>Exp. 3, stage 2: do models track the geometry already in their code?</h2>",
             _table(arms, ["model", "task", "arm", "cuts", "continuations", "rate", "rate_ci", "paired_cuts", "paired",
                           "delta_vs_asis", "delta_ci", "p_perm", "q_bh", "mean_distance"],
                    ["model", "task", "arm", "cuts", "continuations", "rate (all)", "95% CI", "paired cuts",
                     "null-asis → arm (paired)", "Δ vs null-asis", "Δ 95% CI", "p (sign flip)", "q (BH)", "mean distance"]),
             f"<p class='paper'>Paper: moved to unused cells, continued drawing GLM-4 32B {p['moved_unused']['GLM-4 32B']['asis']:.3f} → "
             f"{p['moved_unused']['GLM-4 32B']['moved']:.3f} (&Delta; {p['moved_unused']['GLM-4 32B']['delta']:+.3f}), Gemma 2 27B "
             f"{p['moved_unused']['Gemma 2 27B']['asis']:.3f} → {p['moved_unused']['Gemma 2 27B']['moved']:.3f} "
             f"(&Delta; {p['moved_unused']['Gemma 2 27B']['delta']:+.3f}), q = {p['q']}; the small move onto used cells "
             f"&Delta; {', '.join(f'{v:+.3f}' for v in p['moved_used_delta'].values())} (dose-response).</p>"]
    if t.get("counts"):
        parts.append("<h3>Cuts, splices and exclusions</h3>" +
                     _table(t["counts"], ["model", "task", "cuts", "cuts_with_rows", "continuations", "splices_byte_identical", "excluded"]))
    if t.get("strata"):
        parts.append("<h3>By stratum (same-line comment; code after the cut)</h3>" +
                     _table([r for r in t["strata"] if "delta_vs_asis" in r],
                            ["model", "task", "stratum", "arm", "paired_cuts", "paired_asis_rate", "paired_rate", "delta_vs_asis",
                             "delta_ci", "q_bh"]))
    if t.get("patching"):
        parts.append("<h3>Activation patching at the cut (beyond the paper)</h3>" +
                     _table(t["patching"], ["model", "task", "direction", "layer", "cuts", "rate"]))
    for png in sorted(run.path.glob("interventions-*.png")) + sorted(run.path.glob("patching-*.png")):
        parts.append(_img_file(png, png.stem))
    answers = []
    for r in t["arms"]:
        if r["arm"] != "moved-unused" or "delta_vs_asis" not in r:
            continue
        sig = r.get("q_bh", 1) < 0.05 and r["delta_ci"][0] > 0
        answers.append(f"{html.escape(r['model'])} ({r['task']}): moving the last statement to unused cells changes continued "
                       f"drawing {r['paired_asis_rate']:.3f} → {r['paired_rate']:.3f} (&Delta; {r['delta_vs_asis']:+.3f} "
                       f"{_ci(*r['delta_ci'])}, q {_fmt(r.get('q_bh'))}, {r['paired_cuts']} cuts): "
                       f"{'the model tracks the geometry in its code' if sig else 'no tracking shown at this power'}.")
    return parts, ([{"q": "During generation, do models track the evolving geometry rather than a fixed plan? (Exp. 3)",
                     "a": " ".join(answers)}] if answers else [])


def _trajectory(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The open question: plan or state along the generation (probes at every statement boundary)."""
    rows = _read(run, RunDir.TRAJECTORY)
    if not any(r.get("probe") for r in rows):
        return [], []
    from experiments.stages.trajectory import verdict

    parts = ["<h2>Open question: a plan ahead of the drawing, or a state that follows it?</h2>",
             "<p>At boundary 0 (the last prompt token) and after each top-level drawing statement of the greedy attempts, "
             "probes decode (a) the canvas drawn so far, (b) the final canvas, and, without activations, the final canvas "
             "from the drawn canvas alone (<em>state</em>). <em>final-state</em> is what the activations hold of the "
             "final canvas beyond the code drawn so far (paired prompt-bootstrap CI).</p>"]
    answers = []
    for (model, task) in sorted({(r["model"], r["task"]) for r in rows if r.get("probe")}):
        mine = [r for r in rows if (r["model"], r["task"]) == (model, task)]
        table = [{**r, "ci": _ci(*r["ci"])} for r in mine if r.get("probe")]
        parts.append(f"<h3>{html.escape(model)} ({html.escape(task)})</h3>" +
                     _table(table, ["boundary", "n", "probe", "r2", "ci", "layers"]))
        f = run.file(f"{RunDir.TRAJECTORY_PLOTS}/{safe_name(model)}-{safe_name(task)}.png")
        if f.is_file():
            parts.append(_img_file(f, f"plan or state: {model}"))
        answers.append(f"{html.escape(model)}: {html.escape(verdict(mine))}.")
    return parts, [{"q": "Do models hold the final canvas before they draw it? (open question)", "a": " ".join(answers)}]


def _consistency(run: RunDir, paper: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Appendix E.2/E.3: DINO concept consistency per model and tier, and the entropy confound across models."""
    rows = _read(run, RunDir.CONSISTENCY)
    coh = [r for r in rows if r.get("kind") == "coherence"]
    if not coh:
        return [], []
    from experiments.stages.consistency import PAPER

    parts = ["<h2>Appendix: concept consistency (DINO) and the entropy confound</h2>",
             "<p>Per model and tier: mean DINO distance between renders of the same prompt (d_intra) and of different "
             "prompts (d_inter), their ratio (lower: the model draws one concept per prompt), the silhouette of the "
             "prompts as clusters, and the local-structure distance between attempts of a prompt.</p>",
             _table(coh, ["model", "arm", "tier", "n_renders", "n_prompts", "d_intra", "d_inter", "ratio", "silhouette",
                          "local_distance"])]
    answers = []
    for c in [r for r in rows if r.get("kind") == "confound"]:
        ent = [r for r in rows if r.get("kind") == "entropy" and r.get("arm") == c["arm"]]
        parts.append(_table(ent, ["model", "arm", "mean_entropy", "local_distance", "fitted", "residual"]))
        rho = "not computable" if c["rho"] is None else f"{c['rho']:.3f} (p = {c['p']:.3g})"
        note = f" ({html.escape(c['note'])})" if c.get("note") else ""
        answers.append(f"arm {html.escape(c['arm'])}: Spearman rho between mean token entropy and local-structure distance "
                       f"over {c['n_models']} models = {rho}{note}.")
    for r in rows:
        if r.get("kind") == "map":
            f = run.file(f"{RunDir.CONSISTENCY_PLOTS}/map-{safe_name(r['model'])}-{safe_name(r['arm'])}.png")
            if f.is_file():
                parts.append(_img_file(f, f"DINO map of {r['model']}, {r['arm']}"))
    parts.append(f"<p class='paper'>Paper: rho = {PAPER['rho']} over {PAPER['n_models']} models (p {PAPER['p']}); "
                 "entropy-adjusted residuals " + ", ".join(f"{k} {v:+.3f}" for k, v in PAPER["residual"].items()) + ".</p>")
    if not answers:
        answers = [f"{len({r['model'] for r in coh})} model(s) analysed; the confound needs at least 3 models."]
    return parts, [{"q": "Is local-structure consistency more than token entropy? (appendix E.3)", "a": " ".join(answers)}]


def _mosaics(run: RunDir) -> list[str]:
    from bench.layout.prompts import by_id
    from experiments.rundir import arm_of
    from experiments.stages.render import read_renders, row_key

    if not run.rows(RunDir.GENERATIONS):
        return []
    renders = read_renders(run)
    prompts = by_id()
    grid: dict[str, dict[str, list[str]]] = {}
    for r in run.rows(RunDir.GENERATIONS):
        if r["task"] != "layout":
            continue
        x = renders.get(row_key(r))
        if x is None:
            continue
        arm = f"{r['model']} {arm_of(r)}"
        label = f"{arm} sample {r['sample']}: {x['outcome']}" + (" (trivial)" if x["trivial"] else "")
        cell = _img_pixels(x["pixels"], label) if x["outcome"] == "ok" else \
            f'<span class="invalid" title="{html.escape(x["reason"])}">{html.escape(x["outcome"])}</span>'
        grid.setdefault(r["prompt_id"], {}).setdefault(arm, []).append(cell)
    if not grid:
        return []
    rows_html = []
    for pid in sorted(grid):
        text = html.escape(prompts[pid].text) if pid in prompts else html.escape(pid)
        arms = "".join(f"<div class='arm'><small>{html.escape(a)}</small><br>{''.join(c)}</div>" for a, c in sorted(grid[pid].items()))
        rows_html.append(f"<div class='prompt'><b>{html.escape(pid)}</b> {text}<br>{arms}</div>")
    return ["<h2>Layout mosaics</h2>" + "".join(rows_html)]


def _config(run: RunDir) -> list[str]:
    cfg = _json(run, RunDir.CONFIG) or {}
    study = cfg.get("stages", {}).get("study", {})
    if not study:
        return []
    rows = [{"setting": k, "value": v} for k, v in sorted(study.get("config", {}).items())]
    rows += [{"setting": f"version: {k}", "value": v} for k, v in sorted(study.get("versions", {}).items())]
    models = [v["model"] for k, v in sorted(cfg.get("stages", {}).items()) if k.startswith("generate/") and "model" in v]
    seen = set()
    for m in models:
        if m["name"] not in seen:
            seen.add(m["name"])
            rows.append({"setting": f"model: {m['name']}", "value": f"{m['architecture']}, {m['n_layers']} layers, d_model "
                         f"{m['d_model']}, {m['dtype']} on {m['device']}, weights {m['weights_digest']}"})
    return ["<h2>Configuration</h2>" + _table(rows, ["setting", "value"])]


def write_report(run: Any) -> Path:
    with writing(run) as rd:
        return _write_report(rd)


def _write_report(run: RunDir) -> Path:
    paper = paper_values()
    summary: list[dict[str, Any]] = []
    body: list[str] = []
    for section in (_translation, _layout, _media, _tier_gaps, _probes, _selectivity, _interventions, _trajectory, _attention,
                    _consistency):
        parts, answers = section(run, paper)
        body += parts
        summary += answers
    head = ["<h1>AM-Bench report</h1>",
            "<p>The paper's questions and this run's answers. Each paper table below is reproduced from this run with the "
            f"paper's published values beside it for reference ({html.escape(paper['source'])}).</p>"]
    if summary:
        head.append("<h2>Summary</h2><dl>" + "".join(f"<dt>{html.escape(s['q'])}</dt><dd>{s['a']}</dd>" for s in summary) + "</dl>")
    else:
        head.append("<p>No results yet.</p>")
    parts = head + body + _mosaics(run) + _config(run)
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #bbb;padding:2px 6px;font-size:13px}img.mosaic{image-rendering:pixelated;margin:2px;vertical-align:top;"
             "border:1px solid #999}.arm{display:inline-block;margin:4px 12px 4px 0}.prompt{margin:10px 0}"
             ".invalid{display:inline-block;width:120px;height:120px;background:#eee;font-size:10px;margin:2px;vertical-align:top}"
             "dt{font-weight:bold;margin-top:.6em}dd{margin-left:1em}.paper{color:#555;font-size:13px}")
    page = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>AM-Bench report</title><style>{style}</style>"
            f"</head><body>{''.join(parts)}</body></html>\n")
    run.write_text(RunDir.REPORT, page)
    return run.file(RunDir.REPORT)
