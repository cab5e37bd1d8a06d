"""`ambench consistency`: the DINO appendix analyses (concept consistency, the entropy confound) on a run."""

from __future__ import annotations

from typing import Optional

import typer

from experiments.cli.common import DeviceOpt, RunOpt, app, fail, run_writer

DinoFolderOpt = typer.Option(..., "--dino-folder", help="Local folder with a DINO ViT checkpoint (config.json and weights, "
                             "e.g. dino-vits8 saved with save_pretrained); never downloaded.")


@app.command()
def consistency(
    run: RunOpt,
    dino_folder: str = DinoFolderOpt,
    models: Optional[list[str]] = typer.Option(None, "--model", "-m", help="Only this model (repeat; default: every model)."),
    arms: Optional[list[str]] = typer.Option(None, "--arm", help="Only this arm, e.g. few-shot-2 or svg/few-shot-2 (repeat)."),
    task: str = typer.Option("layout", "--task", help="Task whose renders are analysed (the paper: layout)."),
    projection: str = typer.Option("umap", "--projection", help="2-D map: umap (umap-learn) or tsne (scikit-learn)."),
    seed: int = typer.Option(0, "--seed", help="Random state of the map (recorded in its row)."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Renders per DINO forward pass."),
    device: DeviceOpt = None,
) -> None:
    """DINO concept consistency and the entropy confound (paper appendix E.2/E.3): RUN/consistency.jsonl and plots."""
    from experiments.rundir import RunDir, RunError
    from experiments.stages.consistency import ConsistencySettings, consistency_stage, format_summary
    from interp.dino import DinoError

    if not run.is_dir():
        fail(f"{run} is not a run directory: give --run the folder `ambench generate` or `ambench run` wrote")
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        s = ConsistencySettings(task=task, models=tuple(models) if models else None, arms=tuple(arms) if arms else None,
                                projection=projection, seed=seed, batch_size=batch_size, device=device)
    except RunError as e:
        fail(str(e))
    with run_writer(run, "ambench consistency") as rd:
        try:
            result = consistency_stage(rd, dino_folder, s)
        except DinoError as e:
            fail(str(e))
    rows = result["rows"]
    if not any(r.get("kind") == "coherence" for r in rows):
        typer.echo(f"no valid, non-trivial {task} renders to analyse (attempts left out: {result['counts']})")
    typer.echo(format_summary(rows))
    typer.echo(f"wrote {run / RunDir.CONSISTENCY} ({len(rows)} rows) and {len(result['plots'])} plots in "
               f"{run / RunDir.CONSISTENCY_PLOTS}")
