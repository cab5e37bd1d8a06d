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
    items = translation_items(ids)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_prompts(items, out)
    typer.echo(f"wrote {len(items)} prompts to {out}")


# --------------------------------------------------------------------------- model commands

MODEL_HELP = "smollm2-135m-instruct, gemma3-270m, a local Hugging Face folder, or a hub name in the local cache."


def _load_items(task: Optional[str], prompts: Optional[Path], limit: Optional[int]):
    from interp.prompts import PromptError, load_prompts, translation_items

    try:
        if prompts is not None:
            items = load_prompts(prompts, task)
        elif task == "translation":
            from bench.translation.references import load_references

            items = translation_items([r.id for r in load_references("sampled")])
        elif task == "layout":
            from interp.prompts import layout_items

            items = layout_items()
        else:
            fail("give --prompts FILE or --task translation|layout")
    except PromptError as e:
        fail(str(e))
    return items[:limit] if limit else items


def _runtime(model: str, device: Optional[str], dtype: Optional[str], compat: bool):
    from interp.models import ModelError
    from interp.runtime import Runtime, describe

    typer.echo(f"loading {model} ...", err=True)
    try:
        rt = Runtime.load(model, device=device, dtype=dtype, compat=compat)
    except ModelError as e:
        fail(str(e))
    typer.echo(f"loaded {describe(rt)}", err=True)
    return rt


@app.command()
def generate(
    model: str = typer.Option("smollm2-135m-instruct", "--model", "-m", help=MODEL_HELP),
    task: Optional[str] = typer.Option(None, "--task", help="translation or layout (the built-in prompt set when --prompts is not given)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt file (JSONL: id, text, task, subject)."),
    samples: int = typer.Option(10, "--samples", "-n", min=0, help="Sampled attempts per prompt, besides the greedy one."),
    out: Path = typer.Option(..., "--out", help="Run directory; an existing one is resumed."),
    protocol: str = typer.Option("auto", "--protocol", help="auto, zero-shot, few-shot or completion."),
    shots: int = typer.Option(2, "--shots", min=0, help="Worked examples for few-shot and completion."),
    output: str = typer.Option("canvas", "--output", help="canvas (Python canvas code) or svg (raw SVG, the medium ablation)."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, help="Temperature of the sampled attempts."),
    seed: int = typer.Option(0, "--seed", help="Run seed; each attempt's seed is derived from it and recorded."),
    max_new_tokens: int = typer.Option(384, "--max-new-tokens", min=1),
    batch_size: int = typer.Option(8, "--batch-size", min=1),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N prompts."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda, cuda:1 ... (default: cuda if present)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="float32, bfloat16, float16 (default: bf16 on GPU, fp32 on CPU)."),
    compat: bool = typer.Option(False, "--compat/--no-compat", help="TransformerLens compatibility mode (processed weights)."),
    check: bool = typer.Option(True, "--check/--no-check", help="Render the attempts (RUN/renders.h5) and print validity."),
) -> None:
    """Generate 1 greedy + N sampled canvas programs per prompt into RUN/generations.jsonl (resumable)."""
    import time

    from tqdm import tqdm

    from experiments.generation import GENERATIONS, GenerateSettings, RunError, generate_stage, read_rows
    from interp.prompts import PromptError

    items = _load_items(task, prompts, limit)
    rt = _runtime(model, device, dtype, compat)
    if output not in ("canvas", "svg"):
        fail("--output must be canvas or svg")
    settings = GenerateSettings(samples, temperature, seed, max_new_tokens, batch_size, protocol, shots, output)
    t0, tokens = time.perf_counter(), [0]
    with tqdm(total=len(items) * (samples + 1), desc=f"generate {model}", unit="attempt", disable=None) as bar:
        def progress(n: int, new_tokens: int) -> None:
            tokens[0] += new_tokens
            bar.set_postfix_str(f"{tokens[0] / max(time.perf_counter() - t0, 1e-9):.1f} tok/s")
            bar.update(n)

        try:
            counts = generate_stage(rt, items, out, settings, model=model, progress=progress)
        except (RunError, PromptError) as e:
            fail(str(e))
    typer.echo(json.dumps(counts))
    if check:  # renders every new attempt into RUN/renders.h5 (reused by later stages), then counts outcomes
        from experiments.render import read_renders, render_stage, validity

        render_stage(out)
        ids = {i.id for i in items}
        rows = [r for r in read_rows(out / GENERATIONS) if r["model"] == model and r["prompt_id"] in ids]
        for (m, t, p), v in sorted(validity(rows, read_renders(out)).items()):
            typer.echo(f"{m} {t} {p}: {v['valid']}/{v['attempts']} valid ({100 * v['valid_rate']:.1f}%) {json.dumps(v['outcomes'], sort_keys=True)}")


