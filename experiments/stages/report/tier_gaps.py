"""The T2/T3 gap per canvas medium and its difference between media (beyond the paper)."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, ci, excludes_zero, heading, missing, para, table


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
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
               f"({'the gap depends on the medium' if excludes_zero(r['ci']) else 'no medium effect on the gap shown'})."
               for r in contrasts]
    return blocks, ([{"q": "Is the T2/T3 inversion a property of the 24x24 medium?", "a": " ".join(answers)}] if answers else [])
