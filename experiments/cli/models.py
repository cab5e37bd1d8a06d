"""`ambench generate` and `ambench capture`: the model-running commands over a prompt set."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from experiments.cli.common import (MODEL_HELP, CompatOpt, DeviceMapOpt, DeviceOpt, DtypeOpt, LimitOpt, OutRunOpt, QuantizeOpt, SeedOpt,
                                    TrustOpt, app, bar, boundary, check_device, check_model, fail, load_items, run_writer,
                                    runtime, show)

PromptsOpt = typer.Option(None, "--prompts", help="Prompt file (JSONL: id, text, task, subject; any task label).")
TaskSetOpt = typer.Option(None, "--task", help="translation or layout (the built-in prompt set when --prompts is not given).")


def check_medium(medium: str, output: str, items: list) -> None:
    """A medium the prompts can use, checked before a model loads (one sentence otherwise)."""
    from bench.canvas.medium import V1, get_medium

    try:
        med = get_medium(medium)
    except ValueError as e:
        fail(str(e))
    if output == "svg" and medium != "v1":
        fail("--output svg has no canvas medium: leave --medium at v1")
    if med.grid != V1.grid and any(it.task == "translation" for it in items):
        fail(f"translation prompts state a {V1.grid}x{V1.grid} grid; the {med.grid}-cell medium {medium} is for layout prompts")


def check_context(model: str, work: list, trust_remote_code: bool) -> None:
    """Every prompt fits the model's context as the model will see it, before the lock, the folder or the load (issue
    42: one valid 10 MB prompt once grew `generate` to 24 GB and the kernel's OOM killer)."""
    from experiments.study.checks import check_lengths
    from interp.prompts import PromptError

    try:
        check_lengths(model, work, trust_remote_code)
    except PromptError as e:
        fail(str(e))


def check_protocol(protocol: str) -> None:
    """A protocol the prompts can be built with (one sentence, before anything is opened or loaded)."""
    from interp.prompts import PROTOCOLS

    if protocol not in PROTOCOLS:
        fail(f"--protocol {protocol!r}: use {', '.join(PROTOCOLS)}")


