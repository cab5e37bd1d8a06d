"""The attention focus of drawing statements on the prompt's spatial words (beyond the paper)."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, ci, figure, heading, missing, para, table


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
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
