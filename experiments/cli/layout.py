"""`ambench layout ...` and `ambench renders`: the layout prompts, renders, validity/triviality tables and the
paired comparison of two arms (e.g. SVG vs canvas, Exp. 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from experiments.cli.common import RunOpt, app, bar, boundary, f3, fail, run_writer, show

layout_app = typer.Typer(help="The layout task: the 150 prompts, renders, validity and triviality tables.", no_args_is_help=True)
app.add_typer(layout_app, name="layout")


@layout_app.command("prompts")
def layout_prompts(
    out: Optional[Path] = typer.Option(None, "--out", help="Write them as a prompt file (JSONL); default: print a summary."),
    tier: Optional[str] = typer.Option(None, "--tier", help="Only T1, T2 or T3."),
) -> None:
    """List the 150 layout prompts (3 tiers x 5 subcategories x 10), or write them as a prompt file."""
    from bench.layout.prompts import TIERS, load_layout_prompts

    if tier is not None and tier not in TIERS:
        fail(f"--tier must be one of {', '.join(TIERS)}")
    prompts = [p for p in load_layout_prompts() if tier is None or p.tier == tier]
    if out is None:
        for p in prompts:
            typer.echo(f"{p.id}  {p.tier} {p.subcategory_name:<20} {p.text}")
        return
    if out.is_dir():
        fail(f"--out {out} is a folder; give a file for the prompts")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps({"id": p.id, "task": "layout", "text": p.text, "subject": p.subject, "tier": p.tier,
                                "subcategory": p.subcategory}) + "\n")
    typer.echo(f"wrote {len(prompts)} prompts to {out}")


def _need_generations(run: Path) -> None:
    from experiments.rundir import RunDir, need_run

    with boundary():
        need_run(run)
    if not (run / RunDir.GENERATIONS).is_file():
        fail(f"{run} has no {RunDir.GENERATIONS}: run `ambench generate --out {run}` first")


def ensure_renders(run: Path) -> None:
    """Render what is missing, taking the run's lock only then: a run whose renders are complete is only read."""
    from experiments.stages.render import render_stage, renders_complete

    with boundary():
        complete = renders_complete(run)
    if not complete:
        with run_writer(run, "ambench (render missing attempts)") as rd:
            render_stage(rd)


def need_renders(run: Path) -> None:
    """A read-only command reads renders and never makes them (issue 31: `layout table`, documented read-only, once
    wrote renders/part-000000.h5 when a render part was deleted): a run with attempts not rendered is one sentence
    naming the command that renders them."""
    from experiments.stages.render import renders_complete

    with boundary():
        complete = renders_complete(run)
    if not complete:
        fail(f"{run} has attempts without a current render (never rendered, or a render part is missing or stale); this "
             f"command only reads: render them with `ambench renders --run {run}`, then run it again")


@app.command("renders")
def render_run(
    run: RunOpt,
    workers: Optional[int] = typer.Option(None, min=1, help="Sandbox workers (default: all cores)."),
) -> None:
    """Run every attempt of a run through the sandbox into RUN/renders/ (resumable)."""
    from experiments.rundir import RunDir
    from experiments.stages.render import render_stage

    _need_generations(run)
    with run_writer(run, "ambench renders") as rd:
        with bar(len(rd.rows(RunDir.GENERATIONS)), "render", "attempt") as b:
            path = render_stage(rd, workers, b.update, say=lambda m: typer.echo(m, err=True))
    typer.echo(f"wrote {path}")


@layout_app.command("table")
def layout_table_cmd(
    run: RunOpt,
    level: str = typer.Option("tier", "--by", help="tier or subcategory."),
    as_json: bool = typer.Option(False, "--json", help="JSON rows instead of a table."),
) -> None:
    """Validity and triviality per model, protocol and tier (or subcategory). Read-only on a rendered run."""
    from experiments.stages.layout import format_table, layout_table

    if level not in ("tier", "subcategory"):
        fail("--by must be tier or subcategory")
    _need_generations(run)
    need_renders(run)
    with boundary():
        rows = layout_table(run, level)
    if not rows:
        fail(f"{run} has no layout attempts")
    typer.echo(json.dumps(rows, indent=1) if as_json else format_table(rows, level))  # --json: for programs, full precision


