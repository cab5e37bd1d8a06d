"""Layout validity and triviality per tier (Exp. 1), and the judges' pass@k and T2/T3 inversion."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, heading, missing, para, table


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
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
