"""What every `ambench` command shares: the app, one-sentence errors, option types, models and run directories.

Heavy imports (torch, transformers) happen inside the commands that need them, so `ambench render` and
the scoring commands start in well under a second.

Validate, then lock, then load, then write (issue 31): the `check_*` helpers here say a bad argument, model, task,
arm, device or folder in one sentence before a command takes the run's lock or loads a model, so a refusal leaves
every file and folder as it found it; `follow_study` keeps a side command on a study to the study's settings; the
root group turns any `OSError` into one sentence (a read-only folder, a full disk), never a traceback.

How a command refuses (`fail`, `boundary`) is `experiments/cli/refusals.py`, and the checks of a `--run` command's run
(`check_run`, `check_attempts`, `check_record`...) are `experiments/cli/run_checks.py`; both are imported from here.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
import typer.core

from experiments.cli.refusals import boundary, errors, fail  # noqa: F401 - re-exported
from experiments.cli.run_checks import (check_attempts, check_record, check_run,  # noqa: F401 - re-exported
                                        check_store_models, recorded_layers, store_models)


class _Group(typer.core.TyperGroup):
    """The root command group: an error of the file system anywhere below it (a read-only folder, a full disk, no
    permission, a file where a folder is expected) is one sentence naming the path and what to do, exit 2 (issue 31:
    a read-only run once ended `run`, `probe`, `repair`, `report`... in an `OSError` traceback)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as e:
            from experiments.rundir import fs_error

            fail(fs_error(e))


