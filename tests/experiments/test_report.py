"""The report leads with the evidence: the methods validated on model organisms (verdicts computed from rows),
then a real model's results, where every table that could not be computed says why and which command computes
it; the page is a Jinja2 template with autoescaping, parses with no errors, and renders (not blank) in Chromium.

The runs here are made of rows written as the stages write them (no model runs): a real model's run with
layout attempts and skipped layout probes, and an organisms folder with a `planners` part."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = ["```python\nfill('white')\nrect(4, 4, 10, 10, 'red')\n```", "```python\nfill('navy')\ncircle(12, 12, 7, 'gold')\n```",
            "```python\nfill('white')\nline(0, 0, 23, 23, 'black')\nrect(16, 2, 6, 20, 'green')\n```"]
XOR, XOR_B, RANDOM = "organism:xor-planner", "organism:xor-planner-b", "organism:random-planner"


def _gen(model: str, pid: str, k: int, text: str) -> dict:
    return {"task": "layout", "prompt_id": pid, "model": model, "protocol": "few-shot-2", "medium": "v1", "sample": k, "seed": k,
            "temperature": 0.0 if k == 0 else 0.7, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos",
            "entropy": [0.1], "mean_entropy": 0.1}


def _study(path: Path, model: str = "demo <b>model</b>") -> Path:
    """A real model's run: valid layout attempts (mosaics), its layout table, and layout probes skipped for too
    few prompts (the quick preset's case), plus a translation Delta above 1 (a negative text baseline)."""
    from experiments.rundir import RunDir
    from experiments.stages.layout import layout_table
    from experiments.stages.render import render_stage

    with RunDir.writer(path, "test") as rd:
        rd.record_config("study", {"config": {"preset": "quick", "models": [model]}, "versions": {"ambench": "test"}})
        rd.append(RunDir.GENERATIONS, [_gen(model, pid, k, PROGRAMS[(i + k) % 3])
                                       for i, pid in enumerate(["1A-00", "2A-00", "3A-00"]) for k in range(3)])
        rd.append(RunDir.PROBES, [
            {"model": model, "task": "layout", "role": "headline", "kind": "targets", "prompts_seen": 15, "kept": 8, "dropped": 7},
            {"model": model, "task": "layout", "role": "headline", "kind": "skipped", "reason": "8 prompts < 10"},
            {"model": model, "task": "translation", "role": "control", "target": "own", "features": "delta", "layer": "best",
             "position": "last", "n_prompts": 20, "r2_resid": 0.95, "r2_text": -0.25, "delta_r2": 1.2, "delta_ci": [1.1, 1.3],
             "p_perm": 0.001, "q_bh": 0.001, "n_perm": 999, "chosen_layers": [3, 3, 3, 3, 3]}])
    render_stage(path, workers=1)
    with RunDir.writer(path, "test") as rd:
        rd.write_json(RunDir.LAYOUT_TABLE, layout_table(rd))
    return path


def _planner_rows(random_q: float) -> list[dict]:
    """Probe rows of the planners part as the probe stage writes them (the values the organisms gave)."""
    rows = []
    for m, r2, text, q in ((XOR, 0.998, -0.014, 0.001), (XOR_B, 0.968, -0.012, 0.001), (RANDOM, 0.159, 0.111, random_q)):
        base = {"model": m, "task": "layout", "role": "headline", "n_prompts": 208}
        rows.append({**base, "target": "own", "features": "delta", "layer": "best", "position": "last", "r2_resid": r2,
                     "r2_text": text, "delta_r2": round(r2 - text, 6), "delta_ci": [r2 - text - 0.01, r2 - text + 0.01],
                     "p_perm": q, "q_bh": q, "n_perm": 999})
        for layer in range(5):
            rows.append({**base, "target": "own", "features": "resid", "layer": layer, "position": "last",
                         "r2": round(r2 * layer / 4, 6), "ci": [round(r2 * layer / 4 - 0.02, 6), round(r2 * layer / 4 + 0.02, 6)]})
        rows.append({**base, "target": "own", "features": "resid", "layer": "best", "position": "last", "r2": r2,
                     "ci": [r2 - 0.02, r2 + 0.01]})
        rows.append({**base, "target": "specific", "features": "resid", "layer": "best", "position": "last", "r2": 0.74,
                     "ci": [0.70, 0.77]})
        for other in (XOR, XOR_B):
            if other != m:
                rows.append({**base, "target": f"model:{other}", "features": "resid", "layer": "best", "position": "last",
                             "r2": 0.008, "ci": [-0.012, 0.015]})
    return rows


def _organisms(path: Path, random_q: float = 0.6) -> Path:
    from experiments.rundir import RunDir
    from experiments.stages.probe import plot_probes

    part = path / "planners"
    rows = _planner_rows(random_q)
    with RunDir.writer(part, "test") as rd:
        rd.record_config("study", {"config": {"preset": "organisms/planners", "models": [XOR, XOR_B, RANDOM]}, "versions": {}})
        rd.append(RunDir.GENERATIONS, [_gen(m, "p0", 0, PROGRAMS[0]) for m in (XOR, XOR_B, RANDOM)])
        rd.append(RunDir.PROBES, rows)
        plot_probes(rd, rows)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    return _organisms(root / "organisms"), _study(root / "study")


def _text(page: str) -> str:
    text = re.sub(r"<img[^>]*>", "[img]", page)
    text = html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", " ", text, flags=re.S)))
    return re.sub(r"\s+", " ", text).strip()


def test_the_page_leads_with_the_validated_methods(runs, tmp_path):
    from experiments.organisms import verdicts
    from experiments.stages.report import write_combined

    org, study = runs
    page = write_combined([org, study], tmp_path / "r").read_text(encoding="utf-8")
    text = _text(page)
    order = [text.index(s) for s in ("Summary", "The methods, validated", "Results:", "Configuration")]
    assert order == sorted(order)
    rows = verdicts(org / "planners")
    assert rows and all(r["recovered"] is True for r in rows)  # the organisms' values recover every answer
    assert f"{len(rows)} of {len(rows)} checks recovered" in text
    for r in rows:  # per method: organism, constructed answer, measured value with CI, recovered
        assert r["organism"] in text and r["expected"] in text and r["measured"] in text
    validated = page[page.index('id="validated"'):page.index('id="run-1"')]
    assert validated.count("data:image/png;base64,") >= 3  # the organisms' per-layer R^2 plots beside the verdicts


def test_verdicts_on_the_page_are_computed_from_the_rows(tmp_path):
    """A negative control that comes out significant must read NOT recovered, on the page and in the summary."""
    from experiments.stages.report import render_page

    text = _text(render_page([_organisms(tmp_path / "org", random_q=0.001)]))
    assert "NOT recovered: random-planner" in text and re.search(r"\bNO\b", text)


def test_every_table_not_computed_says_why_and_which_command(runs):
    from experiments.stages.report import render_page

    _, study = runs
    page = render_page([study])
    missing = [html.unescape(m) for m in re.findall(r'<p class="missing">(.*?)</p>', page, flags=re.S)]
    for what, command in (("Judge scores", "--judge-url"), ("SVG", "--svg"), ("T2/T3 gap", "--medium v1-48"),
                          ("Cross-model selectivity", "--selectivity"), ("Attention focus", "--attention"),
                          ("Plan or state", "--trajectory"), ("DINO", "--dino-folder"), ("Interventions", "ambench intervene"),
                          ("Layout probes", "--layout-per-subcategory"), ("Translation scores", "ambench run")):
        line = next((m for m in missing if what in m.split(":")[0]), None)
        assert line is not None, f"no line for {what}: {missing}"
        assert "not computed — " in line and command in line and "\n" not in line.strip()
    assert "8 prompts < 10" in " ".join(missing)
    # the single-run page says where the methods are validated
    assert "ambench run --preset organisms" in _text(page)


def test_hygiene_citation_delta_above_one_and_escaping(runs):
    from experiments.stages.report import render_page

    _, study = runs
    page = render_page([study])
    text = _text(page)
    assert "shared/seeds" not in page and "arXiv:2608.30751" in text  # the paper, not a folder outside the repository
    assert "exceeds 1 when the text baseline's R² is negative" in text and "-0.250" in text
    assert "<b>model</b>" not in page and "&lt;b&gt;model&lt;/b&gt;" in page  # a run's values never become markup
    assert "1.20" in text and "0.95" in text  # numbers to 3 significant digits


def test_the_page_parses_with_no_errors(runs, tmp_path):
    html5lib = pytest.importorskip("html5lib")
    from experiments.stages.report import render_page

    org, study = runs
    for page in (render_page([org, study]), render_page([study])):
        parser = html5lib.HTMLParser(strict=True)
        parser.parse(page)  # strict: the first parse error raises
        assert not parser.errors


def test_a_broken_page_fails_the_parser_check():
    """The check above can fail: unclosed and misnested markup is a parse error."""
    html5lib = pytest.importorskip("html5lib")
    with pytest.raises(Exception):
        html5lib.HTMLParser(strict=True).parse("<!doctype html><html><body><table><tr><td>x</b></table></body></html>")


def _screenshot(page_path: Path, shot: Path) -> "object":
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it when apt-get is available)")
    res = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                          "--window-size=1200,3000", page_path.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.is_file(), res.stderr[-2000:]
    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(shot).convert("RGB"))


