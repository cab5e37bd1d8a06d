"""The interventions (Exp. 3, stage 2): arms, cuts, strata, dose-response, and activation patching."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, figure, heading, interval, missing, para, table


def _no_patching(run: RunDir) -> str:
    """The one reason this run has no patching rows, read from its files (issue 40: the report said "no cut kept its
    token count, or patching did not run" when config.json shows which)."""
    try:
        stages = run.config().get("stages", {})
    except Exception:  # noqa: BLE001 - a damaged settings record: the report says what it can
        stages = {}
    ran = sorted(k.split("/", 2)[1] for k in stages if k.startswith("patch/"))
    if not ran:
        return "the patch stage did not run in this run (no `patch/...` settings in its config.json)"
    return (f"the patch stage ran for {', '.join(ran)} and no cut could be patched: in every cut the moved statement "
            "tokenised to another number of tokens than the as-is one (a coordinate such as 3 vs 12), so the two "
            "arms' statement positions cannot be aligned, or the cut had no moved-unused arm")


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    title = heading("Exp. 3, stage 2: do models track the geometry already in their code?")
    t = run.json(RunDir.INTERVENTIONS_TABLE)
    if not t:
        return [title, missing("Interventions and activation patching", "the run has no intervention rows",
                               "`ambench run` runs them after generation; `ambench intervene --run RUN` and "
                               "`ambench patch --run RUN` on a run")], []
    p = paper["interventions"]
    arms = [dict(r, paired=f"{num(r['paired_asis_rate'])} → {num(r['paired_rate'])}" if "paired_rate" in r else None,
                 prompts=_prompts(r), rate_ci=interval(r.get("rate_ci"), _prompts(r)),
                 delta_ci=interval(r["delta_ci"], _prompts(r)) if "delta_ci" in r else None)
            for r in t["arms"]]
    pu = p["moved_unused"]
    blocks = [title,
              para("Every rate is the share of continuations that drew again, with its n (cuts, continuations, prompts) and "
                   "a prompt-clustered bootstrap 95% CI; one prompt gives no interval (said so in the cell)."),
              table(arms, ["model", "task", "arm", "prompts", "cuts", "continuations", "rate", "rate_ci", "paired_cuts",
                           "paired", "delta_vs_asis", "delta_ci", "p_perm", "q_bh", "mean_distance"],
                    ["model", "task", "arm", "prompts", "cuts", "continuations", "rate (all)", "95% CI", "paired cuts",
                     "null-asis → arm (paired)", "Δ vs null-asis", "Δ 95% CI", "p (sign flip)", "q (BH)", "mean distance"]),
              para(f"Paper: moved to unused cells, continued drawing GLM-4 32B {num(pu['GLM-4 32B']['asis'])} → "
                   f"{num(pu['GLM-4 32B']['moved'])} (Δ {num(pu['GLM-4 32B']['delta'], True)}), Gemma 2 27B "
                   f"{num(pu['Gemma 2 27B']['asis'])} → {num(pu['Gemma 2 27B']['moved'])} (Δ {num(pu['Gemma 2 27B']['delta'], True)}), "
                   f"q = {p['q']}; the small move onto used cells Δ {', '.join(num(v, True) for v in p['moved_used_delta'].values())} "
                   "(dose-response).", "paper")]
    if t.get("counts"):
        blocks += [heading("Cuts, splices and exclusions", 2),
                   table(t["counts"], ["model", "task", "cuts", "cuts_with_rows", "continuations", "splices_byte_identical", "excluded"])]
    if t.get("strata"):
        blocks += [heading("By stratum (same-line comment; code after the cut)", 2),
                   table([r for r in t["strata"] if "delta_vs_asis" in r],
                         ["model", "task", "stratum", "arm", "paired_cuts", "paired_asis_rate", "paired_rate", "delta_vs_asis",
                          "delta_ci", "q_bh"])]
    for png in sorted(run.path.glob("interventions-*.png")):
        blocks.append(figure(png, f"{png.stem.split('-', 1)[1]}: continued drawing per arm and by displacement "
                                  "(prompt-clustered 95% CI; hollow: one prompt, no interval; n = continuations)"))
    dose = t.get("dose_response") or []
    blocks.append(heading("Dose-response: continued drawing by displacement", 2))
    if dose:
        blocks.append(table([dict(r, prompts=_prompts(r), rate_ci=interval(r.get("rate_ci"), _prompts(r))) for r in dose],
                            ["model", "task", "bin", "mean_distance", "prompts", "cuts", "continuations", "rate", "rate_ci"],
                            ["model", "task", "displacement bin (cells)", "mean displacement", "prompts", "cuts",
                             "continuations", "rate", "95% CI"]))
    else:
        blocks.append(missing("Dose-response", "no moved arm has continuations", "`ambench intervene --run RUN`"))
    blocks.append(heading("Activation patching at the cut (beyond the paper)", 2))
    if t.get("patching"):
        blocks.append(table([dict(r, prompts=_prompts(r), rate_ci=interval(r.get("rate_ci"), _prompts(r)))
                             for r in t["patching"]],
                            ["model", "task", "direction", "layer", "prompts", "cuts", "continuations", "rate", "rate_ci"],
                            ["model", "task", "direction", "patched layer", "prompts", "cuts", "continuations", "rate",
                             "95% CI"]))
    else:
        blocks.append(missing("Activation patching", _no_patching(run),
                              "`ambench patch --run RUN` (or `ambench run --patch-cuts N`)"))
    for png in sorted(run.path.glob("patching-*.png")):
        blocks.append(figure(png, f"{png.stem.split('-', 1)[1]}: continued drawing by patched layer, with the unpatched "
                                  "null-asis rate (solid grey) and moved arm's rate (dashed) for reference"))
    answers = []
    for r in t["arms"]:
        if r["arm"] != "moved-unused" or "delta_vs_asis" not in r:
            continue
        lo = (r.get("delta_ci") or [None])[0]
        sig = r.get("q_bh", 1) < 0.05 and lo is not None and lo > 0
        answers.append(f"{r['model']} ({r['task']}): moving the last statement to unused cells changes continued drawing "
                       f"{num(r['paired_asis_rate'])} → {num(r['paired_rate'])} (Δ {num(r['delta_vs_asis'], True)} "
                       f"{interval(r['delta_ci'], _prompts(r))}, q {num(r.get('q_bh'))}, {r['paired_cuts']} cuts): "
                       f"{'the model tracks the geometry in its code' if sig else 'no tracking shown at this power'}.")
    return blocks, ([{"q": "During generation, do models track the evolving geometry rather than a fixed plan? (Exp. 3)",
                      "a": " ".join(answers)}] if answers else [])


def _prompts(r: dict[str, Any]) -> Any:
    """A table row's number of prompts (rows written before issue 30 did not record it: None, shown as "–")."""
    return r.get("prompts")