@layout_app.command("compare")
def layout_compare(
    run: RunOpt,
    a: str = typer.Option(..., "--a", help="Arm A: a protocol label (canvas), e.g. zero-shot."),
    b: str = typer.Option(..., "--b", help="Arm B: medium/protocol, e.g. svg/zero-shot."),
    judge_name: Optional[str] = typer.Option(None, "--judge", help="Compare judge overall scores; default: valid and non-trivial (0/1)."),
    model: Optional[str] = typer.Option(None, "--model", help="Only this model (default: every model in the run, each separately)."),
    n_boot: int = typer.Option(10_000, "--boot", min=100, help="Bootstrap resamples of the prompt-clustered CI."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap (recorded with the result)."),
) -> None:
    """Paired per-prompt delta B - A (e.g. SVG - canvas) with a prompt-clustered bootstrap CI. Read-only."""
    from experiments.rundir import RunDir, arm_of, reading
    from experiments.stages.layout import paired_delta
    from experiments.stages.render import read_renders, row_key

    _need_generations(run)
    need_renders(run)
    rd = reading(run)
    arms: dict[tuple[str, str], dict[str, list[float]]] = {}
    with boundary():
        if judge_name:
            rows = rd.rows(RunDir.JUDGE_SCORES)
            if not rows:
                fail(f"{run} has no judge scores: run `ambench judge --run {run} --judge {judge_name} ...` first")
            for r in rows:
                if r["judge"] == judge_name:
                    arms.setdefault((r["model"], arm_of(r)), {}).setdefault(r["prompt_id"], []).append(r["overall"])
        else:
            renders = read_renders(rd)
            for r in rd.rows(RunDir.GENERATIONS):
                if r["task"] == "layout":
                    x = renders[row_key(r)]
                    good = float(x["outcome"] == "ok" and not x["trivial"])
                    arms.setdefault((r["model"], arm_of(r)), {}).setdefault(r["prompt_id"], []).append(good)
    models = sorted({m for m, _ in arms} if model is None else {model})
    metric = f"judge {judge_name} overall" if judge_name else "valid and non-trivial"
    shown = 0
    for m in models:
        if (m, a) in arms and (m, b) in arms:
            try:
                res = paired_delta(arms[(m, a)], arms[(m, b)], n_boot=n_boot, seed=seed)
            except ValueError as e:
                fail(f"{m}: {e}")
            typer.echo(show({"model": m, "a": a, "b": b, "metric": metric, **res}))
            shown += 1
    if not shown:
        fail(f"no model in {run} has both arms {a!r} and {b!r}")


@layout_app.command("tier-gap")
def layout_tier_gap(
    run: RunOpt,
    n_boot: int = typer.Option(10_000, "--boot", min=100, help="Bootstrap resamples of the prompt-clustered CI."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap (recorded with the result)."),
    as_json: bool = typer.Option(False, "--json", help="JSON rows instead of a table."),
) -> None:
    """Is the T2/T3 inversion a property of the 24x24 medium? T3 - T2 per medium, and its difference
    between each medium and v1, paired by prompt, with tier-stratified prompt bootstrap CIs. Read-only."""
    from experiments.stages.layout import tier_gap_table

    _need_generations(run)
    need_renders(run)
    with boundary():
        rows = tier_gap_table(run, n_boot, seed)
    if not rows:
        fail(f"{run} has layout attempts in only one medium (or too few T2/T3 prompts): add another with "
             f"`ambench generate --medium v1-48 --task layout --out {run}`")
    if as_json:  # for programs: full precision
        typer.echo(json.dumps(rows, indent=1))
        return
    for r in rows:
        who = f"{r['metric']} | {r['model']} | {r['protocol']}"
        if r["kind"] == "gap":
            typer.echo(f"{who} | {r['medium']:<8} T2 {f3(r['T2'])}  T3 {f3(r['T3'])}  gap {f3(r['gap'], True)} "
                       f"[{f3(r['ci'][0], True)}, {f3(r['ci'][1], True)}]  ({r['n_T2']}+{r['n_T3']} prompts)")
        else:
            typer.echo(f"{who} | {r['b']} - {r['a']}: gap {f3(r['gap_b'], True)} vs {f3(r['gap_a'], True)}, difference "
                       f"{f3(r['difference'], True)} [{f3(r['ci'][0], True)}, {f3(r['ci'][1], True)}]")
