"""The open question along the generation: a plan ahead of the drawing, or a state that follows it."""

from __future__ import annotations

from typing import Any

from experiments.rundir import RunDir
from experiments.rundir import safe_name
from experiments.stages.report.blocks import Answer, Block, figure, heading, missing, para, table


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
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