app = typer.Typer(
    cls=_Group,
    name="ambench",
    help="AM-Bench: do text-only language models plan 2D layouts? (canvas medium, sandbox, scoring, probes)",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _flag_type(display: Any) -> Any:
    """typer 0.29 prints a `<bool>` type beside every flag (`--check/--no-check <bool>`, even `--help <bool>`), as if a
    flag took a value; a flag takes none, so its type column stays empty (tests/experiments/test_cli_help.py)."""

    def display_type_rich(self: Any, ctx: Any) -> Any:
        return None if getattr(self, "is_flag", False) else display(self, ctx)

    return display_type_rich


typer.core.TyperOption.display_type_rich = _flag_type(typer.core.TyperOption.display_type_rich)  # type: ignore[method-assign]


def _finite(invoke: Any) -> Any:
    """Every number given on the command line is finite: `--strength nan` once exited 0 and appended rows with
    "strength": NaN (not JSON) to a finished study (issue 42). Checked before the command runs, for every command."""
    import math

    def checked(self: Any, ctx: Any) -> Any:
        for name, value in (ctx.params or {}).items():
            for x in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(x, float) and not math.isfinite(x):
                    opt = next((p.opts[0] for p in self.params if p.name == name and getattr(p, "opts", None)), name)
                    fail(f"{opt} {x}: give a finite number")
        return invoke(self, ctx)

    return checked


typer.core.TyperCommand.invoke = _finite(typer.core.TyperCommand.invoke)  # type: ignore[method-assign]
FLAGS_SHOW_NO_TYPE = True


@app.callback()
def _root() -> None:
    """AM-Bench command line."""


MODEL_HELP = ("smollm2-135m-instruct, gemma3-270m, organism:NAME, a local Hugging Face folder, "
              "or a hub name in the local cache.")

# option types shared by the commands (one declaration each)
ModelOpt = Annotated[str, typer.Option("--model", "-m", help=MODEL_HELP)]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", help="cpu, cuda, cuda:1 ... (default: cuda if present).")]
DtypeOpt = Annotated[Optional[str], typer.Option("--dtype", help="float32, bfloat16, float16 (default: bf16 on GPU, fp32 on CPU).")]
CompatOpt = Annotated[bool, typer.Option("--compat/--no-compat", help="TransformerLens compatibility mode (processed weights).")]
RunOpt = Annotated[Path, typer.Option("--run", help="Run directory.")]
OutRunOpt = Annotated[Path, typer.Option("--out", help="Run directory; an existing one is resumed.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Run seed; every random draw derives from it and is recorded.")]
LimitOpt = Annotated[Optional[int], typer.Option("--limit", min=1, help="Only the first N.")]
TaskOpt = Annotated[str, typer.Option("--task", help="translation or layout (stages are per task).")]
TrustOpt = Annotated[bool, typer.Option("--trust-remote-code",
                                        help="Run the model folder's own modeling code (auto_map), e.g. the original GLM-4 9B; "
                                             "only code you trust.")]
DeviceMapOpt = Annotated[Optional[str], typer.Option("--device-map",
                                                     help="auto: spread the blocks over every visible GPU (default: all on --device).")]
QuantizeOpt = Annotated[Optional[str], typer.Option("--quantize", help="8bit or 4bit weights through bitsandbytes (GPU).")]


def f3(v: Optional[float], signed: bool = False) -> str:
    """A statistic for the terminal: 3 significant digits (with its sign when `signed`), "n/a" when missing."""
    from experiments.numbers import text

    return "n/a" if v is None else text(v, signed)


def show(obj: Any, **kw: Any) -> str:
    """A result as printed JSON, every float to 3 significant digits (the files written keep full precision;
    `--json` outputs meant for programs print `json.dumps` of the full values instead)."""
    import json

    from experiments.numbers import rounded

    return json.dumps(rounded(obj), **kw)


@contextlib.contextmanager
def run_writer(path: Path, command: str, create: bool = False, needs: Optional[str] = None) -> Iterator[Any]:
    """The run directory opened for writing: its lock held for the whole command. Only the commands that make
    a run (`--out`) create it; one that needs an existing run (`--run`) refuses a folder that is not there."""
    from experiments.rundir import RunDir

    with boundary():
        rd = RunDir.writer(path, command, create=create, needs=needs)
    done = False
    try:
        with boundary():
            yield rd
        done = True
    except typer.Exit as e:
        done = not e.exit_code
        raise
    finally:
        if not done:  # a refusal leaves the lock as it found it (issue 42)
            rd.restore_lock()
        rd.close()
        if not done:  # a refusal leaves no new folder: one made here that holds only the lock goes again (issue 31)
            rd.discard_if_unused()


def check_task(task: str, option: str = "--task") -> None:
    """A task name the stages know (one sentence otherwise)."""
    from interp.prompts import TASKS

    if task not in TASKS:
        fail(f"{option} {task!r}: use {' or '.join(TASKS)}")


def check_layers(layers: Any, n_layers: int, option: str = "--layers", what: str = "the model's blocks") -> None:
    """Indices of the loaded model's blocks (or sites) below `n_layers` (one sentence otherwise)."""
    bad = [x for x in layers if not 0 <= x < n_layers]
    if bad:
        fail(f"{option} must be in 0..{n_layers - 1} ({what}), not {bad[0]}")


def read_text(source: str) -> str:
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    if not path.is_file():
        fail(f"no such file: {source} (give a file holding model text, or - for stdin)")
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        fail(f"cannot read {source}: {e.strerror}")
    return ""


def load_items(task: Optional[str], prompts: Optional[Path], limit: Optional[int]) -> list[Any]:
    """Prompt items from a prompt file (any task label) or a built-in set, validated before anything is written."""
    from interp.prompts import PromptError, layout_items, load_prompts, translation_items

    try:
        if prompts is not None:
            items = load_prompts(prompts, task)
        elif task == "translation":
            from bench.translation.references import load_references

            items = translation_items([r.id for r in load_references("sampled")])
        elif task == "layout":
            items = layout_items()
        else:
            fail("give --prompts FILE or --task translation|layout")
    except PromptError as e:
        fail(str(e))
    return items[:limit] if limit else items


def check_model(model: str) -> None:
    """The model resolves and its folder is whole: checked before the run is opened (nothing loaded yet)."""
    from experiments.study import check_models

    with boundary():
        check_models((model,))


def check_device(device: Optional[str], dtype: Optional[str], quantize: Optional[str] = None,
                 device_map: Optional[str] = None) -> None:
    """--device, --dtype, --quantize and --device-map as the runtime accepts them and this machine has them (one
    sentence, before anything is opened or loaded: `generate --device cuda` on a CPU-only torch once failed after the
    model load and left NEW/.lock, `--quantize 3bit` after 216 s)."""
    import re

    if device is not None and not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
        fail(f"--device {device!r}: use cpu, cuda or cuda:N (mps on a Mac)")
    if dtype is not None and dtype not in ("float32", "bfloat16", "float16", "fp32", "bf16", "fp16"):
        fail(f"--dtype {dtype!r}: use float32, bfloat16 or float16")
    if quantize is not None and quantize not in ("8bit", "4bit"):
        fail(f"--quantize {quantize!r}: use 8bit or 4bit")
    if device_map is not None and device_map != "auto":
        fail(f"--device-map {device_map!r}: use auto (or leave it out to put every block on --device)")
    if quantize is not None:
        import importlib.util

        if importlib.util.find_spec("bitsandbytes") is None:
            fail(f"--quantize {quantize} needs bitsandbytes: `pip install bitsandbytes` (and a CUDA GPU), or leave --quantize out")
    if device is not None and device != "cpu":  # the runtime's own check (what `Runtime.load` refuses from Python)
        from interp.runtime.load import check_device as device_here

        try:
            device_here(device)
        except ValueError as e:
            fail(f"--{e}")
    if (quantize is not None or device_map is not None) and not (device or "").startswith("cuda"):
        import torch

        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            what = "--quantize" if quantize else "--device-map"
            fail(f"{what} needs a CUDA GPU and this torch sees none ({torch.__version__}): use --device cpu")


def runtime(model: str, device: Optional[str], dtype: Optional[str], compat: bool = False, trust_remote_code: bool = False,
            device_map: Optional[str] = None, quantize: Optional[str] = None) -> Any:
    """Load the model (call it once the run is locked: a second command on the run is refused before a load)."""
    from experiments.study import check_models
    from interp.runtime import Runtime, describe

    check_device(device, dtype, quantize, device_map)
    typer.echo(f"loading {model} ...", err=True)
    with boundary():
        check_models((model,))
        rt = Runtime.load(model, device=device, dtype=dtype, compat=compat, trust_remote_code=trust_remote_code,
                          device_map=device_map, quantize=quantize)
    typer.echo(f"loaded {describe(rt)}", err=True)
    return rt


def bar(total: Optional[int], desc: str, unit: str) -> Any:
    """A progress bar on stderr, shown only on a terminal (experiments.progress)."""
    from experiments.progress import bar as progress_bar

    return progress_bar(total, desc, unit)


def given(param: str) -> bool:
    """The option `param` (the command's argument name) was given on the command line, not left at its default."""
    try:  # typer vendors click from 0.2x; older ones use click itself
        from typer._click.core import ParameterSource
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover
        from click import get_current_context
        from click.core import ParameterSource
    ctx = get_current_context(silent=True)
    source = ctx.get_parameter_source(param) if ctx is not None else None
    return source not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def study_of(rd: Any) -> Any:
    """The StudyConfig a run was made with by `ambench run` (None for a run of separate commands)."""
    from experiments.study import StudyConfig

    with boundary():
        record = ((rd.config().get("stages") or {}).get("study") or {}).get("config")
    if not record:
        return None
    try:
        return StudyConfig.from_dict(record)
    except (TypeError, ValueError) as e:
        fail(f"{rd.file(rd.CONFIG)} holds a study record this version cannot read ({e}); restore config.json from a copy "
             "of the run, or run the study again into another --out")


def follow_study(rd: Any, command: str, study: Any, cli: dict[str, tuple[str, Any]]) -> Any:
    """A side command's settings on a study (issue 31, case 11: `probe --run RUN` with its own 2,500/100 permutations
    rewrote probes.jsonl while the study's summary and report kept 999/49): the options left out take the study's
    values, and one given with another value is refused, naming it, so the study's files never disagree. `cli`:
    settings field -> (the command's argument name, its value). Returns the settings to run with."""
    from dataclasses import replace

    kept = {f: v for f, (param, v) in cli.items() if given(param)}
    s = replace(study, **kept)
    changed = [f for f in kept if getattr(s, f) != getattr(study, f)]
    if changed:
        opts = ", ".join(f"--{cli[f][0].replace('_', '-')} {_shown(getattr(s, f))} (the study's: {_shown(getattr(study, f))})"
                         for f in changed)
        fail(f"{rd.path} is a study whose summary and report follow its own {command} settings; {opts} would leave them "
             f"disagreeing: leave those options out to redo the study's {command}, or run a study with the settings you "
             "want into another folder (`ambench run ... --out OTHER`)")
    return s


def _shown(v: Any) -> str:
    return " ".join(map(str, v)) if isinstance(v, (tuple, list)) else str(v)