@app.command()
def generate(
    out: OutRunOpt,
    model: str = typer.Option("smollm2-135m-instruct", "--model", "-m", help=MODEL_HELP),
    task: Optional[str] = TaskSetOpt,
    prompts: Optional[Path] = PromptsOpt,
    samples: int = typer.Option(10, "--samples", "-n", min=0, help="Sampled attempts per prompt, besides the greedy one."),
    protocol: str = typer.Option("auto", "--protocol", help="auto, zero-shot, few-shot or completion."),
    shots: int = typer.Option(2, "--shots", min=0, help="Worked examples for few-shot and completion."),
    output: str = typer.Option("canvas", "--output", help="canvas (Python canvas code) or svg (raw SVG, the medium ablation)."),
    medium: str = typer.Option("v1", "--medium", help="The canvas medium: v1 (the paper's 24x24), v1-48 (48 cells, layout only) "
                                                       "or outline (outline primitives)."),
    temperature: float = typer.Option(0.7, "--temperature", min=0.0, help="Temperature of the sampled attempts."),
    seed: SeedOpt = 0,
    max_new_tokens: int = typer.Option(384, "--max-new-tokens", min=1, help="Most tokens an attempt may write."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Attempts decoded together (more: faster on a GPU, more memory)."),
    limit: LimitOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    compat: CompatOpt = False,
    trust_remote_code: TrustOpt = False,
    device_map: DeviceMapOpt = None,
    quantize: QuantizeOpt = None,
    check: bool = typer.Option(True, "--check/--no-check", help="Render the attempts (RUN/renders/) and print validity."),
) -> None:
    """Generate 1 greedy + N sampled programs per prompt into RUN/generations.jsonl (resumable)."""
    from experiments.progress import GenerationProgress
    from experiments.rundir import RunDir
    from experiments.stages.generate import GenerateSettings, generate_stage

    if output not in ("canvas", "svg"):
        fail("--output must be canvas or svg")
    items = load_items(task, prompts, limit)
    check_medium(medium, output, items)
    settings = GenerateSettings(samples, temperature, seed, max_new_tokens, batch_size, protocol, shots, output, medium)
    check_protocol(protocol)
    check_device(device, dtype, quantize, device_map)
    check_model(model)
    check_context(model, [(settings.prompt_protocol(), items)], trust_remote_code)
    with run_writer(out, "ambench generate", create=True) as rd:  # the lock first: a run in use is said before a load
        rt = runtime(model, device, dtype, compat, trust_remote_code, device_map, quantize)
        with bar(len(items) * (samples + 1), f"generate {model}", "attempt") as b:
            gp = GenerationProgress(b)  # attempts, tokens and tokens/s, updated as tokens come
            counts = generate_stage(rt, items, rd, settings, model=model, progress=gp.progress, on_token=gp.on_token,
                                    say=lambda m: typer.echo(m, err=True))
        typer.echo(show(counts))
        if check:  # renders every new attempt into RUN/renders/ (reused by later stages), then counts outcomes
            from experiments.stages.render import read_renders, render_stage, validity

            render_stage(rd)
            ids = {(i.task, i.id) for i in items}
            rows = [r for r in rd.rows(RunDir.GENERATIONS) if r["model"] == model and (r["task"], r["prompt_id"]) in ids]
            for (m, t, p), v in sorted(validity(rows, read_renders(rd)).items()):
                typer.echo(f"{m} {t} {p}: {v['valid']}/{v['attempts']} valid ({100 * v['valid_rate']:.1f}%) "
                           f"{json.dumps(v['outcomes'], sort_keys=True)}")


@app.command()
def capture(
    out: OutRunOpt,
    model: str = typer.Option("smollm2-135m-instruct", "--model", "-m", help=MODEL_HELP),
    task: Optional[str] = TaskSetOpt,
    prompts: Optional[Path] = PromptsOpt,
    protocol: str = typer.Option("auto", "--protocol", help="The protocol the generations used (positions follow it)."),
    shots: int = typer.Option(2, "--shots", min=0, help="Worked examples the generations used (few-shot and completion)."),
    store_dtype: str = typer.Option("float32", "--store-dtype", help="float32 or float16 on disk."),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Prompts per capture forward pass (more: faster, more memory)."),
    limit: LimitOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    compat: CompatOpt = False,
    final_site: str = typer.Option("pre-norm", "--final-site",
                                   help="The last site: pre-norm (the last block's output) or post-norm (the final norm's output)."),
    trust_remote_code: TrustOpt = False,
    device_map: DeviceMapOpt = None,
    quantize: QuantizeOpt = None,
) -> None:
    """Capture the residual stream (every layer, 3 token positions per prompt) into RUN/activations/<model>/."""
    from activations.store import ActivationStore
    from experiments.stages.capture import CaptureSettings, capture_stage

    if store_dtype not in ("float32", "float16"):
        fail("--store-dtype must be float32 or float16")
    if final_site not in ("pre-norm", "post-norm"):
        fail("--final-site must be pre-norm or post-norm")
    items = load_items(task, prompts, limit)
    check_protocol(protocol)
    check_device(device, dtype, quantize, device_map)
    check_model(model)
    from interp.prompts import Protocol

    check_context(model, [(Protocol(protocol, shots), items)], trust_remote_code)
    with run_writer(out, "ambench capture", create=True) as rd:  # the lock first: a run in use is said before a load
        rt = runtime(model, device, dtype, compat, trust_remote_code, device_map, quantize)
        with bar(len(items), f"capture {model}", "prompt") as b:
            path = capture_stage(rt, items, rd, CaptureSettings(protocol, shots, store_dtype, batch_size, final_site), model, b.update,
                                 say=lambda m: typer.echo(m, err=True))
        with boundary():
            st = ActivationStore(path)
        typer.echo(f"{path}: {st.shape[0]} prompts x {st.shape[1]} layers x {st.shape[2]} positions x {st.shape[3]} ({store_dtype})")
