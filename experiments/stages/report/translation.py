"""The translation control (Exp. 1): PIoU per model against the paper's gate."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, heading, missing, para, table


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
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
