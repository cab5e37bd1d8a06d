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


translation_app = typer.Typer(help="The translation task: references, prompts, PIoU scoring, null baseline.", no_args_is_help=True)
app.add_typer(translation_app, name="translation")


@translation_app.command("refs")
def translation_refs(
    which: str = typer.Option("all", "--set", help="sampled, ladder, periodic, icons or all."),
    out: Path = typer.Option(..., "--out", help="Write the references here as JSONL."),
    with_prompts: bool = typer.Option(True, help="Add each reference's prompt text and canonical program."),
) -> None:
    """Write the frozen reference geometries (with prompts and canonical programs) as JSONL."""
    from bench.translation.prompts import write_prompt
    from bench.translation.references import canonical_program, load_references

    try:
        refs = load_references(which)
    except ValueError as e:
        fail(str(e))
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for r in refs:
            row = r.to_json()
            if with_prompts:
                row["prompt"] = write_prompt(r)
                row["canonical"] = canonical_program(r)
            f.write(json.dumps(row) + "\n")
    typer.echo(f"wrote {len(refs)} references to {out}")


@translation_app.command("prompt")
def translation_prompt(ref_id: str = typer.Argument(..., help="Reference id, e.g. s000, l-parts-1-0, p-rings-0, i-house.")) -> None:
    """Print the grid-language prompt of one reference."""
    from bench.translation.prompts import write_prompt
    from bench.translation.references import reference_by_id

    try:
        typer.echo(write_prompt(reference_by_id(ref_id)))
    except KeyError as e:
        fail(str(e.args[0]))


@translation_app.command("score")
def translation_score(
    refs: Path = typer.Option(..., "--refs", help="References JSONL (from `ambench translation refs`)."),
    attempts: Path = typer.Option(..., "--attempts", help="Attempts JSONL: one {ref_id, text, ...} per line."),
    out: Path = typer.Option(..., "--out", help="Scores JSONL; an existing file is resumed."),
    workers: Optional[int] = typer.Option(None, help="Sandbox workers (default: all cores)."),
) -> None:
    """Execute every attempt in the sandbox and score it: outcome, PIoU, PIoU_pen, per-part IoUs."""
    from tqdm import tqdm

    from experiments.translation import InputError, read_jsonl, score_attempts

    try:
        total = len(read_jsonl(attempts, "attempts"))
        with tqdm(total=total, desc="scoring", unit="attempt", disable=None) as bar:
            summary = score_attempts(refs, attempts, out, workers=workers, progress=bar.update)
    except InputError as e:
        fail(str(e))
    typer.echo(json.dumps(summary))


@translation_app.command("baseline")
def translation_baseline(
    draws: int = typer.Option(20, "--draws", min=1, help="Random placements per reference."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random placements (recorded in the output)."),
    which: str = typer.Option("sampled", "--set", help="Reference set to draw over."),
) -> None:
    """Print the null PIoU distribution (type-and-count-matched random placement) beside the paper's."""
    from bench.translation.baseline import PAPER_NULL, TAU, null_distribution
    from bench.translation.references import load_references

    try:
        refs = load_references(which)
    except ValueError as e:
        fail(str(e))
    _, s = null_distribution(refs, draws_per_ref=draws, seed=seed)
    typer.echo(f"null PIoU over {s.draws} draws ({len(refs)} '{which}' references x {draws}, seed {seed})")
    typer.echo(f"            mean    median  p95     share >= tau={TAU}")
    typer.echo(f"ours        {s.mean:.3f}   {s.median:.3f}   {s.p95:.3f}   {s.pass_rate:.4f}")
    typer.echo(f"paper       {PAPER_NULL['mean']:.3f}   -       {PAPER_NULL['p95']:.3f}   -")


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
