"""`ambench probe`, `selectivity`, `attention`, `intervene`, `patch`, `steer`: Exp. 3 and beyond, each a thin
wrapper over its stage."""

from __future__ import annotations

from typing import Optional

import typer

from experiments.cli.common import (DeviceMapOpt, DeviceOpt, DtypeOpt, LimitOpt, ModelOpt, QuantizeOpt, RunOpt, SeedOpt, TaskOpt,
                                    TrustOpt, app, bar, check_attempts, check_device, check_layers, check_model, check_record,
                                    check_run, check_store_models, check_task, f3, fail, follow_study, recorded_layers, run_writer,
                                    runtime, show, store_models, study_of)


def check_samples(samples: Optional[list[int]]) -> None:
    if samples and min(samples) < 0:
        fail(f"--sample {min(samples)}: attempt samples are 0 (the greedy attempt) and up")


@app.command()
def probe(
    run: RunOpt,
    models: Optional[list[str]] = typer.Option(None, "--models", help="Only these models (default: every model with activations)."),
    tasks: Optional[list[str]] = typer.Option(None, "--task", help="Tasks to probe (repeat; default: layout, then translation as a control)."),
    min_attempts: int = typer.Option(1, "--min-attempts", min=1, help="Valid attempts a prompt needs to get a target."),
    exclude_trivial: bool = typer.Option(False, "--exclude-trivial/--include-trivial", help="Drop trivial renders from the consensus."),
    n_perm: int = typer.Option(2500, "--n-perm", min=0, help="Permutations of the headline Delta R^2 test (0: none)."),
    n_perm_layers: int = typer.Option(100, "--n-perm-layers", min=0, help="Permutations per per-layer own-target row (0: none)."),
    repeats: int = typer.Option(1, "--repeats", min=1, max=50,
                                help="Partitions of the cross-validation behind every interval (1: the study's own; more: a steadier centre, conservative width)."),
    target_attempts: str = typer.Option("all", "--target-attempts",
                                        help="Attempts that form a target: all (the paper's consensus) or sampled (greedy left out)."),
    seed: SeedOpt = 0,
) -> None:
    """Per-layer, per-position occupancy probes (nested CV) with every control, the headline Delta R^2 and the
    beyond-text test; writes probes.jsonl and plots."""
    from experiments.rundir import RunDir
    from experiments.stages.probe import TARGET_ATTEMPTS, ProbeError, ProbeSettings, beyond_verdict, delta_verdict, probe_stage

    for t in tasks or []:
        check_task(t)
    if target_attempts not in TARGET_ATTEMPTS:
        fail(f"--target-attempts {target_attempts!r}: use {' or '.join(TARGET_ATTEMPTS)}")
    s = ProbeSettings(tasks=tuple(tasks) if tasks else ("layout", "translation"), min_attempts=min_attempts,
                      exclude_trivial=exclude_trivial, n_perm=n_perm, n_perm_layers=n_perm_layers, repeats=repeats,
                      target_attempts=target_attempts, seed=seed)
    # validate, then lock (issue 31): the run, its models and its study's settings before anything is written
    found = check_run(run, "activations")
    check_store_models(found, models)
    study = study_of(found)
    if study is not None:
        if models and set(store_models(found)) - set(models):
            fail(f"--models: {run} is a study whose probes.jsonl holds every model's probes; probing only {', '.join(models)} "
                 "would drop the others' rows: leave --models out")
        s = follow_study(found, "probe", study.probe(), {
            "tasks": ("tasks", s.tasks), "min_attempts": ("min_attempts", min_attempts),
            "exclude_trivial": ("exclude_trivial", exclude_trivial), "n_perm": ("n_perm", n_perm),
            "n_perm_layers": ("n_perm_layers", n_perm_layers), "repeats": ("repeats", repeats),
            "target_attempts": ("target_attempts", target_attempts), "seed": ("seed", seed)})
    with run_writer(run, "ambench probe", needs="activations") as rd:
        try:
            rows = probe_stage(rd, models, s, progress=lambda msg: typer.echo(msg, err=True))
        except ProbeError as e:
            fail(str(e))

    for r in rows:
        if r.get("features") == "delta":
            typer.echo(f"{r['model']} {r['task']} {r['target']:<8} {r['position']:<8} Delta R^2 {f3(r['delta_r2'])} "
                       f"[{f3(r['delta_ci'][0])}, {f3(r['delta_ci'][1])}] (best {f3(r['r2_resid'])}, text {f3(r['r2_text'])}) "
                       f"p {f3(r.get('p_perm'))} q {f3(r.get('q_bh'))}: {delta_verdict(r)}")
        elif r.get("features") == "beyond_text":
            typer.echo(f"{r['model']} {r['task']} {r['target']:<8} {r['position']:<8} beyond-text Delta {f3(r['delta_beyond'])} "
                       f"[{f3(r['delta_ci'][0])}, {f3(r['delta_ci'][1])}] (best {f3(r['r2_resid'])}, text ceiling "
                       f"{r['baseline']} {f3(r['r2_baseline'])}) p {f3(r.get('p_fl'))} q {f3(r.get('q_bh'))}: "
                       f"{beyond_verdict(r)}")
        elif r.get("kind") in ("ceiling", "skipped", "targets"):
            typer.echo(show(r))
    typer.echo(f"wrote {run / RunDir.PROBES} ({len(rows)} rows) and plots in {run / RunDir.PROBE_PLOTS}")


