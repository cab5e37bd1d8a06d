"""`ambench run`: the whole study on one or more models as one resumable command.

The study holds its run directory's lock for the whole command (`experiments.rundir.RunDir.writer`)
and runs, into it:
1. per model, the first model phase: generate translation and layout attempts (and the SVG arm in
   the paper preset), capture the residual stream for the same prompts and protocol;
2. per model, the second model phase, once every attempt exists: interventions (four arms) and
   activation patching on layout cuts;
3. renders, translation scores, layout tables, probes, intervention tables, judges (when configured),
   the Exp. 2 media table, the HTML report.
Every stage resumes (see each stage's module); a killed run rerun with the same command continues, and
its result files come out identical to an uninterrupted run's. `config.json` records the preset, every
setting, the models and the package versions; a run directory refuses a second command with other
settings, and a second command on it while one runs.

Past one machine, every model-running stage is a list of keyed work units (generation batches, capture
batches, intervention cuts, (cut, layer) patching units): `--shard i/n` runs the units whose index is
i mod n. The first phase needs nothing else; the second needs every attempt, so it runs in a shard
whose directory already holds them (a copy of the merged first phase). `merge_runs` (`ambench merge`)
puts the shards' rows back in the order of an unsharded run, after which `ambench run` on the merged
directory finishes the remaining stages. `run_ray` does all of it as Ray tasks.

One job per module: `config` (StudyConfig, presets, prompt sets, the attempt order), `checks` (what is
checked before anything is recorded), `phases` (the model phases, `run_study`), `finish` (the host stages
and the report), `merge` (shards), `ray_backend` (Ray). The names below are re-exported from here.
"""

from __future__ import annotations

from experiments.study.checks import check_dino, check_models
from experiments.study.config import (PRESETS, REPO, StudyConfig, data_path, generation_order, load_reference_file, prompt_sets,
                                      versions)
from experiments.study.finish import finish
from experiments.study.merge import merge_runs, parse_shard
from experiments.study.phases import run_study
from experiments.study.ray_backend import run_ray


__all__ = ["PRESETS", "REPO", "StudyConfig", "check_dino", "check_models", "data_path", "finish", "generation_order",
           "load_reference_file", "merge_runs", "parse_shard", "prompt_sets", "run_ray", "run_study", "versions"]
