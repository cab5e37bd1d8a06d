"""`RUN/report/index.html`: one self-contained page (every image inline) summarising a run.

Sections: the translation gate, layout validity and triviality per tier (and judge pass rates when
there are verdicts), mosaic grids per layout prompt (every attempt's render), per-layer probe R^2
plots with their controls, intervention rates and dose-response, activation patching by layer.
The page has no timestamps, so the same run gives the same bytes.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import numpy as np

from experiments.generation import GENERATIONS, read_rows


def _img_file(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _img_pixels(pixels: np.ndarray, alt: str, scale: int = 5) -> str:
    from bench.layout.judge import png_bytes

    data = base64.b64encode(png_bytes(pixels, scale)).decode()
    return f'<img class="mosaic" alt="{html.escape(alt)}" title="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _table(rows: list[dict[str, Any]], cols: list[str]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{fmt(r.get(c, ''))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(run: Path) -> Path:
    from bench.layout.prompts import by_id
    from experiments.render import read_renders, row_key

    parts = ["<h1>AM-Bench report</h1>"]
    cfg = json.loads((run / "config.json").read_text()) if (run / "config.json").exists() else {}
    study = cfg.get("stages", {}).get("study", {})
    if study:
        parts.append("<h2>Run</h2><pre>" + html.escape(json.dumps(study, indent=1, sort_keys=True)) + "</pre>")
    # translation gate
    scores = run / "translation_scores.jsonl"
    if scores.exists():
        from experiments.translation import summarise

        rows = read_rows(scores)
        table = []
        for m in sorted({r["model"] for r in rows}):
            s = summarise([r for r in rows if r["model"] == m])
            table.append({"model": m, **s})
        parts.append("<h2>Translation gate (median PIoU &ge; 0.6)</h2>" +
                     _table(table, ["model", "attempts", "valid_rate", "piou_mean", "piou_median", "pass_rate", "passes_gate"]))
    # layout tables
    lt = run / "layout_table.json"
    if lt.exists():
        parts.append("<h2>Layout: validity and triviality per tier</h2>" +
                     _table(json.loads(lt.read_text()), ["model", "protocol", "tier", "attempts", "valid_rate", "trivial_rate", "trivial_of_valid"]))
    js = run / "judge_scores.jsonl"
    if js.exists():
        from experiments.judging import inversion_table, pass_at_k_table

        jr = read_rows(js)
        parts.append("<h2>Judges</h2>" + _table(pass_at_k_table(jr), ["judge", "model", "protocol", "prompts", "pass@1", "pass@3", "pass@5", "pass@10"]))
        parts.append(_table(inversion_table(jr), ["judge", "model", "T2", "T3", "inverted"]))
    # mosaics
    if (run / "renders.h5").exists() and (run / GENERATIONS).exists():
        renders = read_renders(run)
        prompts = by_id()
        grid: dict[str, dict[str, list[str]]] = {}
        for r in read_rows(run / GENERATIONS):
            if r["task"] != "layout":
                continue
            x = renders.get(row_key(r))
            if x is None:
                continue
            arm = f"{r['model']} {r['protocol']}"
            label = f"{arm} sample {r['sample']}: {x['outcome']}" + (" (trivial)" if x["trivial"] else "")
            cell = _img_pixels(x["pixels"], label) if x["outcome"] == "ok" else f'<span class="invalid" title="{html.escape(x["reason"])}">{html.escape(x["outcome"])}</span>'
            grid.setdefault(r["prompt_id"], {}).setdefault(arm, []).append(cell)
        if grid:
            rows_html = []
            for pid in sorted(grid):
                text = html.escape(prompts[pid].text) if pid in prompts else pid
                arms = "".join(f"<div class='arm'><small>{html.escape(a)}</small><br>{''.join(c)}</div>" for a, c in sorted(grid[pid].items()))
                rows_html.append(f"<div class='prompt'><b>{html.escape(pid)}</b> {text}<br>{arms}</div>")
            parts.append("<h2>Layout mosaics</h2>" + "".join(rows_html))
    # probes
    probes = run / "probes.jsonl"
    if probes.exists():
        pr = read_rows(probes)
        best = [r for r in pr if r.get("layer") == "best" and r.get("target") == "own"]
        text = [r for r in pr if r.get("features") == "text"]
        info = [r for r in pr if r.get("kind") in ("targets", "skipped", "ceiling")]
        parts.append("<h2>Probes: per-layer occupancy R&sup2;</h2>")
        parts.append(_table(info, ["model", "kind", "kept", "dropped", "reason", "r_half", "ceiling"]))
        if best or text:
            parts.append(_table(best + text, ["model", "features", "position", "layer", "r2", "ci", "n_prompts"]))
        for png in sorted((run / "probes").glob("*.png")):
            parts.append(_img_file(png, png.stem))
    # interventions
    it = run / "interventions_table.json"
    if it.exists():
        t = json.loads(it.read_text())
        parts.append("<h2>Interventions</h2>" + _table(t["arms"], ["model", "arm", "cuts", "continuations", "rate", "rate_ci", "delta_vs_asis", "delta_ci", "p_perm", "q_bh", "mean_distance"]))
    for name, title in (("interventions.png", "Intervention rates and dose-response"), ("patching.png", "Activation patching by layer")):
        if (run / name).exists():
            parts.append(f"<h2>{title}</h2>" + _img_file(run / name, title))
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #bbb;padding:2px 6px;font-size:13px}img.mosaic{image-rendering:pixelated;margin:2px;vertical-align:top;"
             "border:1px solid #999}.arm{display:inline-block;margin:4px 12px 4px 0}.prompt{margin:10px 0}"
             ".invalid{display:inline-block;width:120px;height:120px;background:#eee;font-size:10px;margin:2px;vertical-align:top}")
    page = f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>AM-Bench report</title><style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    out = run / "report" / "index.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