@app.command()
def selectivity(
    run: RunOpt,
    models: Optional[list[str]] = typer.Option(None, "--models", help="Only these models (default: every model with activations)."),
    tasks: Optional[list[str]] = typer.Option(None, "--task", help="Tasks (repeat; default: layout)."),
    min_attempts: int = typer.Option(1, "--min-attempts", min=1, help="As `ambench probe` (the cells equal its best-layer rows)."),
    exclude_trivial: bool = typer.Option(False, "--exclude-trivial/--include-trivial", help="As `ambench probe`."),
    n_boot: int = typer.Option(10_000, "--n-boot", min=100, help="Prompt-clustered bootstrap resamples."),
    seed: SeedOpt = 0,
) -> None:
    """Cross-model selectivity: each model's activations decoding every model's layouts (best layer, nested
    CV), and the own-minus-others gap with a prompt-clustered bootstrap CI; writes selectivity.jsonl."""
    from experiments.rundir import RunDir
    from experiments.stages.probe import ProbeError
    from experiments.stages.selectivity import SelectivitySettings, selectivity_stage

    for t in tasks or []:
        check_task(t)
    s = SelectivitySettings(tasks=tuple(tasks) if tasks else ("layout",), min_attempts=min_attempts,
                            exclude_trivial=exclude_trivial, n_boot=n_boot, seed=seed)
    found = check_run(run, "activations")  # validate, then lock (issue 31)
    check_store_models(found, models)
    study = study_of(found)
    if study is not None:
        if models and set(store_models(found)) - set(models):
            fail(f"--models: {run} is a study whose selectivity table covers every model; leave --models out")
        s = follow_study(found, "selectivity", study.selectivity_settings(), {
            "tasks": ("tasks", s.tasks), "min_attempts": ("min_attempts", min_attempts),
            "exclude_trivial": ("exclude_trivial", exclude_trivial), "n_boot": ("n_boot", n_boot), "seed": ("seed", seed)})
    chosen = set(models) if models else set(store_models(found))
    if len(chosen) < 2:  # a `skipped` selectivity.jsonl and exit 0 was once the answer (issue 31, case 7)
        fail(f"{'--models ' + ' '.join(models) if models else run}: selectivity compares models' activations, so it needs "
             f"at least 2 models and {'they name' if models else 'the run has'} {len(chosen)}")
    with run_writer(run, "ambench selectivity", needs="activations") as rd:
        try:
            rows = selectivity_stage(rd, s, models, progress=lambda msg: typer.echo(msg, err=True))
        except ProbeError as e:
            fail(str(e))

    for r in rows:
        if r["kind"] == "gap":
            typer.echo(f"{r['task']} {r['position']:<8} {r['model']}: own {f3(r['own_r2'], True)}, others {f3(r['others_mean_r2'], True)}, "
                       f"gap {f3(r['gap'], True)} [{f3(r['ci'][0], True)}, {f3(r['ci'][1], True)}]{' (own best)' if r['own_best'] else ''}")
        elif r["kind"] == "mean_gap":
            typer.echo(f"{r['task']} {r['position']:<8} mean own-minus-others gap over {r['n_models']} models: {f3(r['gap'], True)} "
                       f"[{f3(r['ci'][0], True)}, {f3(r['ci'][1], True)}] (paper: +0.015)")
        elif r["kind"] == "skipped":
            typer.echo(show(r))
    typer.echo(f"wrote {run / RunDir.SELECTIVITY} ({len(rows)} rows)")


