"""The activation-patching table and plot, from the rows of `RUN/patching.jsonl` (read by `ambench patch` and by
the intervention summary, `interventions_table.json`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from experiments.rundir import RunDir


def patching_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Continued-drawing rate per (model, task, direction, layer) over cuts."""
    out = []
    for model, task, direction, layer in sorted({(r["model"], r["task"], r["direction"], r["layer"]) for r in rows}):
        sel = [r for r in rows if (r["model"], r["task"], r["direction"], r["layer"]) == (model, task, direction, layer)]
        out.append({"model": model, "task": task, "direction": direction, "layer": layer, "cuts": len(sel),
                    "rate": float(np.mean([r["rate"] for r in sel]))})
    return out


def plot_patching(rd: RunDir, rows: list[dict[str, Any]], task: str = "layout") -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = [r for r in patching_table(rows) if r["task"] == task]
    if not table:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for model, direction in sorted({(r["model"], r["direction"]) for r in table}):
        sel = [r for r in table if (r["model"], r["direction"]) == (model, direction)]
        ax.plot([r["layer"] for r in sel], [r["rate"] for r in sel], marker="o", label=f"{model} {direction}")
    ax.set_xlabel("patched layer (resid_pre)")
    ax.set_ylabel("continued drawing")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"{task}: activation patching at the cut statement")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = rd.save_figure(fig, f"patching-{task}.png")
    plt.close(fig)
    return out


__all__ = ["patching_table", "plot_patching"]
