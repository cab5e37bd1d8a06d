"""`ambench run --preset organisms`: the unchanged study on the model organisms, and whether each method recovered
the answer that was constructed into them (docs/organisms.md).

The preset (experiments/data/presets.json, `organisms`) holds settings shared by its parts and one part per
group of organisms that share a prompt set: each part is an ordinary study (`run_study`) on its organisms'
held-out prompt file, run into `OUT/<part>`. Nothing in the pipeline knows it runs on an organism: the
parts use the two settings any user has for their own prompts (`prompt_files`, `references`).

`known_answers(OUT)` (experiments/verdicts.py, re-exported here) then reads the parts' result rows (never the organisms' training results) and states,
per organism and method, the expected answer, the measured value with its CI, and whether it was recovered;
`OUT/known_answers.json` and `OUT/known_answers.md` hold them. Which rule applies is what each model declares it
constructs (`KINDS`; `declared`), never its name, so a user's own organism (a folder trained with
`interp.organisms.build.train_organism(..., known_answer={"kind": ...})`) gets a verdict in any run:
`verdicts(RUN)`. A rule whose statistic is missing (no permutations, no rows) says "not measured", never "recovered".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from experiments.verdicts import KINDS, RULES, declared, known_answers, verdicts


def parts_of(preset: str) -> dict[str, dict[str, Any]] | None:
    """The parts of a preset that runs several studies, with the shared settings merged in; None for a plain preset."""
    from experiments.study import PRESETS

    spec = PRESETS.get(preset, {})
    if "parts" not in spec:
        return None
    shared = {k: v for k, v in spec.items() if k != "parts" and not k.startswith("_")}
    return {name: {**shared, **part} for name, part in spec["parts"].items()}


def part_config(preset: str, name: str, overrides: dict[str, Any] | None = None) -> Any:
    """The StudyConfig of part `name` of `preset` (recorded as preset `preset/name`)."""
    from experiments.study import StudyConfig

    values = {**parts_of(preset)[name], **{k: v for k, v in (overrides or {}).items() if v is not None}}
    c = StudyConfig.from_preset("quick", **values)
    return StudyConfig.from_dict({**c.as_dict(), "preset": f"{preset}/{name}"})


def run_parts(preset: str, out: Path, overrides: dict[str, Any], say: Callable[[str], None] = print,
              clock: Any = None) -> dict[str, Any]:
    """Every part of `preset` as a study in `out/<part>` (each resumable), then the known-answer table; `clock`
    (a StageTimes) collects each part's stage times, named `<part>/<stage>`."""
    from experiments.study import run_study
    from experiments.study.timing import StageTimes

    clock = clock if clock is not None else StageTimes()

    parts = parts_of(preset)
    if parts is None:
        raise ValueError(f"preset {preset!r} is a single study")
    if overrides.get("models"):
        raise ValueError(f"preset {preset!r} names its own models per part; drop --model")
    summary: dict[str, Any] = {}
    for name in parts:
        c = part_config(preset, name, overrides)
        say(f"[{preset}] part {name}: {', '.join(c.models)}")
        clock.prefix = f"{name}/"
        summary[name] = run_study(c, Path(out) / name, None, say, clock)
    clock.prefix = ""
    rows = known_answers(out)
    summary["known_answers"] = [{k: r[k] for k in ("organism", "method", "recovered")} for r in rows]
    return summary


__all__ = ["KINDS", "RULES", "declared", "known_answers", "part_config", "parts_of", "run_parts", "verdicts"]
