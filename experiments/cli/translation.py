"""`ambench translation ...`: references, prompts, PIoU scoring and the null baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from experiments.cli.common import app, f3, fail, show

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
    if out.is_dir():
        fail(f"--out {out} is a folder; give a file for the references")
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
    workers: Optional[int] = typer.Option(None, min=1, help="Sandbox workers (default: all cores)."),
) -> None:
    """Execute every attempt in the sandbox and score it: outcome, PIoU, PIoU_pen, per-part IoUs."""
    from tqdm import tqdm

    from experiments.stages.translation import InputError, read_jsonl, score_attempts

    try:
        total = len(read_jsonl(attempts, "attempts"))
        with tqdm(total=total, desc="scoring", unit="attempt", disable=None) as bar:
            summary = score_attempts(refs, attempts, out, workers=workers, progress=bar.update)
    except InputError as e:
        fail(str(e))
    typer.echo(show(summary))


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
    typer.echo(f"ours        {f3(s.mean):<7} {f3(s.median):<7} {f3(s.p95):<7} {f3(s.pass_rate)}")
    typer.echo(f"paper       {f3(PAPER_NULL['mean']):<7} -       {f3(PAPER_NULL['p95']):<7} -")


@translation_app.command("prompts")
def translation_prompts(
    out: Path = typer.Option(..., "--out", help="Write the prompts here (JSONL: id, task, text, subject)."),
    which: str = typer.Option("sampled", "--set", help="sampled, ladder, periodic, icons or all."),
) -> None:
    """Write the translation prompts as a prompt file for `ambench generate` / `ambench capture`."""
    from bench.translation.references import load_references
    from interp.prompts import translation_items, write_prompts

    try:
        ids = [r.id for r in load_references(which)]
    except ValueError as e:
        fail(str(e))
    if out.is_dir():
        fail(f"--out {out} is a folder; give a file for the prompts")
    items = translation_items(ids)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_prompts(items, out)
    typer.echo(f"wrote {len(items)} prompts to {out}")
