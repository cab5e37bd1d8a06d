"""How a command refuses: an error meant for a person becomes one sentence on stderr and exit code 2, never a
traceback."""

from __future__ import annotations

import contextlib
from typing import Iterator

import typer


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
    except OSError as e:  # the file system's errors too (issue 31): said where they happen, with the path
        from experiments.rundir import fs_error

        fail(fs_error(e))
