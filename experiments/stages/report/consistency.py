"""Appendix E.2/E.3: DINO concept consistency and the entropy confound."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.rundir import safe_name
from experiments.stages.report.blocks import Answer, Block, figure, heading, missing, para, table


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
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