def not_blank(pixels) -> bool:
    """A rendered page, not an empty one: enough dark (text) pixels and more than one colour besides white."""
    dark = (pixels.max(axis=2) < 100).mean()
    return dark > 0.002 and colour_count(pixels[::4, ::4]) > 20  # more than 20 in every 16th pixel: more in all


def colour_count(pixels) -> int:
    """The number of distinct RGB colours of an [H, W, 3] uint8 image (each colour packed into one integer: a
    Python set of a 12-megapixel screenshot's pixel tuples took seconds)."""
    import numpy as np

    p = pixels.reshape(-1, 3).astype(np.uint32)
    return int(np.unique((p[:, 0] << 16) | (p[:, 1] << 8) | p[:, 2]).size)


def any_pixel(pixels, where) -> bool:
    """Whether some pixel of an [H, W, 3] image satisfies `where(r, g, b)` (elementwise on the channels' arrays)."""
    r, g, b = (pixels[..., i].astype(int) for i in range(3))
    return bool(where(r, g, b).any())


def test_blank_check_fails_on_a_blank_page(tmp_path):
    blank = tmp_path / "blank.html"
    blank.write_text("<!doctype html><html lang='en'><head><meta charset='utf-8'><title>x</title></head><body></body></html>")
    pixels = _screenshot(blank, tmp_path / "blank.png")
    assert not not_blank(pixels) and colour_count(pixels) <= 2
    assert not any_pixel(pixels, lambda r, g, b: (r < 40) & (90 < g) & (g < 130) & (b < 60))


def test_the_combined_report_renders_in_headless_chromium(runs, tmp_path):
    from experiments.stages.report import write_combined

    org, study = runs
    path = write_combined([org, study], tmp_path / "r")
    pixels = _screenshot(path, tmp_path / "shot.png")
    assert not_blank(pixels)
    assert any_pixel(pixels, lambda r, g, b: (r < 40) & (90 < g) & (g < 130) & (b < 60))  # the green "recovered" verdicts are drawn


def test_ambench_report_combines_runs(runs, tmp_path):
    org, study = runs
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    out = tmp_path / "combined"
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "report", str(org), str(study), "--out", str(out)],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    assert (out / "index.html").is_file() and "The methods, validated" in (out / "index.html").read_text(encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "report", str(org), str(study)], capture_output=True,
                         text=True, env=env)
    assert res.returncode == 2 and "--out" in res.stderr and "Traceback" not in res.stderr
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "report", str(tmp_path / "nothing")], capture_output=True,
                         text=True, env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    single = tmp_path / "single"
    shutil.copytree(study, single)
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "report", str(single)], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and "Results:" in (single / "report" / "index.html").read_text(encoding="utf-8")
