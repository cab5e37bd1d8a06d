"""The host stages of `ambench run` after both model phases: renders, scores, tables, probes, judges, the
report and `summary.json`, each from the rows on disk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from experiments.rundir import RunDir, writing
from experiments.study.config import StudyConfig, data_path, load_reference_file, short_name
from experiments.study.timing import StageTimes


def _dino_device(c: StudyConfig) -> str:
    if c.device:
        return c.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def finish(c: StudyConfig, run: Path | RunDir, sets: dict[str, list[Any]], say: Callable[[str], None] = print,
           clock: StageTimes | None = None) -> dict[str, Any]:
    """The host stages after both model phases (renders, scores, tables, probes, judges, report) on `run`."""
    with writing(run, "ambench run") as rd:
        return _finish(c, rd, sets, say, clock if clock is not None else StageTimes())


def _finish(c: StudyConfig, rd: RunDir, sets: dict[str, list[Any]], say: Callable[[str], None],
            clock: StageTimes) -> dict[str, Any]:
    from experiments.stages.intervene import summarise_interventions
    from experiments.stages.layout import layout_table, media_table, tier_gap_table
    from experiments.stages.probe import ProbeError, probe_stage
    from experiments.stages.render import render_stage
    from experiments.stages.report import write_report
    from experiments.stages.translation import score_attempts

    summary: dict[str, Any] = {}
    say("renders")
    with clock.stage("renders"):
        render_stage(rd, say=say)
    say("translation scores")
    with clock.stage("translation scores"):
        if not rd.file(RunDir.TRANSLATION_REFS).exists():
            from bench.translation.references import load_references

            refs = load_reference_file(data_path(c.references)) if c.references else load_references("all")
            rd.write_text(RunDir.TRANSLATION_REFS, "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in refs))
        if any(r["task"] == "translation" for r in rd.rows(RunDir.GENERATIONS)):
            # score_attempts reads the translation rows of generations.jsonl as they are (by prompt_id)
            summary["translation"] = score_attempts(rd.file(RunDir.TRANSLATION_REFS), rd.file(RunDir.GENERATIONS),
                                                    rd.file(RunDir.TRANSLATION_SCORES))
    say("layout tables")
    with clock.stage("layout tables"):
        tiers = layout_table(rd, "tier")
        rd.write_json(RunDir.LAYOUT_TABLE, tiers)
        summary["layout"] = [t for t in tiers if t["tier"] == "all"]
    say("probes")
    with clock.stage("probes"):
        try:
            probe_stage(rd, None, c.probe(), progress=lambda m: say("  " + m))
        except ProbeError as e:
            say(f"  probes skipped: {e}")
    if c.causal != "off" or c.steer_prompts:  # issues 41 and 40: at each model's best layout-probe site
        _at_the_site(c, rd, say, clock)
    if c.selectivity:  # issue 16
        from experiments.stages.selectivity import selectivity_stage

        say("cross-model selectivity")
        with clock.stage("selectivity"):
            try:
                sel = selectivity_stage(rd, c.selectivity_settings(), progress=lambda m: say("  " + m))
                summary["selectivity"] = [r for r in sel if r["kind"] == "mean_gap"]
            except ProbeError as e:
                say(f"  selectivity skipped: {e}")
    say("intervention tables")
    with clock.stage("intervention tables"):
        it = summarise_interventions(rd, c.seed)
    if it:
        summary["interventions"] = it["counts"]
    if rd.rows(RunDir.ATTENTION):  # issue 16
        from experiments.stages.attention import summarise_attention

        say("attention focus table")
        with clock.stage("attention table"):
            summary["attention"] = [{k: t.get(k) for k in ("model", "task", "attempts", "mean", "median", "ci")}
                                    for t in summarise_attention(rd, c.n_boot, c.seed)]
    if c.judge_url and c.judge_model:
        from experiments.judges import make_judge
        from experiments.stages.judge import judge_stage

        say("judge")
        with clock.stage("judge"):
            judge_stage(rd, make_judge({"kind": "openai", "name": c.judge_name or c.judge_model, "base_url": c.judge_url,
                                        "model": c.judge_model}))
    if c.dino_folder:
        from experiments.stages.consistency import ConsistencySettings, consistency_stage

        say("DINO concept consistency and the entropy confound")
        with clock.stage("DINO consistency"):
            consistency_stage(rd, c.dino_folder, ConsistencySettings(seed=c.seed, device=_dino_device(c)))
    with clock.stage("media tables"):
        media = media_table(rd, n_boot=c.n_boot, seed=c.seed)
        if media:
            say("medium comparison (Exp. 2)")
            rd.write_json(RunDir.MEDIA_TABLE, media)
            summary["media"] = media
        gaps = tier_gap_table(rd, n_boot=c.n_boot, seed=c.seed)  # issue 16: written only when the run has two media
        if gaps:
            say("the T2/T3 gap per medium")
            rd.write_json(RunDir.TIER_GAPS, gaps)
            summary["tier_gaps"] = [g for g in gaps if g["kind"] == "contrast"]
    say("report")
    with clock.stage("report"):
        path = write_report(rd)
    summary["report"] = str(path.relative_to(rd.path))
    rd.write_json(RunDir.SUMMARY, summary)
    return summary


def _at_the_site(c: StudyConfig, rd: RunDir, say: Callable[[str], None], clock: StageTimes) -> None:
    """At each model's best layout-probe site (the own target's best layer at `last`): the causal test (issue 41;
    the model is loaded only when its probe is readable or the test runs anyway) and the steering phase (issue 40)."""
    from experiments.stages.causal import causal_stage, site_of, verdict

    s = c.causal_settings()
    probes = rd.rows(RunDir.PROBES)
    for m in c.models:
        short = short_name(m)
        site = site_of(probes, m, s)
        rt = None

        def loaded() -> Any:
            return rt or c.load_runtime(m)

        if c.causal != "off":
            say(f"readable or used: the causal test at {m}'s best layout-probe site")
            with clock.stage(f"{short}: causal"):
                if s.draws(site):
                    rt = loaded()
                row = causal_stage(rt, rd, m, s, say=lambda t: say("  " + t))
            say(f"  {m}: {verdict(row)}")
        if c.steer_prompts and site is not None:
            from experiments.stages.steer import steer_stage

            ss = c.steer_settings(site["layer"])
            say(f"steering {m} along its layout probe's direction for the {ss.region} half at layer {site['layer']} "
                f"(`last`): {ss.limit} prompts x strengths {list(ss.strengths)}")
            with clock.stage(f"{short}: steering"):
                rt = loaded()
                try:
                    steer_stage(rt, rd, ss, m)
                except ValueError as e:  # too few prompts with targets to fit the direction
                    say(f"  steering skipped: {e}")


__all__ = ["finish"]
