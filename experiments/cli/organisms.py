"""`ambench organism list|train`: the model organisms, small models trained here whose plans are known (docs/organisms.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from experiments.cli.common import app, fail, show

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
    from interp.runtime import evaluate_organism

    if name not in ORGANISMS:
        fail(f"unknown organism {name!r}: use one of {', '.join(ORGANISMS)}")
    started = time.time()

    def progress(step: int, loss: float) -> None:
        typer.echo(f"{name}: step {step}, loss {loss:.4f}, {time.time() - started:.0f} s", err=True)

    try:
        if out is None:
            folder = folder_for(f"organism:{name}@{seed}", progress, evaluate_organism)
            rec = record(folder) or {}
        else:
            if out.exists():
                fail(f"{out} already exists; choose a new --out")
            rec = build_folder(name, out, seed, progress, evaluate_organism)
            folder = out
    except (OrganismError, OSError, ValueError) as e:
        fail(str(e))
    keys = ("organism", "seed", "code_version", "weights_sha256", "final_train_loss", "heldout_loss", "seconds")
    summary = {"folder": str(folder), **{k: rec.get(k) for k in keys}}
    summary["heldout_accuracy"] = rec.get("eval", {}).get("heldout_accuracy")
    typer.echo(show(summary, indent=1, sort_keys=True))