@app.command()
def attention(
    run: RunOpt,
    model: ModelOpt = "smollm2-135m-instruct",
    task: TaskOpt = "layout",
    layers: Optional[list[int]] = typer.Option(None, "--layers", help="Blocks whose attention is read (default: every block)."),
    samples: Optional[list[int]] = typer.Option(None, "--sample", help="Only these attempt samples (repeat; default: all)."),
    n_boot: int = typer.Option(2000, "--n-boot", min=100, help="Prompt-clustered bootstrap resamples of the mean's CI."),
    seed: SeedOpt = 0,
    limit: LimitOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    trust_remote_code: TrustOpt = False,
    device_map: DeviceMapOpt = None,
    quantize: QuantizeOpt = None,
) -> None:
    """Attention focus: how much the drawing statements of every valid attempt attend to the prompt's spatial
    words (vs uniform attention over the prompt), per layer; writes attention.jsonl, attention_table.json."""
    from experiments.stages.attention import AttentionSettings, attention_stage, summarise_attention

    check_task(task)
    check_samples(samples)
    check_device(device, dtype, quantize, device_map)
    s = AttentionSettings(task=task, layers=tuple(layers) if layers else None, samples=tuple(samples) if samples else None,
                          limit=limit, n_boot=n_boot, seed=seed)
    check_model(model)
    found = check_run(run)  # validate, then lock, then load (issue 31)
    check_attempts(found, model, task, samples)
    n = recorded_layers(found, model)
    if n is not None:
        check_layers(layers or [], n)
    with run_writer(run, "ambench attention") as rd:
        rt = runtime(model, device, dtype, False, trust_remote_code, device_map, quantize)
        check_layers(layers or [], rt.info.n_layers)
        with bar(None, "attention", "attempt") as b:
            counts = attention_stage(rt, rd, model, s, progress=b.update)
        typer.echo(show(counts))
        if not counts["attempts"]:
            fail(f"no valid {task} attempts of {model} in {run}")
        if counts["errors"]:
            typer.echo(f"{counts['errors']} attempts not read (rerun to retry them): {counts['error']}", err=True)
            if counts["errors"] == counts["attempts"]:
                fail(counts["error"])
        table = summarise_attention(rd, n_boot, seed)

    for t in table:
        if t["model"] != model:
            continue
        typer.echo(f"{t['model']} {t['task']}: focus over {t['attempts']} attempts ({t['prompts']} prompts): mean {f3(t.get('mean'))} "
                   f"[{f3((t.get('ci') or [None])[0])}, {f3((t.get('ci') or [None, None])[1])}], median {f3(t.get('median'))}, "
                   f"IQR {f3(t.get('q1'))}-{f3(t.get('q3'))}, peak layer {t.get('peak_layer')}; skipped {show(t['skipped'])}")
    typer.echo(f"table: {run / 'attention_table.json'}, plot: {run / 'attention.png'}")


