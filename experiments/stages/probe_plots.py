"""The probe stage's figures: its rows as `interp.sweep.probe_sweep`'s table, drawn by `interp.sweep.plot_sweep`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.rundir import RunDir, safe_name


def sweep_table(rows: list[dict[str, Any]], model: str, task: str, targets: tuple[str, ...]) -> Any:
    """The probe rows of one model, task and targets as `interp.sweep.probe_sweep`'s table (columns target, position,
    layer, n, r2, lo, hi, text_r2, text_lo, text_hi), with the split-half ceiling per target in `attrs["ceiling"]`:
    what a user gets from Python, so that the report's figure is drawn by the same `plot_sweep`."""
    import pandas as pd

    def num(v: Any) -> float:
        return float("nan") if v is None else float(v)

    mine = [r for r in rows if r.get("model") == model and r.get("task") == task and r.get("target") in targets]
    text = {r["target"]: r for r in mine if r.get("features") == "text"}
    out = []
    for r in mine:
        if r.get("features") != "resid" or not isinstance(r.get("layer"), int):
            continue
        tx = text.get(r["target"], {})
        ci, tci = r.get("ci") or [None, None], tx.get("ci") or [None, None]
        out.append({"target": r["target"], "position": r["position"], "layer": r["layer"], "n": r.get("n_prompts"),
                    "r2": num(r.get("r2")), "lo": num(ci[0]), "hi": num(ci[1]), "text_r2": num(tx.get("r2")),
                    "text_lo": num(tci[0]), "text_hi": num(tci[1])})
    table = pd.DataFrame(out, columns=["target", "position", "layer", "n", "r2", "lo", "hi", "text_r2", "text_lo",
                                       "text_hi"])
    table.attrs["ceiling"] = {r["target"]: r["ceiling"] for r in mine
                              if r.get("kind") == "ceiling" and r.get("ceiling") is not None}
    return table


def plot_probes(rd: RunDir, rows: list[dict[str, Any]]) -> list[Path]:
    """`RUN/probes/<model>-<task>.png` (own target) and `...-shared.png` (shared vs specific), drawn by
    `interp.sweep.plot_sweep` from the rows' table (`sweep_table`): the figure a user draws from Python."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from interp.sweep import plot_sweep

    out = []
    for model, task in sorted({(r["model"], r["task"]) for r in rows if "task" in r}):
        for kind, tnames in (("", ("own",)), ("-shared", ("shared", "specific"))):
            table = sweep_table(rows, model, task, tnames)
            if table.empty:
                continue
            final = next((r.get("final_site", "pre-norm") for r in rows if r.get("kind") == "targets" and r["model"] == model), "pre-norm")
            n = int(table["n"].max()) if table["n"].notna().any() else None
            lines = ["position"] if kind == "" else ["target", "position"]
            fig = plot_sweep(table, lines=lines, title=f"{model} ({task}): occupancy probe"
                             f"{' - shared vs specific' if kind else ''}" + (f", n = {n} prompts" if n else ""),
                             xlabel="layer L = input of block L (0 = embeddings); last = final residual, "
                             + ("before the final norm" if final == "pre-norm" else "after the final norm"))
            out.append(rd.save_figure(fig, f"{RunDir.PROBE_PLOTS}/{safe_name(model)}-{task}{kind}.png"))
            plt.close(fig)
    return out
