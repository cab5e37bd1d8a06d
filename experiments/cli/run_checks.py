"""What a `--run` command checks of its run before it takes the lock or loads a model: the folder is a run, it
holds the activations, attempts and files the command needs, and it recorded no other settings for the stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from experiments.cli.refusals import boundary, fail


def check_run(run: Path, needs: Optional[str] = None) -> Any:
    """The run a `--run` command reads or adds to, checked before anything is locked, loaded or written (issues 30,
    31): the folder exists and is a run (config.json or generations.jsonl, a config.json that reads), and holds what
    the command needs (`needs`: "activations", or a file name). Returns it opened for reading."""
    from experiments.rundir import RunDir, need_run

    import errno
    import os

    from experiments.rundir import fs_error

    with boundary():
        need_run(run, needs or RunDir.GENERATIONS)
    if not os.access(run, os.W_OK):  # the folder first: a read-only run is said before any other check or work
        code = errno.EROFS if os.statvfs(run).f_flag & os.ST_RDONLY else errno.EACCES
        fail(fs_error(OSError(code, os.strerror(code)), run))
    rd = RunDir(run)
    with boundary():  # a settings record that does not read: the commands that follow a study's settings need it whole
        from experiments.study.checks import refuse_other_release

        refuse_other_release(run, rd.config())  # issue 42: never rewritten in part by another release
    if needs == "activations":
        if not rd.activation_stores():
            fail(f"{run} has no activations: run `ambench capture --out {run}` (or `ambench run`) first")
    elif needs is not None and not rd.file(needs).exists():
        fail(f"{run} has no {needs}: run the command that makes it first (`ambench run` makes every file of a study)")
    return rd


def store_models(rd: Any) -> list[str]:
    """The model names of a run's activation stores (as the run names them)."""
    import json

    names = []
    for folder in rd.activation_stores():
        try:
            meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
            names.append(str(meta.get("name", meta["model"]["name"])))
        except (OSError, ValueError, KeyError, TypeError):
            names.append(folder.name)
    return names


def check_store_models(rd: Any, models: Optional[list[str]], option: str = "--models") -> None:
    """Each model named has activations in the run (one sentence naming the models that do, before anything is
    written: `selectivity --models nosuch` once wrote a `skipped` selectivity.jsonl and exited 0)."""
    from experiments.rundir import safe_name

    have = store_models(rd)
    for m in models or []:
        if m not in have and safe_name(m) not in {safe_name(h) for h in have}:
            fail(f"{option} {m!r}: {rd.path} has activations of {', '.join(repr(h) for h in have) or 'no model'} only")


def check_attempts(rd: Any, model: str, task: str, samples: Optional[list[int]] = None) -> None:
    """The run holds attempts of `model` on `task` (one sentence naming those it holds, before the model loads:
    `trajectory --model <not in the study>` once loaded it, wrote trajectory.jsonl and exited 0, and `intervene`
    added the model's section to config.json)."""
    from experiments.rundir import RunDir

    with boundary():
        rows = rd.rows(RunDir.GENERATIONS)
    have = [r for r in rows if r.get("model") == model and r.get("task") == task]
    if have and samples:
        held = {r.get("sample") for r in have}
        absent = sorted(set(samples) - held)
        if absent:  # issue 42: `attention --sample 99` refused after the model load and a config.json section
            fail(f"--sample {absent[0]}: the run has no such {task} attempt of {model} (its samples are "
                 f"{', '.join(str(s) for s in sorted(x for x in held if isinstance(x, int)))})")
    if have:
        return
    held = sorted({(str(r.get("model")), str(r.get("task"))) for r in rows})
    listed = "; ".join(f"{m} ({t})" for m, t in held[:6]) or "none"
    fail(f"{rd.path} has no {task} attempts of {model}: it holds attempts of {listed}; give --model and --task as the run "
         f"names them, or generate them first (`ambench generate --model {model} --task {task} --out {rd.path}`)")


def check_record(rd: Any, section: str, settings: dict[str, Any], skip: tuple[str, ...] = ()) -> None:
    """The refusal `RunDir.record_config` makes for another command's other settings, said before the run is locked or
    the model loads (it once came after the load); `skip`: fields known only once the model is loaded."""
    import json

    from experiments.rundir import _diff

    with boundary():
        old = ((rd.config().get("stages") or {}).get(section))
    if old is None:
        return
    new = json.loads(json.dumps(settings))
    changed = sorted(k for k in _diff(old, new) if k.split(".")[0] not in skip)
    if changed:
        fail(f"{rd.path} already has stage {section!r} with other settings ({', '.join(changed)}); repeat its settings, "
             "or use another --out to change them")


def recorded_layers(rd: Any, model: str) -> Optional[int]:
    """The number of blocks of `model` as the run recorded it when it generated with it (None when unknown), so that
    a layer option is checked before the model loads."""
    with boundary():
        stages = rd.config().get("stages") or {}
    for k, v in stages.items():
        info = v.get("model") if isinstance(v, dict) and k.startswith("generate/") else None
        if isinstance(info, dict) and info.get("name") == model and isinstance(info.get("n_layers"), int):
            return info["n_layers"]
    return None
