"""`ambench judge` and `ambench human ...`: VLM judges of the layout task and the human validation kit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from experiments.cli.common import RunOpt, app, bar, boundary, fail, run_writer, show


@app.command()
def judge(
    run: RunOpt,
    name: Optional[str] = typer.Option(None, "--judge", help="A name for this judge (it keys the verdict cache), e.g. qwen25vl7b; "
                                                             "with --spec it overrides the spec's name."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, llama.cpp)."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Model name the endpoint serves."),
    local_folder: Optional[Path] = typer.Option(None, "--local-folder", help="Or: a local transformers VLM folder (weights on disk)."),
    spec_file: Optional[Path] = typer.Option(None, "--spec", help='Or: a JSON judge spec for any backend, e.g. '
                                                                  '{"kind": "openai", "name": ..., "base_url": ..., "model": ...}.'),
    device: str = typer.Option("cpu", "--device", help="Device of a local VLM judge."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Environment variable that holds the API key, if any."),
    timeout: float = typer.Option(60.0, "--timeout", min=1.0, help="Seconds to wait for one judge request."),
) -> None:
    """Judge every valid layout attempt with a VLM (5-dimension rubric, cached), then print pass@k and T2/T3."""
    from dataclasses import replace

    from bench.layout.judge import JudgeError, JudgeSpec, VerdictParseError
    from experiments.judges import make_judge, read_spec
    from experiments.stages.judge import inversion_table, judge_stage, pass_at_k_table
    from experiments.rundir import RunDir

    from experiments.cli.common import check_device
    from experiments.cli.layout import _need_generations

    _need_generations(run)
    check_device(device, None)
    if sum(x is not None for x in (base_url, local_folder, spec_file)) != 1:
        fail("give one of --base-url with --judge-model, --local-folder, or --spec")
    try:
        if spec_file is not None:
            spec = read_spec(spec_file)
            spec = replace(spec, name=name) if name else spec
        elif name is None:
            fail("--judge NAME is needed (it keys the verdict cache)")
        elif local_folder is not None:
            spec = JudgeSpec("local", name, {"folder": str(local_folder), "device": device})
        else:
            if not judge_model:
                fail("--base-url needs --judge-model")
            from urllib.parse import urlparse

            u = urlparse(base_url)
            if u.scheme not in ("http", "https") or not u.netloc:
                fail(f"--base-url {base_url!r}: give an http(s) URL of an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
            spec = JudgeSpec("openai", name, {"base_url": base_url, "model": judge_model, "api_key_env": api_key_env,
                                              "timeout": timeout})
        j = make_judge(spec)
    except JudgeError as e:
        fail(str(e))
    name = j.name
    with run_writer(run, "ambench judge") as rd:
        total = sum(r["task"] == "layout" for r in rd.rows(RunDir.GENERATIONS))
        try:
            with bar(total, f"judge {name}", "attempt") as b:
                counts = judge_stage(rd, j, b.update)
        except (JudgeError, VerdictParseError) as e:
            fail(str(e))
        typer.echo(show(counts))
        rows = [r for r in rd.rows(RunDir.JUDGE_SCORES) if r["judge"] == name]
    for r in pass_at_k_table(rows):
        typer.echo(show(r))
    for r in inversion_table(rows):
        typer.echo(show(r))


human_app = typer.Typer(help="Human validation kit: pairwise comparisons to click through, and agreement.", no_args_is_help=True)
app.add_typer(human_app, name="human")


@human_app.command("export")
def human_export(
    run: RunOpt,
    out: Path = typer.Option(..., "--out", help="Folder for index.html and pairs.json."),
    pairs: int = typer.Option(40, "--pairs", min=1, help="Pairwise comparisons on the page."),
    seed: int = typer.Option(0, "--seed", help="Seed of the draw of the pairs (recorded in pairs.json)."),
) -> None:
    """Write a static HTML page of pairwise comparisons (two mosaics, one prompt) for annotators."""
    from experiments.cli.layout import _need_generations, ensure_renders
    from experiments.stages.human import export_kit

    _need_generations(run)
    if out.is_file():
        fail(f"--out {out} is a file; give a folder for index.html and pairs.json")
    ensure_renders(run)
    try:
        with boundary():
            meta = export_kit(run, out, pairs, seed)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    typer.echo(f"wrote {out / 'index.html'} with {len(meta['pairs'])} pairs (kit {meta['kit']})")


@human_app.command("import")
def human_import(
    kit: Path = typer.Option(..., "--kit", help="The folder `human export` wrote."),
    answers: list[Path] = typer.Argument(..., help="Answer files downloaded from the page, one per annotator."),
    run: Optional[Path] = typer.Option(None, "--run", help="Run with judge scores, for judge-vs-human agreement."),
    judge_name: Optional[str] = typer.Option(None, "--judge", help="A judge of the --run (its name in judge_scores.jsonl) to compare with the annotators; without it, annotators only."),
    margin: float = typer.Option(1.0, "--margin", help="Judge score gap that makes a pair 'separated'."),
) -> None:
    """Krippendorff's alpha between annotators, and judge-vs-human agreement on separated pairs."""
    from experiments.stages.human import import_answers

    try:
        with boundary():
            res = import_answers(kit, answers, run, judge_name, margin)
    except (ValueError, FileNotFoundError, KeyError) as e:
        fail(str(e))
    typer.echo(show(res, indent=1))