@app.command()
def intervene(
    run: RunOpt,
    model: ModelOpt = "smollm2-135m-instruct",
    task: TaskOpt = "layout",
    arms: Optional[list[str]] = typer.Option(None, "--arms", help="Subset of null-empty, null-asis, moved-used, moved-unused."),
    continuations: int = typer.Option(9, "--continuations", min=1, help="Sampled continuations per arm and cut."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, help="Temperature of the continuations."),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", min=1, help="Most tokens a continuation may write."),
    cut: str = typer.Option("last", "--cut", help="last (after the completed picture) or all (after every spliceable statement)."),
    samples: Optional[list[int]] = typer.Option(None, "--sample", help="Only these attempt samples as sources (repeat; default: every valid attempt)."),
    seed: SeedOpt = 0,
    limit: LimitOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    trust_remote_code: TrustOpt = False,
    device_map: DeviceMapOpt = None,
    quantize: QuantizeOpt = None,
) -> None:
    """Splice coordinates into the model's own code (4 arms) and sample continuations; rates, deltas, dose-response."""
    from bench.intervene.splice import ARMS
    from experiments.stages.intervene import InterveneSettings, intervene_stage, summarise_interventions

    check_task(task)
    if cut not in ("last", "all"):
        fail(f"--cut {cut!r}: use last or all")
    bad = set(arms or []) - set(ARMS)
    if bad:
        fail(f"--arms {sorted(bad)[0]!r}: use {', '.join(ARMS)}")
    check_samples(samples)
    check_device(device, dtype, quantize, device_map)
    s = InterveneSettings(task=task, arms=tuple(arms or ARMS), continuations=continuations, temperature=temperature,
                          max_new_tokens=max_new_tokens, seed=seed, cut=cut, samples=tuple(samples) if samples else None,
                          limit=limit)
    check_model(model)
    found = check_run(run)  # validate, then lock, then load (issue 31): an empty folder once got config.json and a lock
    check_attempts(found, model, task)
    check_record(found, f"intervene/{model}/{task}", s.as_dict())
    with run_writer(run, "ambench intervene") as rd:
        rt = runtime(model, device, dtype, False, trust_remote_code, device_map, quantize)
        with bar(limit, "interventions", "cut") as b:
            counts = intervene_stage(rt, rd, model, s, progress=b.update)
        typer.echo(show(counts))
        if not counts["continuations"]:
            fail(f"no spliceable valid {task} attempts of {model} in {run}")
        summary = summarise_interventions(rd, seed)
    for t in summary["arms"]:
        typer.echo(show(t))
    typer.echo(f"table: {run / 'interventions_table.json'}, plot: {run / f'interventions-{task}.png'}")


@app.command()
def patch(
    run: RunOpt,
    model: ModelOpt = "smollm2-135m-instruct",
    task: TaskOpt = "layout",
    layers: Optional[list[int]] = typer.Option(None, "--layers", help="Layers to patch (default: every block)."),
    moved_arm: str = typer.Option("moved-unused", "--moved-arm", help="The moved arm swapped with null-asis (moved-used, moved-unused)."),
    continuations: int = typer.Option(9, "--continuations", min=1, help="Sampled continuations per cut, layer and direction."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, help="Temperature of the continuations."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1, help="Most tokens a continuation may write."),
    seed: SeedOpt = 0,
    limit: LimitOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    trust_remote_code: TrustOpt = False,
    device_map: DeviceMapOpt = None,
    quantize: QuantizeOpt = None,
) -> None:
    """Activation patching at the cut: swap resid_pre at the statement's tokens between arms, per layer."""
    from experiments.rundir import RunDir
    from experiments.patching_table import patching_table, plot_patching
    from experiments.stages.patch import PatchSettings, patch_stage

    from bench.intervene.splice import MOVES

    check_task(task)
    if moved_arm not in {m.name for m in MOVES}:
        fail(f"--moved-arm {moved_arm!r}: use {' or '.join(m.name for m in MOVES)}")
    check_device(device, dtype, quantize, device_map)
    s = PatchSettings(task=task, layers=tuple(layers) if layers else None, moved_arm=moved_arm, continuations=continuations,
                      temperature=temperature, max_new_tokens=max_new_tokens, seed=seed, limit=limit)
    check_model(model)
    found = check_run(run)  # validate, then lock, then load (issue 31)
    check_attempts(found, model, task)
    n = recorded_layers(found, model)
    if n is not None:  # the layers first: a bad --layers is said as such, before any other difference
        check_layers(layers or [], n + 1, what="resid_pre of each block, then the final residual")
    check_record(found, f"patch/{model}/{task}", s.as_dict(), skip=() if layers else ("layers",))
    with run_writer(run, "ambench patch") as rd:
        rt = runtime(model, device, dtype, False, trust_remote_code, device_map, quantize)
        check_layers(layers or [], rt.info.n_layers + 1, what="resid_pre of each block, then the final residual")
        n_layers = len(s.layers) if s.layers is not None else rt.info.n_layers
        with bar(n_layers * limit if limit else None, "patching", "cut x layer") as b:
            counts = patch_stage(rt, rd, model, s, progress=b.update)
        typer.echo(show(counts))
        rows = rd.rows(RunDir.PATCHING)
        for r in patching_table(rows):
            if (r["model"], r["task"]) == (model, task):
                typer.echo(f"{r['direction']:<12} layer {r['layer']:>3}: continued drawing {f3(r['rate'])} over {r['cuts']} cuts")
        typer.echo(f"plot: {plot_patching(rd, rows, task)}")


