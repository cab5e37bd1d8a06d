"""The `ambench` command line. Heavy imports (torch, transformers) happen inside the commands that need them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(
    name="ambench",
    help="AM-Bench: do text-only language models plan 2D layouts? (canvas medium, sandbox, scoring, probes)",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """AM-Bench command line."""


def fail(message: str, code: int = 2) -> None:
    """Print a one-sentence usage error and exit non-zero."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code)


def _read_text(source: str) -> str:
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


def result_summary(result, medium) -> dict:
    """The JSON object `ambench render --json` prints for one executed program."""
    shapes = []
    if result.valid:
        for call, geom in zip(result.calls, result.shapes()):
            shapes.append({
                "type": call.kind,
                "color": list(call.color),
                "color_name": medium.palette.name_of(call.color),
                "area": round(float(geom.area), 6),
            })
    return {
        "valid": result.valid,
        "outcome": result.outcome,
        "reason": result.reason,
        "medium": result.medium,
        "shapes": shapes,
        "colors": result.colors(),
        "background": list(result.background) if result.background else None,
        "nonbackground_fraction": round(result.nonbackground_fraction(), 6),
    }


@app.command()
def render(
    program: str = typer.Argument(..., help="File holding model text (prose, fences and all), or - for stdin."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write the raster as a PNG here."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object describing the result."),
    scale: int = typer.Option(16, "--scale", min=1, max=64, help="PNG pixels per canvas pixel."),
    medium_name: str = typer.Option("v1", "--medium", help="Canvas medium: v1, v1@48, v1-48, outline."),
) -> None:
    """Run model text in the sandbox and render it. An invalid program is a result (exit 0), not an error."""
    from bench.canvas.medium import get_medium
    from bench.canvas.png import save_png
    from bench.sandbox.pool import SandboxPool

    try:
        medium = get_medium(medium_name)
    except ValueError as e:
        fail(str(e))
    text = _read_text(program)
    with SandboxPool(workers=1, medium=medium) as pool:
        result = pool.run_one(text)
    if out is not None and result.valid:
        save_png(result.pixels, out, scale=scale)
    if as_json:
        typer.echo(json.dumps(result_summary(result, medium)))
    else:
        status = "valid" if result.valid else f"invalid ({result.outcome}): {result.reason}"
        typer.echo(f"{status}; {len(result.calls)} shapes; non-background {result.nonbackground_fraction():.3f}")
        if out is not None and result.valid:
            typer.echo(f"wrote {out}")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
