"""The layout mosaics: every layout attempt's render as an inline thumbnail, by prompt and arm."""

from __future__ import annotations

import base64
from typing import Any

from experiments.rundir import RunDir
from experiments.stages.report.blocks import Answer, Block, heading


def section(run: RunDir, paper: dict[str, Any]) -> tuple[list[Block], list[Answer]]:
    from bench.canvas.png import png_bytes, scale_for
    from bench.layout.prompts import by_id
    from experiments.rundir import arm_of
    from experiments.stages.render import read_renders, row_key

    gens = run.rows(RunDir.GENERATIONS)
    if not gens:
        return [], []
    renders = read_renders(run)
    prompts = by_id()
    grid: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in gens:
        if r["task"] != "layout":
            continue
        x = renders.get(row_key(r))
        if x is None:
            continue
        arm = f"{r['model']} {arm_of(r)}"
        label = f"{arm} sample {r['sample']}: {x['outcome']}" + (" (trivial)" if x["trivial"] else "")
        if x["outcome"] == "ok":  # a mosaic as an inline PNG of 120 pixels whatever its resolution
            c = {"label": label, "data": base64.b64encode(png_bytes(x["pixels"], scale_for(x["pixels"], 120))).decode()}
        else:
            c = {"label": label, "data": None, "outcome": x["outcome"], "reason": x["reason"]}
        grid.setdefault(r["prompt_id"], {}).setdefault(arm, []).append(c)
    if not grid:
        return [], []
    items = [{"id": pid, "text": prompts[pid].text if pid in prompts else pid,
              "arms": [{"name": a, "cells": c} for a, c in sorted(grid[pid].items())]} for pid in sorted(grid)]
    return [heading("Layout mosaics"), {"kind": "mosaics", "prompts": items}], []
