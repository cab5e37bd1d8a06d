"""Cross-model selectivity: each model's probe on every model's layouts, and the own-minus-others gap."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, ci, heading, missing, para, table


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
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
