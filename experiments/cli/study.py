"""`ambench run` and `ambench merge`: the whole study as one resumable command, and shards put back together."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from experiments.cli.common import (DeviceMapOpt, DeviceOpt, DtypeOpt, QuantizeOpt, TrustOpt, app, boundary,
                                    check_device, fail, show)


@app.command("run")
def run_cmd(
    models: Optional[list[str]] = typer.Option(None, "--model", "-m", help="Model(s) to study (repeat the option)."),
    preset: str = typer.Option("quick", "--preset", help="quick (embedded model, small stratified subset, minutes on a CPU), paper, "
                               "or organisms (the study on the model organisms, one run per part in OUT/<part>)."),
    out: Path = typer.Option(Path("runs/study"), "--out", help="Run directory; rerunning the same command resumes it."),
    seed: int = typer.Option(0, "--seed", help="Run seed; every random draw derives from it and is recorded."),
    translation_prompts: Optional[int] = typer.Option(None, "--translation-prompts", min=0, help="Override the preset."),
    layout_per_subcategory: Optional[int] = typer.Option(None, "--layout-per-subcategory", min=0, max=10, help="Layout prompts per subcategory (15 subcategories; 10 = all 150); overrides the preset."),
    samples: Optional[int] = typer.Option(None, "--samples", min=0, help="Sampled layout attempts per prompt besides the greedy one."),
    translation_samples: Optional[int] = typer.Option(None, "--translation-samples", min=0,
                                                      help="Sampled translation attempts per reference besides the greedy one."),
    prompt_files: Optional[list[Path]] = typer.Option(None, "--prompts",
                                                      help="Prompt-set file(s) (JSONL: id, task, text, subject) replacing the built-in "
                                                           "prompts; repeat the option."),
    references: Optional[Path] = typer.Option(None, "--references",
                                              help="Translation references (JSONL) scoring the translation prompts of --prompts."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", min=1, help="Most tokens an attempt may write; overrides the preset."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", min=1,
                                             help="Attempts per generation batch and prompts per capture batch (the work "
                                                  "unit a resume or a shard counts; more rows use more memory)."),
    protocol: Optional[str] = typer.Option(None, "--protocol", help="auto, zero-shot, few-shot or completion; overrides the preset."),
    svg: Optional[bool] = typer.Option(None, "--svg/--no-svg", help="Also run the SVG arm (default: on in the paper preset)."),
    media: Optional[list[str]] = typer.Option(None, "--medium", help="An extra canvas medium for the layout task (repeat): "
                                              "v1-48, outline. Adds a layout arm, its tables and the T2/T3 gap contrast."),
    selectivity: Optional[bool] = typer.Option(None, "--selectivity/--no-selectivity",
                                               help="The cross-model selectivity table (default: on in the paper preset)."),
    attention: Optional[bool] = typer.Option(None, "--attention/--no-attention",
                                             help="Attention focus on the prompt's spatial words (default: on in the paper preset)."),
    continuations: Optional[int] = typer.Option(None, "--continuations", min=1, help="Continuations per intervention arm and cut."),
    intervene_cuts: Optional[int] = typer.Option(None, "--intervene-cuts", min=0, help="Intervention cuts per model (0: every cut)."),
    intervene_tokens: Optional[int] = typer.Option(None, "--intervene-tokens", min=1, help="Tokens per continuation."),
    patch_cuts: Optional[int] = typer.Option(None, "--patch-cuts", min=0, help="Patching cuts per model (0: every cut)."),
    n_perm: Optional[int] = typer.Option(None, "--n-perm", min=19, help="Permutations of the headline Delta R^2 and "
                                         "beyond-text tests (default 999, paper 2,500; at least 19, the fewest that "
                                         "can give p < 0.05)."),
    n_perm_layers: Optional[int] = typer.Option(None, "--n-perm-layers", min=19, help="Permutations per per-layer "
                                                "probe row (default 49; at least 19)."),
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    trust_remote_code: TrustOpt = False,
    device_map: DeviceMapOpt = None,
    quantize: QuantizeOpt = None,
    judge_url: Optional[str] = typer.Option(None, "--judge-url", help="OpenAI-compatible VLM endpoint; judging runs when given."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Model name the judge endpoint serves."),
    trajectory: Optional[bool] = typer.Option(None, "--trajectory/--no-trajectory", help="Probe the drawn and the final "
                                              "canvas at every statement boundary (default: on in the paper preset)."),
    causal: Optional[str] = typer.Option(None, "--causal", help="Readable or used: interchange and erasure at each "
                                         "model's best layout-probe site, measured on the drawing: readable (default: "
                                         "where the probe decodes the layout), always, or off."),
    dino_folder: Optional[str] = typer.Option(None, "--dino-folder", help="Local DINO ViT folder (e.g. dino-vits8, "
                                              "never downloaded); the concept-consistency stage runs when given."),
    shard: Optional[str] = typer.Option(None, "--shard", help="i/n: run only this shard's work units (for batch schedulers)."),
    backend: str = typer.Option("local", "--backend", help="local, or ray (every model stage as sharded Ray tasks)."),
    shards: int = typer.Option(2, "--shards", min=1, help="Ray backend: number of shard tasks."),
    timings: Optional[Path] = typer.Option(None, "--timings", help="Append each stage's wall and CPU seconds to this file "
                                           "(JSON lines; the table is printed at the end either way)."),
) -> None:
    """The whole study as one resumable command: generate, score, capture, probe, intervene, report."""
    from experiments.organisms import parts_of, run_parts
    from experiments.study import StudyConfig, parse_shard, run_ray, run_study
    from experiments.study.timing import StageTimes

    clock = StageTimes(path=timings, step=preset)
    if backend not in ("local", "ray"):
        fail("--backend must be local or ray")
    check_device(device, dtype, quantize, device_map)  # before a run directory is made or a model loads (issue 31)
    files = tuple(str(p) for p in prompt_files) if prompt_files else None
    if parts_of(preset) is not None:
        if backend == "ray" or shard:
            fail(f"preset {preset} runs several small studies locally; --backend ray and --shard are for single studies")
        overrides = dict(seed=seed, max_new_tokens=max_new_tokens, batch_size=batch_size, samples=samples, translation_samples=translation_samples,
                         continuations=continuations, intervene_cuts=intervene_cuts, intervene_tokens=intervene_tokens,
                         patch_cuts=patch_cuts, device=device, dtype=dtype, models=models or None, n_perm=n_perm,
                         n_perm_layers=n_perm_layers, causal=causal)
        if files or references or translation_prompts is not None or layout_per_subcategory is not None:
            fail(f"preset {preset} names its own prompt files per part; drop --prompts, --references and the prompt counts")
        with boundary():
            try:
                summary = run_parts(preset, out, overrides, say=lambda m: typer.echo(m, err=True), clock=clock)
            except ValueError as e:
                fail(str(e))
        _report_times(clock)
        typer.echo(show(summary, indent=1, sort_keys=True))
        return
    if backend == "ray" and shard:
        fail("--shard is for batch schedulers; the ray backend shards by itself (--shards N)")
    try:
        c = StudyConfig.from_preset(preset, models=models or None, seed=seed, translation_prompts=translation_prompts,
                                    layout_per_subcategory=layout_per_subcategory, samples=samples,
                                    translation_samples=translation_samples, max_new_tokens=max_new_tokens,
                                    batch_size=batch_size, protocol=protocol,
                                    svg=svg, media=tuple(media) if media else None, selectivity=selectivity, attention=attention,
                                    continuations=continuations, intervene_cuts=intervene_cuts, intervene_tokens=intervene_tokens,
                                    patch_cuts=patch_cuts, n_perm=n_perm, n_perm_layers=n_perm_layers,
                                    device=device, dtype=dtype, judge_url=judge_url, judge_model=judge_model,
                                    dino_folder=dino_folder, trajectory=trajectory, causal=causal,
                                    trust_remote_code=trust_remote_code or None, device_map=device_map, quantize=quantize,
                                    prompt_files=files, references=str(references) if references else None)
        sh = parse_shard(shard) if shard else None
    except ValueError as e:
        fail(str(e))
    say = lambda m: typer.echo(m, err=True)  # noqa: E731
    with boundary():
        if backend == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                fail("the ray backend needs Ray: pip install 'ray>=2.9' (or .[ray])")
            summary = run_ray(c, out, shards, say)
        else:
            summary = run_study(c, out, sh, say=say, clock=clock)
    _report_times(clock)
    typer.echo(show(summary, indent=1, sort_keys=True))


def _report_times(clock: Any) -> None:
    """The stages' wall and CPU seconds on stderr."""
    if clock.rows:
        typer.echo("time per stage (CPU counts this process and the sandbox workers):\n" + clock.table(), err=True)


