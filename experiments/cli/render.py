"""`ambench render`: one model answer (canvas program or SVG) through the sandbox, as PNG and JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from experiments.cli.common import app, f3, fail, read_text


def result_summary(result, medium) -> dict:
    """The JSON object `ambench render --json` prints for one executed program."""
    shapes = []
    if result.valid:
        for call, geom in zip(result.calls, result.shapes()):
            shapes.append({"type": call.kind, "color": list(call.color), "color_name": medium.palette.name_of(call.color),
                           "area": round(float(geom.area), 6)})
    return {
        "valid": result.valid, "outcome": result.outcome, "reason": result.reason, "medium": result.medium,
        "shapes": shapes, "colors": result.colors(),
        "background": list(result.background) if result.background else None,
        "nonbackground_fraction": round(result.nonbackground_fraction(), 6),
    }


@app.command()
def render(
    program: str = typer.Argument(..., help="File holding model text (prose, fences and all), or - for stdin."),
    out: Optional[Path] = typer.Option(None, "-o", "--out", help="Write the raster as a PNG here (folders are created)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object describing the result."),
    scale: int = typer.Option(16, "--scale", min=1, max=64, help="PNG pixels per canvas pixel."),
    medium_name: str = typer.Option("auto", "--medium",
                                    help="auto (svg when the text holds an <svg> document, else v1), v1, v1@48, v1-48, outline or svg."),
) -> None:
    """Run model text in the sandbox and render it: a canvas program, or an SVG answer (sanitised and
    drawn inside the same sandbox). An invalid answer is a result (exit 0), not an error."""
    from bench.canvas.medium import V1, get_medium
    from bench.canvas.png import save_png
    from bench.sandbox.job import Job
    from bench.sandbox.pool import SandboxPool

    text = read_text(program)
    if medium_name == "auto":
        from bench.svg.extract import extract_svg

        medium_name = "svg" if extract_svg(text) is not None else "v1"
    if medium_name == "svg":
        medium = V1
        job = Job(text, kind="svg", size=V1.resolution)
    else:
        try:
            medium = get_medium(medium_name)
        except ValueError as e:
            fail(f"{e}, svg or auto")
        job = Job(text)
    if out is not None and out.is_dir():
        fail(f"-o {out} is a folder; give a file name for the PNG")
    with SandboxPool(workers=1, medium=medium) as pool:
        result = pool.run_jobs([job])[0]
    if job.kind == "svg" and result.valid:
        from experiments.stages.render import background_of

        result.background = tuple(int(x) for x in background_of(result))  # the border's majority colour
    if out is not None and result.valid:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            save_png(result.pixels, out, scale=scale)
        except OSError as e:
            fail(f"cannot write {out}: {e.strerror}")
    if as_json:
        typer.echo(json.dumps(result_summary(result, medium)))
    else:
        status = "valid" if result.valid else f"invalid ({result.outcome}): {result.reason}"
        typer.echo(f"{status}; {len(result.calls)} shapes; non-background {f3(result.nonbackground_fraction())}")
        if out is not None and result.valid:
            typer.echo(f"wrote {out}")
