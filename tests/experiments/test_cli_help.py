"""Every option of every `ambench` command says what it is for, and a flag's help shows no value type (issue 30:
`--model` on generate/capture, `--max-new-tokens`, `--batch-size`, `--continuations`, `--temperature` had no
description, and flags, `--help` included, showed a `<bool>` type as if they took a value)."""

from __future__ import annotations

import typer
import typer.main
from typer.testing import CliRunner

from experiments.cli import app


def _commands() -> list[tuple[str, object]]:
    root = typer.main.get_command(app)
    out = []

    def walk(cmd: object, path: str) -> None:  # typer 0.29 vendors its own click: walk by duck type
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}".strip())
        else:
            out.append((path, cmd))

    walk(root, "")
    return out


def _is_option(p: object) -> bool:
    return getattr(p, "param_type_name", "") == "option"


def _patched() -> bool:
    """Whether experiments.cli has taken `<bool>` off every typer flag (then a bare typer app shows none either)."""
    from experiments.cli import common

    return getattr(common, "FLAGS_SHOW_NO_TYPE", False)


def test_every_option_has_a_description():
    bare = [f"ambench {path} {'/'.join(p.opts)}" for path, cmd in _commands() for p in cmd.params
            if _is_option(p) and not (getattr(p, "help", None) or "").strip()]
    assert not bare, "options without help: " + ", ".join(bare)


def test_a_flag_shows_no_value_type():
    runner = CliRunner()
    shown = []
    for path, _ in _commands():
        res = runner.invoke(app, [*path.split(), "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, (path, res.output[-500:])
        if "<bool>" in res.output:
            shown.append(path)
    assert not shown, "flags shown with a <bool> type in: " + ", ".join(shown)


def test_the_check_can_fail():
    """A command with an undescribed option and a flag is caught by both checks above."""
    demo = typer.Typer()

    @demo.command()
    def go(n: int = typer.Option(1, "--n"), on: bool = typer.Option(False, "--on")) -> None:  # pragma: no cover
        pass

    cmd = typer.main.get_command(demo)
    assert any(_is_option(p) and not p.help for p in cmd.params)
    assert "<bool>" in CliRunner().invoke(demo, ["--help"], env={"COLUMNS": "200"}).output or _patched()