@app.command()
def capture(
    model: str = typer.Option("smollm2-135m-instruct", "--model", "-m", help=MODEL_HELP),
    task: Optional[str] = typer.Option(None, "--task", help="translation or layout (the built-in prompt set when --prompts is not given)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt file (JSONL: id, text, task, subject)."),
    out: Path = typer.Option(..., "--out", help="Run directory; activations go to RUN/activations/<model>.h5 (resumed)."),
    protocol: str = typer.Option("auto", "--protocol", help="The protocol the generations used (positions follow it)."),
    shots: int = typer.Option(2, "--shots", min=0),
    store_dtype: str = typer.Option("float32", "--store-dtype", help="float32 or float16 on disk."),
    batch_size: int = typer.Option(8, "--batch-size", min=1),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N prompts."),
    device: Optional[str] = typer.Option(None, "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype"),
    compat: bool = typer.Option(False, "--compat/--no-compat"),
) -> None:
    """Capture the residual stream (every layer, 3 token positions per prompt) into HDF5."""
    from tqdm import tqdm

    from activations.store import ActivationStore, StoreError
    from interp.prompts import PromptError, Protocol

    items = _load_items(task, prompts, limit)
    rt = _runtime(model, device, dtype, compat)
    from experiments.generation import capture_stage

    try:
        with tqdm(total=len(items), desc=f"capture {model}", unit="prompt", disable=None) as bar:
            path = capture_stage(rt, items, out, Protocol(protocol, shots), store_dtype, batch_size, model, bar.update)
    except (StoreError, PromptError) as e:
        fail(str(e))
    with ActivationStore(path) as s:
        typer.echo(f"{path}: {s.shape[0]} prompts x {s.shape[1]} layers x {s.shape[2]} positions x {s.shape[3]} ({store_dtype})")


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
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps({"id": p.id, "task": "layout", "text": p.text, "subject": p.subject, "tier": p.tier,
                                "subcategory": p.subcategory}) + "\n")
    typer.echo(f"wrote {len(prompts)} prompts to {out}")


@app.command("renders")
def render_run(
    run: Path = typer.Option(..., "--run", help="Run directory with generations.jsonl."),
    workers: Optional[int] = typer.Option(None, help="Sandbox workers (default: all cores)."),
) -> None:
    """Run every attempt of a run through the sandbox into RUN/renders.h5 (resumable)."""
    from tqdm import tqdm

    from experiments.generation import GENERATIONS, RunError, read_rows
    from experiments.render import render_stage

    if not (run / GENERATIONS).is_file():
        fail(f"{run} has no {GENERATIONS}: run `ambench generate --out {run}` first")
    try:
        total = len(read_rows(run / GENERATIONS))
        with tqdm(total=total, desc="render", unit="attempt", disable=None) as bar:
            path = render_stage(run, workers, bar.update)
    except RunError as e:
        fail(str(e))
    typer.echo(f"wrote {path}")


