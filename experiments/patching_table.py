"""The activation-patching table and plot, from the rows of `RUN/patching.jsonl` (read by `ambench patch` and by
the intervention summary, `interventions_table.json`).

Every rate carries its n (cuts, continuations, prompts) and a prompt-clustered bootstrap 95% CI (none with one
prompt: a resample of one prompt is that prompt, and a zero-width interval would read as certainty). The plot draws
the unpatched arms' rates (null-asis, and the moved arm whose residual is patched in) as reference lines: a patched
layer's rate means something only beside the rate the as-is cut has without the patch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from experiments.rates import cluster_ci
from experiments.rundir import RunDir


def patching_table(rows: list[dict[str, Any]], n_boot: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Continued-drawing rate per (model, task, direction, layer) over cuts (the mean of each cut's rate), with
    its prompt-clustered 95% CI and its n."""
    out = []
    for model, task, direction, layer in sorted({(r["model"], r["task"], r["direction"], r["layer"]) for r in rows}):
        sel = [r for r in rows if (r["model"], r["task"], r["direction"], r["layer"]) == (model, task, direction, layer)]
        per_prompt: dict[str, list[float]] = {}
        for r in sel:
            per_prompt.setdefault(r["prompt_id"], []).append(float(r["rate"]))
        out.append({"model": model, "task": task, "direction": direction, "layer": layer, "cuts": len(sel),
                    "rate": float(np.mean([r["rate"] for r in sel])), "rate_ci": cluster_ci(per_prompt, n_boot, seed),
                    "prompts": len(per_prompt), "continuations": int(sum(r.get("continuations", 0) for r in sel))})
    return out


def arm_rates(rd: RunDir, model: str, task: str) -> dict[str, tuple[float, int]]:
    """The unpatched arms' continued-drawing rate and continuations of one model and task (the reference lines)."""
    out: dict[str, list[float]] = {}
    for r in rd.rows(RunDir.INTERVENTIONS):
        if r["model"] == model and r.get("task", "layout") == task:
            out.setdefault(r["arm"], []).append(float(r["continued"]))
    return {a: (float(np.mean(v)), len(v)) for a, v in out.items()}


def plot_patching(rd: RunDir, rows: list[dict[str, Any]], task: str = "layout") -> Path | None:
    """`RUN/patching-<task>.png` (`patching_figure`); None without patching rows of the task."""
    import matplotlib.pyplot as plt

    fig = patching_figure(rd, rows, task)
    if fig is None:
        return None
    out = rd.save_figure(fig, f"patching-{task}.png")
    plt.close(fig)
    return out


def patching_figure(rd: RunDir, rows: list[dict[str, Any]], task: str = "layout") -> Any:
    """Rate per patched layer with its 95% CI band and n, the unpatched null-asis rate (solid grey) and moved arm's
    rate (dashed) as references; full page width (1100 px), text 10 pt and up. None without rows of the task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    table = [r for r in patching_table(rows) if r["task"] == task]
    if not table:
        return None
    fig, ax = plt.subplots(figsize=(10, 4.6), dpi=110)
    models = sorted({r["model"] for r in table})
    moved_arm = next((r.get("moved_arm") for r in rows if r.get("moved_arm")), "moved-unused")
    for ci, (model, direction) in enumerate(sorted({(r["model"], r["direction"]) for r in table})):
        sel = [r for r in table if (r["model"], r["direction"]) == (model, direction)]
        xs = [r["layer"] for r in sel]
        n = f"{sel[0]['cuts']} cuts, {sel[0]['prompts']} prompts, {sel[0]['continuations']} continuations per layer"
        (line,) = ax.plot(xs, [r["rate"] for r in sel], marker="o", color=f"C{ci}", label=f"{model} {direction} ({n})")
        have = [r for r in sel if r["rate_ci"][0] is not None]
        if have:
            ax.fill_between([r["layer"] for r in have], [r["rate_ci"][0] for r in have], [r["rate_ci"][1] for r in have],
                            color=line.get_color(), alpha=0.15, lw=0)
    for mi, model in enumerate(models):
        ref = arm_rates(rd, model, task)
        tag = f" ({model})" if len(models) > 1 else ""
        if "null-asis" in ref:
            ax.axhline(ref["null-asis"][0], color="gray", lw=1.5,
                       label=f"null-asis, unpatched{tag}: {ref['null-asis'][0]:.2f} (n={ref['null-asis'][1]})")
        if moved_arm in ref:
            ax.axhline(ref[moved_arm][0], color="gray", ls="--", lw=1.5,
                       label=f"{moved_arm}, unpatched{tag}: {ref[moved_arm][0]:.2f} (n={ref[moved_arm][1]})")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole numbers: no 0.5 ticks
    ax.set_xlabel("patched layer (resid_pre)", fontsize=11)
    ax.set_ylabel("continued drawing (share)", fontsize=11)
    ax.set_ylim(-0.05, 1.1)
    one = all(r["rate_ci"][0] is None for r in table)
    ax.set_title(f"{task}: activation patching at the cut statement"
                 + (" (one prompt: no interval)" if one else "; band: prompt-clustered 95% CI"), fontsize=11)
    ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


__all__ = ["arm_rates", "patching_figure", "patching_table", "plot_patching"]
