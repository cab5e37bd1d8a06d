"""What every `ambench` command shares: the app, one-sentence errors, option types, models and run directories.

Heavy imports (torch, transformers) happen inside the commands that need them, so `ambench render` and
the scoring commands start in well under a second.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
import typer.core

app = typer.Typer(
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


def fail(message: str, code: int = 2) -> None:
    """Print a one-sentence usage error and exit non-zero."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def errors() -> tuple[type[BaseException], ...]:
    """The exceptions that carry a sentence for the user (raised at a boundary)."""
    from activations.base import StoreError
    from experiments.rundir import RunError
    from experiments.stages.translation import InputError
    from interp.prompts import PromptError

    from interp.dino import DinoError

    out: list[type[BaseException]] = [RunError, StoreError, PromptError, InputError, DinoError]
    try:
        from interp.models import ModelError

        out.append(ModelError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(out)


@contextlib.contextmanager
def boundary() -> Iterator[None]:
    """Turn the errors meant for people into one sentence and exit code 2 (never a traceback)."""
    try:
        yield
    except errors() as e:
        fail(str(e))


@contextlib.contextmanager
def run_writer(path: Path, command: str, create: bool = False, needs: Optional[str] = None) -> Iterator[Any]:
    """The run directory opened for writing: its lock held for the whole command. Only the commands that make
    a run (`--out`) create it; one that needs an existing run (`--run`) refuses a folder that is not there."""
    from experiments.rundir import RunDir

    with boundary():
        rd = RunDir.writer(path, command, create=create, needs=needs)
    try:
        with boundary():
            yield rd
    finally:
        rd.close()


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


def check_device(device: Optional[str], dtype: Optional[str]) -> None:
    """--device and --dtype as the runtime accepts them (one sentence, before anything is opened or loaded)."""
    import re

    if device is not None and not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
        fail(f"--device {device!r}: use cpu, cuda or cuda:N (mps on a Mac)")
    if dtype is not None and dtype not in ("float32", "bfloat16", "float16", "fp32", "bf16", "fp16"):
        fail(f"--dtype {dtype!r}: use float32, bfloat16 or float16")


def runtime(model: str, device: Optional[str], dtype: Optional[str], compat: bool = False, trust_remote_code: bool = False,
            device_map: Optional[str] = None, quantize: Optional[str] = None) -> Any:
    """Load the model (call it once the run is locked: a second command on the run is refused before a load)."""
    from experiments.study import check_models
    from interp.runtime import Runtime, describe

    check_device(device, dtype)
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