@layout_app.command("table")
def layout_table_cmd(
    run: Path = typer.Option(..., "--run", help="Run directory (renders.h5 is made first when missing)."),
    level: str = typer.Option("tier", "--by", help="tier or subcategory."),
    as_json: bool = typer.Option(False, "--json", help="JSON rows instead of a table."),
) -> None:
    """Validity and triviality per model, protocol and tier (or subcategory)."""
    from experiments.generation import GENERATIONS
    from experiments.layout import format_table, layout_table
    from experiments.render import render_stage

    if level not in ("tier", "subcategory"):
        fail("--by must be tier or subcategory")
    if not (run / GENERATIONS).is_file():
        fail(f"{run} has no {GENERATIONS}: run `ambench generate --task layout --out {run}` first")
    render_stage(run)  # renders whatever is missing (a no-op when complete)
    rows = layout_table(run, level)
    if not rows:
        fail(f"{run} has no layout attempts")
    typer.echo(json.dumps(rows, indent=1) if as_json else format_table(rows, level))


@layout_app.command("compare")
def layout_compare(
    run: Path = typer.Option(..., "--run", help="Run directory."),
    a: str = typer.Option(..., "--a", help="Protocol label of arm A, e.g. zero-shot (canvas)."),
    b: str = typer.Option(..., "--b", help="Protocol label of arm B, e.g. svg/zero-shot."),
    judge_name: Optional[str] = typer.Option(None, "--judge", help="Compare judge overall scores; default: valid and non-trivial (0/1)."),
    model: Optional[str] = typer.Option(None, "--model", help="Only this model (default: every model in the run, each separately)."),
    n_boot: int = typer.Option(10_000, "--boot", min=100),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Paired per-prompt delta B - A (e.g. SVG - canvas) with a prompt-clustered bootstrap CI."""
    from experiments.generation import GENERATIONS, read_rows
    from experiments.judging import JUDGE_SCORES
    from experiments.layout import paired_delta
    from experiments.render import read_renders, render_stage, row_key

    if not (run / GENERATIONS).is_file():
        fail(f"{run} has no {GENERATIONS}")
    render_stage(run)
    arms: dict[tuple[str, str], dict[str, list[float]]] = {}
    if judge_name:
        if not (run / JUDGE_SCORES).is_file():
            fail(f"{run} has no judge scores: run `ambench judge --run {run} --judge {judge_name} ...` first")
        for r in read_rows(run / JUDGE_SCORES):
            if r["judge"] == judge_name:
                arms.setdefault((r["model"], r["protocol"]), {}).setdefault(r["prompt_id"], []).append(r["overall"])
    else:
        renders = read_renders(run)
        for r in read_rows(run / GENERATIONS):
            if r["task"] == "layout":
                x = renders[row_key(r)]
                good = float(x["outcome"] == "ok" and not x["trivial"])
                arms.setdefault((r["model"], r["protocol"]), {}).setdefault(r["prompt_id"], []).append(good)
    models = sorted({m for m, _ in arms} if model is None else {model})
    metric = f"judge {judge_name} overall" if judge_name else "valid and non-trivial"
    shown = 0
    for m in models:
        if (m, a) in arms and (m, b) in arms:
            try:
                res = paired_delta(arms[(m, a)], arms[(m, b)], n_boot=n_boot, seed=seed)
            except ValueError as e:
                fail(f"{m}: {e}")
            typer.echo(json.dumps({"model": m, "a": a, "b": b, "metric": metric, **res}))
            shown += 1
    if not shown:
        fail(f"no model in {run} has both arms {a!r} and {b!r}")


@app.command()
def judge(
    run: Path = typer.Option(..., "--run", help="Run directory with layout attempts."),
    name: str = typer.Option(..., "--judge", help="A name for this judge (it keys the verdict cache), e.g. qwen25vl7b."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, llama.cpp)."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Model name the endpoint serves."),
    local_folder: Optional[Path] = typer.Option(None, "--local-folder", help="Or: a local transformers VLM folder (weights on disk)."),
    device: str = typer.Option("cpu", "--device", help="Device of a local VLM judge."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env", help="Environment variable that holds the API key, if any."),
    timeout: float = typer.Option(60.0, "--timeout", min=1.0),
) -> None:
    """Judge every valid layout attempt with a VLM (5-dimension rubric, cached), then print pass@k and T2/T3."""
    import os

    from tqdm import tqdm

    from bench.layout.judge import JudgeError, OpenAIJudge, VerdictParseError
    from experiments.generation import GENERATIONS, read_rows
    from experiments.judging import JUDGE_SCORES, inversion_table, judge_stage, pass_at_k_table

    if not (run / GENERATIONS).is_file():
        fail(f"{run} has no {GENERATIONS}")
    key = os.environ.get(api_key_env) if api_key_env else None
    if api_key_env and not key:
        fail(f"--api-key-env {api_key_env} is not set")
    if (base_url is None) == (local_folder is None):
        fail("give either --base-url with --judge-model, or --local-folder")
    if local_folder is not None:
        from interp.vlm_judge import TransformersJudge

        try:
            j = TransformersJudge(name, local_folder, device=device)
        except JudgeError as e:
            fail(str(e))
    else:
        if not judge_model:
            fail("--base-url needs --judge-model")
        j = OpenAIJudge(name, base_url, judge_model, api_key=key, timeout=timeout)
    total = sum(r["task"] == "layout" for r in read_rows(run / GENERATIONS))
    try:
        with tqdm(total=total, desc=f"judge {name}", unit="attempt", disable=None) as bar:
            counts = judge_stage(run, j, bar.update)
    except (JudgeError, VerdictParseError) as e:
        fail(str(e))
    typer.echo(json.dumps(counts))
    rows = [r for r in read_rows(run / JUDGE_SCORES) if r["judge"] == name]
    for r in pass_at_k_table(rows):
        typer.echo(json.dumps(r))
    for r in inversion_table(rows):
        typer.echo(json.dumps(r))


human_app = typer.Typer(help="Human validation kit: pairwise comparisons to click through, and agreement.", no_args_is_help=True)
app.add_typer(human_app, name="human")


@human_app.command("export")
def human_export(
    run: Path = typer.Option(..., "--run", help="Run directory with layout attempts."),
    out: Path = typer.Option(..., "--out", help="Folder for index.html and pairs.json."),
    pairs: int = typer.Option(40, "--pairs", min=1),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Write a static HTML page of pairwise comparisons (two mosaics, one prompt) for annotators."""
    from experiments.human import export_kit

    try:
        meta = export_kit(run, out, pairs, seed)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    typer.echo(f"wrote {out / 'index.html'} with {len(meta['pairs'])} pairs (kit {meta['kit']})")


@human_app.command("import")
def human_import(
    kit: Path = typer.Option(..., "--kit", help="The folder `human export` wrote."),
    answers: list[Path] = typer.Argument(..., help="Answer files downloaded from the page, one per annotator."),
    run: Optional[Path] = typer.Option(None, "--run", help="Run with judge scores, for judge-vs-human agreement."),
    judge_name: Optional[str] = typer.Option(None, "--judge"),
    margin: float = typer.Option(1.0, "--margin", help="Judge score gap that makes a pair 'separated'."),
) -> None:
    """Krippendorff's alpha between annotators, and judge-vs-human agreement on separated pairs."""
    from experiments.human import import_answers

    try:
        res = import_answers(kit, answers, run, judge_name, margin)
    except (ValueError, FileNotFoundError, KeyError) as e:
        fail(str(e))
    typer.echo(json.dumps(res, indent=1))


@app.command()
def probe(
    run: Path = typer.Option(..., "--run", help="Run directory with generations, and activations from `ambench capture`."),
    models: Optional[list[str]] = typer.Option(None, "--models", help="Only these models (default: every model with activations)."),
    min_attempts: int = typer.Option(3, "--min-attempts", min=1, help="Valid non-trivial attempts a prompt needs to get a target."),
    n_perm: int = typer.Option(20, "--n-perm", min=0, help="Permutations per (layer, position) for p-values (0: none)."),
    n_boot: int = typer.Option(1000, "--n-boot", min=100, help="Prompt-bootstrap resamples for CIs."),
    seed: int = typer.Option(0, "--seed", help="Seed of folds, permutations and bootstrap (recorded in every row)."),
) -> None:
    """Per-layer, per-position occupancy probes (nested CV) with every control; writes probes.jsonl and plots."""
    from experiments.probing import PROBES, ProbeError, ProbeSettings, probe_stage

    s = ProbeSettings(min_attempts=min_attempts, n_perm=n_perm, n_boot=n_boot, seed=seed)
    try:
        rows = probe_stage(run, models, s, progress=lambda msg: typer.echo(msg, err=True))
    except ProbeError as e:
        fail(str(e))
    def f3(v: Optional[float]) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    for r in rows:
        if r.get("features") == "resid" and r.get("layer") == "best" and r.get("target") == "own":
            typer.echo(f"{r['model']} {r['position']:<8} best layer (chosen in folds): R^2 {f3(r['r2'])} "
                       f"[{f3(r['ci'][0])}, {f3(r['ci'][1])}] layers {[c['layer'] for c in r['chosen']]}")
        elif r.get("features") == "text":
            typer.echo(f"{r['model']} text baseline (TF-IDF): R^2 {f3(r['r2'])}")
        elif r.get("kind") in ("ceiling", "skipped", "targets"):
            typer.echo(json.dumps(r))
    typer.echo(f"wrote {run / PROBES} ({len(rows)} rows) and plots in {run / 'probes'}")


@app.command()
def intervene(
    run: Path = typer.Option(..., "--run", help="Run directory with canvas generations."),
    model: str = typer.Option("smollm2-135m-instruct", "--model", "-m", help=MODEL_HELP),
    arms: Optional[list[str]] = typer.Option(None, "--arms", help="Subset of null-empty, null-asis, moved-used, moved-unused."),
    continuations: int = typer.Option(9, "--continuations", min=1),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", min=1),
    cut: str = typer.Option("last", "--cut", help="last (after the completed picture) or all (after every spliceable statement)."),
    seed: int = typer.Option(0, "--seed"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N cuts."),
    device: Optional[str] = typer.Option(None, "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype"),
) -> None:
    """Splice coordinates into the model's own code (4 arms) and sample continuations; rates, deltas, dose-response."""
    from bench.intervene.splice import ARMS
    from experiments.generation import read_rows
    from experiments.intervention import INTERVENTIONS, intervene_stage, summarise_interventions

    if cut not in ("last", "all"):
        fail("--cut must be last or all")
    bad = set(arms or []) - set(ARMS)
    if bad:
        fail(f"unknown arms {sorted(bad)}: use {', '.join(ARMS)}")
    rt = _runtime(model, device, dtype, False)
    counts = intervene_stage(rt, run, model, arms or ARMS, continuations, temperature, max_new_tokens, seed, cut, limit)
    typer.echo(json.dumps(counts))
    rows = [r for r in read_rows(run / INTERVENTIONS) if r["model"] == model]
    if not rows:
        fail(f"no spliceable valid attempts of {model} in {run}")
    summary = summarise_interventions(run, seed)
    for t in summary["arms"]:
        typer.echo(json.dumps(t))
    typer.echo(f"table: {run / 'interventions_table.json'}, plot: {run / 'interventions.png'}")


@app.command()
def patch(
    run: Path = typer.Option(..., "--run", help="Run directory with canvas generations."),
    model: str = typer.Option("smollm2-135m-instruct", "--model", "-m", help=MODEL_HELP),
    layers: Optional[list[int]] = typer.Option(None, "--layers", help="Layers to patch (default: every block)."),
    moved_arm: str = typer.Option("moved-unused", "--moved-arm", help="moved-used or moved-unused."),
    continuations: int = typer.Option(9, "--continuations", min=1),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", min=1),
    seed: int = typer.Option(0, "--seed"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N cuts."),
    device: Optional[str] = typer.Option(None, "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype"),
) -> None:
    """Activation patching at the cut: swap resid_pre at the statement's tokens between arms, per layer."""
    from experiments.intervention import patch_stage, plot_patching

    if moved_arm not in ("moved-used", "moved-unused"):
        fail("--moved-arm must be moved-used or moved-unused")
    rt = _runtime(model, device, dtype, False)
    rows = patch_stage(rt, run, model, layers, continuations, 0.7, max_new_tokens, seed, moved_arm, limit)
    per = {}
    for r in rows:
        if "layer" in r:
            per.setdefault((r["direction"], r["layer"]), []).append(r["rate"])
        else:
            typer.echo(json.dumps(r))
    for (d, layer), v in sorted(per.items()):
        typer.echo(f"{d:<12} layer {layer:>3}: continued drawing {sum(v) / len(v):.3f} over {len(v)} cuts")
    typer.echo(f"plot: {plot_patching(run, rows)}")


@app.command()
def steer(
    run: Path = typer.Option(..., "--run", help="Run directory with generations, renders and activations."),
    layer: int = typer.Option(..., "--layer", help="Layer whose resid_pre is steered (and whose probe gives the direction)."),
    model: str = typer.Option("smollm2-135m-instruct", "--model", "-m", help=MODEL_HELP),
    region: str = typer.Option("left", "--region", help="left, right, top or bottom half of the 6x6 grid."),
    strengths: list[float] = typer.Option([0.0, 0.25, 0.5], "--strength", help="Multiples of the layer's mean residual norm (repeat)."),
    position: str = typer.Option("last", "--position", help="Probe position: subject, turn or last."),
    samples: int = typer.Option(2, "--samples", min=1, help="Attempts per prompt and strength (sample 0 greedy)."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", min=1),
    seed: int = typer.Option(0, "--seed"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Only the first N prompts."),
    device: Optional[str] = typer.Option(None, "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype"),
) -> None:
    """Steer generation along the probe direction for a region; print the region's occupancy per strength."""
    from experiments.steering import REGIONS, steer_stage

    if region not in REGIONS:
        fail(f"--region must be one of {', '.join(REGIONS)}")
    rt = _runtime(model, device, dtype, False)
    if not 0 <= layer < rt.info.n_layers:
        fail(f"--layer must be in 0..{rt.info.n_layers - 1}")
    try:
        summary = steer_stage(rt, run, layer, region, tuple(strengths), position, samples, 0.7, max_new_tokens, seed, limit, model)
    except (ValueError, FileNotFoundError) as e:
        fail(str(e))
    for r in summary:
        typer.echo(json.dumps(r))


@app.command("run")
def run_cmd(
    models: Optional[list[str]] = typer.Option(None, "--model", "-m", help="Model(s) to study (repeat the option). " + MODEL_HELP),
    preset: str = typer.Option("quick", "--preset", help="quick (embedded model, small stratified subset, minutes on a CPU) or paper."),
    out: Path = typer.Option(Path("runs/study"), "--out", help="Run directory; rerunning the same command resumes it."),
    seed: int = typer.Option(0, "--seed"),
    translation_prompts: Optional[int] = typer.Option(None, "--translation-prompts", min=0, help="Override the preset."),
    layout_per_subcategory: Optional[int] = typer.Option(None, "--layout-per-subcategory", min=0, max=10),
    samples: Optional[int] = typer.Option(None, "--samples", min=0),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", min=1),
    protocol: Optional[str] = typer.Option(None, "--protocol"),
    svg: Optional[bool] = typer.Option(None, "--svg/--no-svg", help="Also run the SVG arm (default: on in the paper preset)."),
    device: Optional[str] = typer.Option(None, "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype"),
    judge_url: Optional[str] = typer.Option(None, "--judge-url", help="OpenAI-compatible VLM endpoint; judging runs when given."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model"),
    shard: Optional[str] = typer.Option(None, "--shard", help="i/n: run only this shard's generation/capture units (for batch schedulers)."),
    backend: str = typer.Option("local", "--backend", help="local, or ray (generation and capture as sharded Ray tasks)."),
    shards: int = typer.Option(2, "--shards", min=1, help="Ray backend: number of shard tasks."),
) -> None:
    """The whole study as one resumable command: generate, score, capture, probe, intervene, report."""
    from experiments.generation import RunError
    from experiments.study import StudyConfig, parse_shard, run_ray, run_study
    from interp.models import ModelError
    from interp.prompts import PromptError

    if backend not in ("local", "ray"):
        fail("--backend must be local or ray")
    if backend == "ray" and shard:
        fail("--shard is for batch schedulers; the ray backend shards by itself (--shards N)")
    try:
        c = StudyConfig.from_preset(preset, models=models or None, seed=seed, translation_prompts=translation_prompts,
                                    layout_per_subcategory=layout_per_subcategory, samples=samples,
                                    max_new_tokens=max_new_tokens, protocol=protocol, svg=svg, device=device, dtype=dtype,
                                    judge_url=judge_url, judge_model=judge_model)
        sh = parse_shard(shard) if shard else None
    except ValueError as e:
        fail(str(e))
    say = lambda m: typer.echo(m, err=True)  # noqa: E731
    try:
        if backend == "ray":
            try:
                import ray  # noqa: F401
            except ImportError:
                fail("the ray backend needs Ray: pip install 'ray>=2.9' (or .[ray])")
            summary = run_ray(c, out, shards, say)
        else:
            summary = run_study(c, out, sh, say=say)
    except (RunError, ModelError, PromptError) as e:
        fail(str(e))
    typer.echo(json.dumps(summary, indent=1, sort_keys=True))


@app.command()
def merge(
    shards: list[Path] = typer.Argument(..., help="Shard run directories made with --shard i/n."),
    out: Path = typer.Option(..., "--out", help="Merged run directory."),
) -> None:
    """Merge shard run directories into one, in the order an unsharded run writes; then rerun `ambench run` on it."""
    from experiments.study import merge_runs

    try:
        counts = merge_runs(shards, out)
    except (ValueError, FileNotFoundError, KeyError) as e:
        fail(str(e))
    typer.echo(json.dumps(counts))


organism_app = typer.Typer(help="Model organisms: small models trained here whose plans are known (docs/organisms.md).",
                           no_args_is_help=True)
app.add_typer(organism_app, name="organism")


@organism_app.command("list")
def organism_list() -> None:
    """Each organism's name, task and what it does, and the folder `--model organism:NAME` would load."""
    from interp.organisms import cache_folder, committed
    from interp.organisms.zoo import DEFAULT_SEED, ORGANISMS

    for o in ORGANISMS.values():
        found = committed(o.name)
        where = f"committed {found}" if found else f"trained on first use into {cache_folder(o.name, DEFAULT_SEED)}"
        typer.echo(f"{o.name:15s} {o.task:12s} {o.summary}\n{'':28s}{where}")


@organism_app.command("train")
def organism_train(
    name: str = typer.Argument(..., help="Organism name (see `ambench organism list`)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the model folder here (must not exist). "
                                       "Default: the folder `--model organism:NAME@SEED` loads, trained only if missing."),
    seed: int = typer.Option(0, "--seed", min=0, max=999_999_999, help="Seeds the weights and the training batches."),
) -> None:
    """Train an organism deterministically on the CPU (minutes) and write a Hugging Face model folder."""
    import time

    from interp.organisms import OrganismError, build_folder, folder_for, record
    from interp.organisms.zoo import ORGANISMS

    if name not in ORGANISMS:
        fail(f"unknown organism {name!r}: use one of {', '.join(ORGANISMS)}")
    started = time.time()

    def progress(step: int, loss: float) -> None:
        typer.echo(f"{name}: step {step}, loss {loss:.4f}, {time.time() - started:.0f} s", err=True)

    try:
        if out is None:
            folder = folder_for(f"organism:{name}@{seed}", progress)
            rec = record(folder) or {}
        else:
            if out.exists():
                fail(f"{out} already exists; choose a new --out")
            rec = build_folder(name, out, seed, progress)
            folder = out
    except (OrganismError, OSError, ValueError) as e:
        fail(str(e))
    keys = ("organism", "seed", "code_version", "weights_sha256", "final_train_loss", "heldout_loss", "seconds")
    summary = {"folder": str(folder), **{k: rec.get(k) for k in keys}}
    summary["heldout_accuracy"] = rec.get("eval", {}).get("heldout_accuracy")
    typer.echo(json.dumps(summary, indent=1, sort_keys=True))


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
