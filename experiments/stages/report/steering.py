"""Generation steered along a probe direction: the steering stage's table and its plot (beyond the paper)."""

from __future__ import annotations

from typing import Any

from experiments.numbers import text as num
from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, figure_of, heading, interval, missing, para, table


def plot_steering(table_rows: list[dict[str, Any]]) -> Any:
    """The steered region's occupancy by strength, one line per (model, layer, position, region), with 95% CI bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.4), dpi=110)
    for i, key in enumerate(sorted({(r["model"], r["layer"], r["position"], r["region"]) for r in table_rows})):
        sel = [r for r in table_rows if (r["model"], r["layer"], r["position"], r["region"]) == key
               and r["region_occupancy"] is not None]
        if not sel:
            continue
        have = [r for r in sel if r["ci"][0] is not None]
        ax.plot([r["strength"] for r in sel], [r["region_occupancy"] for r in sel], marker="o", color=f"C{i}",
                label=f"{key[0]}, layer {key[1]} at {key[2]}: {key[3]} half")
        if have:
            ax.errorbar([r["strength"] for r in have], [r["region_occupancy"] for r in have],
                        yerr=[[r["region_occupancy"] - r["ci"][0] for r in have], [r["ci"][1] - r["region_occupancy"] for r in have]],
                        color=f"C{i}", ls="none", capsize=4)
        for r in sel:
            ax.annotate(f"n={r['valid']}", (r["strength"], r["region_occupancy"]), textcoords="offset points",
                        xytext=(6, 4), fontsize=9, color=f"C{i}")
    ax.set_xlabel("steering strength (multiples of the layer's mean residual norm)", fontsize=11)
    ax.set_ylabel("occupancy of the steered region", fontsize=11)
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("steering along the probe direction (bars: prompt-clustered 95% CI; n = valid renders)", fontsize=11)
    ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    """Beyond the paper: generation steered along a probe's direction (stages/steer.py)."""
    title = heading("Steering along a probe direction (beyond the paper)")
    rows = run.rows(RunDir.STEERING)
    if not rows:
        return [title, missing("Steering", "the run has no steering rows: steering needs a fitted probe's layer and a "
                               "region, and no preset of `ambench run` steers",
                               "`ambench steer --run RUN --layer L --region left --strength 0 --strength 0.5` steers "
                               "along the occupancy probe's direction at layer L and adds this section")], []
    import matplotlib.pyplot as plt

    from experiments.stages.steer import steering_table

    st = steering_table(rows)
    fig = plot_steering(st)
    blocks = [title,
              para("Each strength adds s × (the layer's mean residual norm) × the unit direction along which the probe's "
                   "predicted occupancy of the region grows fastest; the steered region's occupancy is averaged over valid "
                   "renders (strength 0 is the unsteered baseline)."),
              table([dict(r, ci=interval(r["ci"], r["prompts"])) for r in st],
                    ["model", "task", "layer", "position", "region", "strength", "attempts", "valid", "prompts",
                     "region_occupancy", "ci", "other_occupancy"],
                    ["model", "task", "layer", "position", "region", "strength", "attempts", "valid", "prompts",
                     "region occupancy", "95% CI", "rest of the canvas"]),
              figure_of(fig, "steering: occupancy of the steered region by strength")]
    plt.close(fig)
    answers = []
    for key in sorted({(r["model"], r["layer"], r["position"], r["region"]) for r in st}):
        sel = sorted((r for r in st if (r["model"], r["layer"], r["position"], r["region"]) == key
                      and r["region_occupancy"] is not None), key=lambda r: r["strength"])
        if len(sel) >= 2:
            a, b = sel[0], sel[-1]
            answers.append(f"{key[0]}, layer {key[1]}, {key[3]} half: occupancy {num(a['region_occupancy'])} "
                           f"{interval(a['ci'], a['prompts'])} at strength {num(a['strength'])} → "
                           f"{num(b['region_occupancy'])} {interval(b['ci'], b['prompts'])} at {num(b['strength'])} "
                           f"({b['valid']} valid renders).")
    return blocks, ([{"q": "Does steering along the probe's direction move the drawing? (beyond the paper)",
                      "a": " ".join(answers)}] if answers else [])
