"""The model phases of `ambench run`: per model, generate and capture (phase a), then interventions,
patching, attention and the trajectory once every attempt exists (phase b); `run_study` runs them and
then `finish`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from experiments.rundir import AttemptKey, RunDir, RunError, writing
from experiments.study.checks import check_dino, check_models, check_prompts, refuse_other_release
from experiments.study.config import StudyConfig, expected_attempts, generation_order, prompt_sets, short_name, versions
from experiments.study.finish import finish
from experiments.study.timing import StageTimes


def _bar(total: int | None, desc: str, unit: str) -> Any:
    """A progress bar on stderr (shown on a terminal, silent in logs and tests)."""
    from experiments.progress import bar

    return bar(total, desc, unit, leave=False)


def run_study(c: StudyConfig, out: Path | RunDir, shard: tuple[int, int] | None = None,
              say: Callable[[str], None] = print, clock: StageTimes | None = None) -> dict[str, Any]:
    """The study `c` into `out`; `clock` collects the wall and CPU seconds of each stage."""
    import torch

    clock = clock if clock is not None else StageTimes()
    check_models(c.models)  # a typo or a broken folder fails here, before the run directory records anything
    check_dino(c)
    sets = prompt_sets(c)
    check_prompts(c, sets)  # references and context lengths, before any model loads or the run directory is made
    existing = RunDir(out.path if isinstance(out, RunDir) else out)
    if (existing.path / RunDir.CONFIG).is_file():
        refuse_other_release(existing.path, existing.config())
    with writing(out, "ambench run") as rd:
        foreign = [r for r in rd.rows(RunDir.GENERATIONS) if not c.names_attempt(r)]
        if foreign:  # a side arm once gave the study most of its intervention cuts
            arms = sorted({f"{r['model']} {r['task']} {AttemptKey.of(r).arm}" for r in foreign})
            raise RunError(f"{rd.path} holds {len(foreign)} attempts of arms this study does not name ({'; '.join(arms[:3])}); "
                           "a study uses exactly its arms: use another --out")
        # which shard a directory ran is not a setting: a merge's copies run other shards of the same study. The
        # thread count is: CPU matmuls round differently with another, and the probes follow (recorded, so a rerun
        # with another count is refused rather than silently different)
        rd.record_config("study", {"config": c.as_dict(), "versions": versions(), "threads": torch.get_num_threads(),
                                   "arms": c.arm_record()})
        merged = rd.config().get("merged")
        if shard is None and merged and merged["missing"]:
            say(f"{rd.path} is a merge of shards {shard_list(merged['shards'], merged['n'])} (phase {merged['phase']}) without "
                f"{shard_list(merged['missing'], merged['n'])}: their units run here now (merge them in first to avoid it)")
        second = [_model_phases(c, rd, m, sets, shard, say, clock) for m in c.models]
        if shard is not None:
            # which shard (and which phase) this directory holds, for `ambench merge` (not a setting: a merge's copies
            # run other shards of the same study)
            rd.record_shard(shard[0], shard[1], "b" if all(second) else "a")
            say(f"shard {shard[0]}/{shard[1]} done: merge the shards with `ambench merge`, then rerun `ambench run` on the merge")
            return {"shard": list(shard)}
        return finish(c, rd, sets, say, clock)


def shard_list(indices: list[int], n: int) -> str:
    return ", ".join(f"{i}/{n}" for i in indices)


def _model_phases(c: StudyConfig, rd: RunDir, m: str, sets: dict[str, list[Any]], shard: tuple[int, int] | None,
                  say: Callable[[str], None], clock: StageTimes) -> bool:
    """Both model phases of model `m`; False when the second waits for other shards' attempts."""
    from experiments.progress import GenerationProgress
    from experiments.stages.capture import capture_stage
    from experiments.stages.generate import generate_stage
    from experiments.stages.intervene import intervene_stage
    from experiments.stages.patch import patch_stage
    from interp.runtime import describe

    say(f"[model {m}] loading")
    short = short_name(m)
    with clock.stage(f"{short}: load"):
        rt = c.load_runtime(m)
    say(f"[model {m}] {describe(rt)}")
    for task, output, medium in c.arms():
        gs = c.generate(task, output, medium)
        total = len(sets[task]) * (gs.samples + 1)
        arm = output if medium == "v1" else medium
        say(f"[model {m}] generate {task} ({arm}): {len(sets[task])} prompts x {gs.samples + 1} attempts")
        with clock.stage(f"{short}: generate {task} ({arm})"), _bar(total, f"generate {task} ({arm})", "attempt") as bar:
            gp = GenerationProgress(bar)
            generate_stage(rt, sets[task], rd, gs, model=m, shard=shard, progress=gp.progress, on_token=gp.on_token, say=say)
    rows = rd.rows(RunDir.GENERATIONS)
    ordered = sorted(rows, key=generation_order(c, sets))
    if ordered != rows:
        rd.write_rows(RunDir.GENERATIONS, ordered)
    say(f"[model {m}] capture the residual stream ({rt.info.n_layers + 1} sites x 3 positions)")
    with clock.stage(f"{short}: capture"), _bar(len(sets["translation"]) + len(sets["layout"]), "capture", "prompt") as bar:
        capture_stage(rt, sets["translation"] + sets["layout"], rd, c.capture(), model=m, shard=shard, progress=bar.update,
                      say=say)
    have = sum(r["model"] == m for r in rd.rows(RunDir.GENERATIONS))
    if have < expected_attempts(c, sets):
        say(f"[model {m}] interventions and patching wait for every shard's attempts ({have} of {expected_attempts(c, sets)} here): "
            "merge the shards, then run these units with --shard on copies of the merge (or finish on the merge)")
        return False
    say(f"[model {m}] interventions (layout): {c.continuations} continuations per arm")
    with clock.stage(f"{short}: interventions"), _bar(c.intervene_cuts or None, "interventions", "cut") as bar:
        counts = intervene_stage(rt, rd, m, c.intervene(), progress=bar.update, shard=shard, say=say)
    say(f"[model {m}] interventions: {counts['cuts']} cuts, {counts['continuations']} continuations written, "
        f"splices byte-identical {counts['splices_byte_identical']}, excluded {counts['excluded']}")
    ps = c.patch(rt.info.n_layers)
    say(f"[model {m}] activation patching at layers {list(ps.layers)}")
    with clock.stage(f"{short}: patching"), _bar(len(ps.layers) * c.patch_cuts or None, "patching", "cut x layer") as bar:
        pc = patch_stage(rt, rd, m, ps, progress=bar.update, shard=shard)
    say(f"[model {m}] patching: {pc['rows']} rows over {pc['cuts']} cuts "
        f"({pc['cuts_with_unequal_token_counts']} cuts skipped: unequal token counts)")
    if c.attention:  # issue 16
        from experiments.stages.attention import attention_stage

        say(f"[model {m}] attention focus of the drawing statements on the prompt's spatial words")
        with clock.stage(f"{short}: attention"), _bar(None, "attention", "attempt") as bar:
            ac = attention_stage(rt, rd, m, c.attention_settings(), progress=bar.update, shard=shard)
        say(f"[model {m}] attention: {ac['written']} attempts written of {ac['attempts']} valid"
            + (f"; {ac['errors']} not read: {ac['error']}" if ac["errors"] else ""))
    if c.trajectory and shard is None:  # one forward pass per greedy attempt: cheap, and its probes need all of them
        from experiments.stages.trajectory import TrajectorySettings, trajectory_stage, verdict

        say(f"[model {m}] plan or state: probes at every statement boundary")
        with clock.stage(f"{short}: trajectory"):
            out = trajectory_stage(rt, rd, m, TrajectorySettings(seed=c.seed))
        say(f"[model {m}] plan or state: {verdict(out['rows'])}")
    elif c.trajectory:
        say(f"[model {m}] plan or state is not sharded (one forward pass per greedy attempt): run "
            f"`ambench trajectory --run MERGED --model {m}` on the merged run")
    return True


__all__ = ["run_study", "shard_list"]
