"""Preparing run directories in tests: rows appended under the run's lock, as the stages write them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from experiments.rundir import RunDir, read_rows

GENERATIONS = RunDir.GENERATIONS

__all__ = ["GENERATIONS", "PROGRAMS", "STUDY", "append", "ambench", "copy_run", "read_rows", "run_small_study", "snapshot", "study_config",
           "tree"]


def append(run: Path, rows: Sequence[Mapping[str, Any]], name: str = RunDir.GENERATIONS) -> None:
    with RunDir.writer(run, "test fixture") as rd:
        rd.append(name, rows)


def ambench(args: Sequence[Any], code: int | None = 0) -> Any:
    """`ambench ARGS` in this process (click's CliRunner): its exit status, stdout and stderr, for the tests about what
    a command writes and says, not about the process running it (a kill, a fresh interpreter, a lock held by another
    process), which keep their subprocesses. A subprocess paid 3-5 CPU seconds of interpreter start and imports
    (torch, transformers) before the command's first line. An exception the command did not turn into its one-sentence
    error is re-raised here, with its traceback, whatever `code` says."""
    from typer.testing import CliRunner

    from experiments.cli import app

    res = CliRunner().invoke(app, [str(a) for a in args])
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    assert code is None or res.exit_code == code, (res.exit_code, res.stderr[-3000:])
    return res


# --------------------------------------------------------------------------- a finished study (issue 20)

#: valid canvas programs: a random tiny model writes none, so a study's layout attempts are pre-written
PROGRAMS = [
    "```python\nfill('white')\nrect(2, 2, 4, 4, 'red')\nrect(12, 10, 6, 6, 'blue')\n```",
    "```python\nfill('navy')\ncircle(12, 12, 3, 'gold')\nrect(2, 14, 4, 4, 'red')\n```",
    "```python\nfill('white')\nrect(14, 2, 8, 8, 'green')\nline(0, 0, 5, 20, 'black')\n```",
]
#: a small study on the tiny model: every stage runs, in about half a minute
STUDY = dict(translation_prompts=3, layout_per_subcategory=1, samples=1, translation_samples=1, max_new_tokens=8,
             continuations=2, intervene_tokens=6, n_perm=99, n_perm_layers=9, n_boot=200)


def study_config(model: Path, **overrides: Any) -> Any:
    from experiments.study import StudyConfig

    return StudyConfig.from_preset("quick", models=(str(model),), **{**STUDY, **overrides})


def run_small_study(model: Path, out: Path, say: Any = None, **overrides: Any) -> dict[str, Any]:
    """`ambench run` in-process on the tiny model, its layout attempts pre-written as the generate stage writes
    them (valid programs), so interventions and patching have cuts."""
    from experiments.study import prompt_sets, run_study

    c = study_config(model, **overrides)
    if not (out / RunDir.GENERATIONS).exists():
        rows = [{"task": "layout", "prompt_id": it.id, "model": str(model), "protocol": "few-shot-2", "medium": "v1",
                 "sample": k, "seed": 0, "temperature": 0.0 if k == 0 else 0.7, "prefix": "",
                 "text": PROGRAMS[(i + k) % len(PROGRAMS)], "code": None, "n_tokens": 1, "stop": "eos", "entropy": [0.1],
                 "mean_entropy": 0.1} for i, it in enumerate(prompt_sets(c)["layout"]) for k in range(c.samples + 1)]
        append(out, rows)
    return run_study(c, out, say=say or (lambda m: None))


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file of a run directory (the lock file aside) and its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file() and p.name != RunDir.LOCK}


def tree(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path under `root` (folders and the lock included): kind, size, mtime and the bytes' hash; what a refusal
    must leave as it found it (issue 31: no new folder, no lock, no config section, no temporary file)."""
    import hashlib

    out: dict[str, tuple[Any, ...]] = {}
    for p in sorted([root, *root.rglob("*")]):
        st = p.lstat()
        rel = str(p.relative_to(root))
        if p.is_dir():
            out[rel] = ("dir", st.st_mtime_ns)
        else:
            out[rel] = ("file", st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(RunDir.LOCK))
    return dst