@app.command()
def steer(
    run: RunOpt,
    layer: int = typer.Option(..., "--layer", help="Layer whose resid_pre is steered (and whose probe gives the direction)."),
    model: ModelOpt = "smollm2-135m-instruct",
    task: TaskOpt = "layout",
    region: str = typer.Option("left", "--region", help="left, right, top or bottom half of the 6x6 grid."),
    strengths: list[float] = typer.Option([0.0, 0.25, 0.5], "--strength", help="Multiples of the layer's mean residual norm (repeat)."),
    position: str = typer.Option("last", "--position", help="Probe position: subject, turn or last."),
    samples: int = typer.Option(2, "--samples", min=1, help="Attempts per prompt and strength (sample 0 greedy)."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, help="Temperature of the sampled attempts (sample 0 is greedy)."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", min=1, help="Most tokens a steered attempt may write."),
    seed: SeedOpt = 0,
    limit: LimitOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    trust_remote_code: TrustOpt = False,
    device_map: DeviceMapOpt = None,
    quantize: QuantizeOpt = None,
) -> None:
    """Steer generation along the probe direction for a region; print the region's occupancy per strength."""
    from bench.canvas.regions import REGIONS
    from experiments.stages.steer import SteerSettings, steer_stage

    from interp.prompts import POSITIONS

    check_task(task)
    if region not in REGIONS:
        fail(f"--region {region!r}: use {', '.join(REGIONS)}")
    if position not in POSITIONS:
        fail(f"--position {position!r}: use {', '.join(POSITIONS)}")
    check_device(device, dtype, quantize, device_map)
    check_model(model)
    # validate, then lock, then load (issues 30, 31): `steer --run <not a run>` once wrote .lock and loaded for 87 s
    found = check_run(run, "activations")
    check_store_models(found, [model], "--model")
    check_attempts(found, model, task)
    n = recorded_layers(found, model)
    if n is not None:
        check_layers([layer], n, "--layer")
    elif layer < 0:
        fail(f"--layer must be 0 or more (a block of the model), not {layer}")
    with run_writer(run, "ambench steer") as rd:
        rt = runtime(model, device, dtype, False, trust_remote_code, device_map, quantize)
        check_layers([layer], rt.info.n_layers, "--layer")
        s = SteerSettings(layer=layer, task=task, region=region, strengths=tuple(strengths), position=position, samples=samples,
                          temperature=temperature, max_new_tokens=max_new_tokens, seed=seed, limit=limit)
        try:
            with bar(None, "steering", "prompt x strength") as b:
                summary = steer_stage(rt, rd, s, model, progress=b.update)
        except (ValueError, FileNotFoundError) as e:
            fail(str(e))
    for r in summary:
        typer.echo(show(r))


@app.command()
def causal(
    run: RunOpt,
    model: ModelOpt = "smollm2-135m-instruct",
    when: str = typer.Option("readable", "--when", help="readable: intervene only where the probe decodes the layout; "
                             "always: intervene anyway (the verdict still says whether it was readable)."),
    max_prompts: int = typer.Option(64, "--max-prompts", min=4, help="Prompts with a target drawn on (a seeded subset "
                                    "when there are more)."),
    seed: SeedOpt = 0,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    trust_remote_code: TrustOpt = False,
    device_map: DeviceMapOpt = None,
    quantize: QuantizeOpt = None,
) -> None:
    """Readable or used: interchange and erasure at the layout probe's best site, measured on what the model draws.

    Example: ambench causal --run runs/quick/study --model smollm2-135m-instruct --when always
    """
    from dataclasses import replace

    from experiments.stages.causal import causal_stage, site_of, verdict
    from experiments.study.config import StudyConfig

    if when not in ("readable", "always"):
        fail(f"--when {when!r}: readable or always")
    check_device(device, dtype, quantize, device_map)
    check_model(model)
    from experiments.rundir import RunDir

    rd0 = check_run(run, RunDir.PROBES)
    study = (rd0.config().get("stages", {}).get("study") or {}).get("config")
    try:
        base = StudyConfig.from_dict(study).causal_settings() if study else None
        from experiments.stages.causal import CausalSettings

        s = replace(base or CausalSettings(), when=when, max_prompts=max_prompts, seed=seed)
    except (ValueError, TypeError) as e:
        fail(str(e))
    site = site_of(rd0.rows(RunDir.PROBES), model, s)
    if site is None:
        fail(f"{run} has no layout probe rows of {model} at `last`: run `ambench probe --run {run}` first")
    with run_writer(run, "ambench causal") as rd:
        rt = runtime(model, device, dtype, False, trust_remote_code, device_map, quantize) if s.draws(site) else None
        row = causal_stage(rt, rd, model, s, say=lambda m: typer.echo(m, err=True))
    typer.echo(f"{model}: {verdict(row)}")


@app.command()
def trajectory(
    run: RunOpt,
    model: ModelOpt = "smollm2-135m-instruct",
    task: TaskOpt = "layout",
    boundaries: int = typer.Option(6, "--boundaries", min=1, help="Statement boundaries probed after the prompt."),
    seed: SeedOpt = 0,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    trust_remote_code: TrustOpt = False,
    device_map: DeviceMapOpt = None,
    quantize: QuantizeOpt = None,
) -> None:
    """Plan or state: probe the canvas drawn so far and the final canvas at every statement boundary."""
    from experiments.stages.trajectory import TrajectorySettings, trajectory_stage, verdict

    check_task(task)
    check_device(device, dtype, quantize, device_map)
    s = TrajectorySettings(task=task, boundaries=boundaries, seed=seed)
    check_model(model)
    check_attempts(check_run(run), model, task)  # validate, then lock, then load (issue 31)
    with run_writer(run, "ambench trajectory") as rd:
        rt = runtime(model, device, dtype, False, trust_remote_code, device_map, quantize)
        with bar(None, "plan or state", "attempt") as b:
            out = trajectory_stage(rt, rd, model, s, progress=b.update)
    typer.echo(f"attempts: {show(out['counts'])}")
    for r in out["rows"]:
        if r.get("probe"):
            typer.echo(f"boundary {r['boundary']} (n {r['n']}) {r['probe']:<12} R^2 {f3(r['r2'], True)} "
                       f"[{f3(r['ci'][0], True)}, {f3(r['ci'][1], True)}]")
        elif "skipped" in r:
            typer.echo(f"boundary {r['boundary']}: skipped, {r['skipped']}")
    typer.echo(f"{model}: {verdict(out['rows'])}")
