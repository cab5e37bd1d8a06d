"""Readable or used: the causal stage's verdict per model, with its effect, interval, n and procedure (issue 41)."""

from __future__ import annotations

from typing import Any

from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, cell, heading, missing, para, table


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    """Readable or used? The causal stage's verdict per model, with its effect, interval, n and procedure."""
    title = heading("Readable or used? Interventions at the layout probe's best site (beyond the paper)")
    rows = [r for r in run.rows(RunDir.CAUSAL) if r.get("task") == "layout"]
    if not rows:
        study = (run.config().get("stages", {}).get("study") or {}).get("config") or {}
        why = ("it was turned off (causal: off)" if study.get("causal") == "off"
               else "the study's causal stage did not run (a run made before it existed, or the probes were skipped)")
        return [title, missing("The causal test", why, "`ambench run` (causal: readable, the default) on a study with "
                               "layout probes")], []
    from experiments.stages.causal import verdict

    blocks = [title,
              para("The paper's causal experiment edits the code text, not the activations. Here, at each model's best "
                   "layout-probe site (the `own` target at the last prompt token; readable when the nested-CV R^2 "
                   "interval lies above 0), the component of the residual stream along the layout's concept (the "
                   "targets' first principal components) is replaced by another prompt's, and the drawing is compared "
                   "with that source prompt's and with a random decoy prompt's: the effect is how much nearer the "
                   "source than the decoy the drawing is, beyond what the same move turned in a random direction of "
                   "the subspace gives (0 when neither changed the drawing), with a grouped interval and a sign-flip p "
                   "(when the drawing does not read the site's content, source and decoy are exchangeable and the "
                   "control absorbs how much a move of that size disturbs the drawing). LEACE erasure of the concept is "
                   "reported beside it, against erasing as many directions fitted to shuffled targets (descriptive). "
                   "The same test on the organisms is in the validation table: a plan the drawing follows comes out "
                   "used, a model with nothing to use does not (docs/causal.md).")]
    table_rows, answers = [], []
    for r in sorted(rows, key=lambda r: r["model"]):
        site = r.get("site") or {}
        ic = (r.get("methods") or {}).get("interchange") or {}
        er = (r.get("methods") or {}).get("erasure") or {}
        table_rows.append({"model": r["model"], "verdict": r.get("outcome"), "layer": site.get("layer"),
                           "probe R^2": site.get("best_r2"), "R^2 CI": site.get("best_ci"), "prompts": r.get("n_prompts"),
                           "interchange": ic.get("effect"), "CI": [ic.get("effect_lo"), ic.get("effect_hi")] if ic else None,
                           "p": ic.get("p"), "n": ic.get("n"), "groups": ic.get("n_groups"),
                           "erasure": er.get("effect"), "erasure CI": [er.get("effect_lo"), er.get("effect_hi")] if er else None,
                           "kept (erased / control)": f"{cell(er.get('kept'))} / {cell(er.get('control_kept'))}" if er else None,
                           "drawings": r.get("drawings")})
        answers.append(f"{r['model']}: {verdict(r)}.")
    cols = list(table_rows[0])
    blocks += [table(table_rows, cols)] + [para(a) for a in answers]
    return blocks, [{"q": "Is the layout a probe reads before the drawing the one the drawing uses? (beyond the paper)",
                     "a": " ".join(answers)}]