@app.command()
def repair(run: Path = typer.Argument(..., help="The run directory to repair (it must exist).")) -> None:
    """Drop the rows a run can no longer trust (edited, corrupted, torn) and what was made from them, and move
    aside damaged store parts, so the next run recomputes exactly that."""
    from experiments.repair import repair_run

    with boundary():
        repair_run(run, say=lambda m: typer.echo(m, err=True))


@app.command()
def merge(
    shards: list[Path] = typer.Argument(..., help="Shard run directories made with --shard i/n."),
    out: Path = typer.Option(..., "--out", help="Merged run directory (new, or an earlier merge of the same shards)."),
) -> None:
    """Merge shard run directories into one, in the order an unsharded run writes; then rerun `ambench run` on it."""
    from experiments.study import merge_runs

    with boundary():
        counts = merge_runs(shards, out)
    if counts.get("shards"):
        typer.echo(f"{out} holds shards {', '.join(counts['shards'])} (phase {counts['phase']})"
                   + (f"; missing {', '.join(counts['missing'])}: merge again when they finish" if counts["missing"] else ""), err=True)
    typer.echo(show(counts))


@app.command()
def report(
    runs: list[Path] = typer.Argument(..., help="Run directories, or folders of runs (the organisms preset's --out)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for index.html (default, for one run: RUN/report/)."),
) -> None:
    """One HTML page of any runs: the summary, the methods validated on model organisms, then each run's results."""
    from experiments.stages.report import is_run, organism_runs, write_combined, write_report

    for r in runs:  # a report reads any study as its files are (another release's too) and rewrites none of them
        if not organism_runs(r):
            fail(f"{r} is neither a run directory (with config.json or generations.jsonl) nor a folder of runs")
    if out is None and (len(runs) > 1 or not is_run(runs[0])):
        fail("give --out DIR: the report of several runs, or of a folder of runs, is written to DIR/index.html")
    if out is not None:  # checked before anything is read or written (issue 31)
        if out.exists() and not out.is_dir():
            fail(f"--out {out} is a file: give a folder for index.html (a new one, or an earlier report's)")
        inside = next((p for p in [out, *out.absolute().parents] if is_run(p)), None)
        if inside is not None:  # `report OTHER --out RUN` once wrote index.html into another run without its lock
            fail(f"--out {out} is {'a run directory' if inside == out else f'inside the run directory {inside}'}: a run's "
                 f"files are written only under its lock by its own commands (`ambench report {inside}` writes "
                 f"{inside / 'report' / 'index.html'}); give a folder of its own for the combined report")
    with boundary():
        path = write_report(runs[0]) if out is None else write_combined(runs, out)
    typer.echo(f"wrote {path}")
