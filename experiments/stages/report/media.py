"""The output medium (Exp. 2): the paired SVG − canvas delta per model and metric."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, ci, excludes_zero, heading, missing, para, table


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    title = heading("Exp. 2: the output medium (paired per-prompt delta, prompt-clustered bootstrap CI)")
    rows = run.json(RunDir.MEDIA_TABLE) or []
    if not rows:
        return [title, missing("The SVG − canvas comparison", "this run has no SVG arm",
                               "`ambench run --svg` adds it (on in the paper preset)")], []
    p = paper["svg"]
    answers = [f"{r['model']}, {r['metric']}: {r['b']} − {r['a']} = {num(r['delta'], True)} {ci(r['ci'])} over {r['prompts']} "
               f"prompts ({'the CI excludes 0' if excludes_zero(r['ci']) else 'the CI includes 0'})." for r in rows]
    blocks = [title, table(rows, ["model", "metric", "a", "b", "prompts", "delta", "ci"]),
              para(f"Paper: SVG − canvas judge score {num(p['pooled_delta'], True)} {ci(p['pooled_ci'])} pooled "
                   f"(resolution-matched; native {num(p['native_delta'], True)}); CodeLlama 34B "
                   f"{num(p['per_model']['CodeLlama 34B'], True)}, Qwen2.5-Coder 32B "
                   f"{num(p['per_model']['Qwen2.5-Coder 32B'], True)}.", "paper")]
    return blocks, [{"q": "Does the output medium change what models can express? (Exp. 2)", "a": " ".join(answers)}]
