"""The report's intervention section is honest at small n and readable (issue 30): every rate has its interval and
n, "n = 1, no interval" where one prompt is all there is (never "95% CI [0.333, 0.333]"), the patching plot has its
interval, n and the unpatched null-asis line, the dose-response has intervals and n, figures are full width, the
page has a table of contents, and a steering section says "not computed" or shows its table and plot.

Runs here are made of rows written as the stages write them (no model runs)."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from experiments.rundir import RunDir

ARMS = ("null-empty", "null-asis", "moved-used", "moved-unused")


def _row(prompt: str, cut: int, arm: str, k: int, continued: bool, distance: float = 0.0) -> dict:
    return {"model": "m", "task": "layout", "protocol": "few-shot-2", "medium": "v1", "prompt_id": prompt, "sample": 0,
            "cut": cut, "arm": arm, "k": k, "continued": continued, "distance": distance, "dr": 0, "dc": 0,
            "comment": False, "code_after": False}


def _rows(prompts: list[str]) -> list[dict]:
    """3 continuations per arm and cut, one cut per prompt; null-asis continues 1 of 3 (rate 0.333)."""
    out = []
    for prompt in prompts:
        for arm in ARMS:
            for k in range(3):
                d = {"moved-used": 4.0, "moved-unused": 9.0}.get(arm, 0.0)
                out.append(_row(prompt, 0, arm, k, continued=(k == 0) if arm != "moved-unused" else k < 2, distance=d))
    return out


def _patch_rows(prompts: list[str]) -> list[dict]:
    return [{"model": "m", "task": "layout", "protocol": "few-shot-2", "medium": "v1", "prompt_id": p, "sample": 0, "cut": 0,
             "layer": layer, "direction": "asis<-moved", "moved_arm": "moved-unused", "continuations": 3,
             "continued": [True, False, False], "rate": 1 / 3 + 0.1 * layer * (i % 2)}
            for i, p in enumerate(prompts) for layer in range(3)]


def _run(path: Path, prompts: list[str], steering: bool = False) -> Path:
    from experiments.stages.intervene import summarise_interventions

    with RunDir.writer(path, "test") as rd:
        rd.record_config("study", {"config": {"preset": "quick", "models": ["m"]}, "versions": {}})
        rd.append(RunDir.INTERVENTIONS, _rows(prompts))
        rd.append(RunDir.PATCHING, _patch_rows(prompts))
        if steering:
            rd.append(RunDir.STEERING, [
                {"model": "m", "task": "layout", "protocol": "few-shot-2", "medium": "v1", "prompt_id": p, "sample": 0,
                 "seed": 1, "layer": 3, "position": "last", "region": "left", "strength": s, "valid": True,
                 "region_occupancy": 0.2 + s * 0.5 + 0.05 * i, "other_occupancy": 0.3}
                for i, p in enumerate(prompts) for s in (0.0, 0.5)])
    summarise_interventions(path, n_boot=200, n_perm=200)
    return path


def _text(page: str) -> str:
    text = re.sub(r"<img[^>]*>", "[img]", re.sub(r"<style>.*?</style>", " ", page, flags=re.S))
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", text))).strip()


def test_one_prompt_gives_no_interval_two_prompts_give_one():
    from experiments.patching_table import patching_table
    from experiments.stages.intervene import arm_table, dose_response

    one = {r["arm"]: r for r in arm_table(_rows(["1A-00"]), n_boot=200, n_perm=200)}
    # the old code: a bootstrap over one prompt gave [0.333, 0.333], a point that reads as certainty
    assert one["null-asis"]["rate_ci"] == [None, None] and one["null-asis"]["prompts"] == 1
    assert one["moved-unused"]["delta_ci"] == [None, None]
    assert all(d["rate_ci"] == [None, None] and d["prompts"] == 1 for d in dose_response(_rows(["1A-00"])))
    assert all(p["rate_ci"] == [None, None] for p in patching_table(_patch_rows(["1A-00"])))
    two = {r["arm"]: r for r in arm_table(_rows(["1A-00", "2A-00"]), n_boot=200, n_perm=200)}
    lo, hi = two["null-asis"]["rate_ci"]
    assert lo <= two["null-asis"]["rate"] <= hi and two["null-asis"]["prompts"] == 2
    dose = dose_response(_rows(["1A-00", "2A-00", "3A-00"]), n_boot=200)
    assert all(d["rate_ci"][0] is not None and d["prompts"] == 3 and d["cuts"] == 3 for d in dose)
    patch = patching_table(_patch_rows(["1A-00", "2A-00", "3A-00"]))
    assert all(p["rate_ci"][0] <= p["rate"] <= p["rate_ci"][1] and p["prompts"] == 3 for p in patch)
    assert patch[2]["rate_ci"][1] > patch[2]["rate_ci"][0]  # layer 2 differs between prompts: a real width


def test_the_page_says_n_1_no_interval_and_gives_every_rate_its_n(tmp_path):
    from experiments.stages.report import render_page

    text = _text(render_page([_run(tmp_path / "one", ["1A-00"])]))
    assert "n = 1, no interval" in text and "[0.333, 0.333]" not in text
    section = text[text.index("Exp. 3, stage 2"):]
    for head in ("prompts", "cuts", "continuations", "95% CI", "Dose-response", "displacement bin"):
        assert head in section, head
    text2 = _text(render_page([_run(tmp_path / "two", ["1A-00", "2A-00", "3A-00"])]))
    assert "no interval" not in text2[text2.index("Exp. 3, stage 2"):text2.index("Steering along")]


def test_the_patching_plot_has_its_interval_n_and_the_null_asis_line(tmp_path):
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    from experiments.patching_table import patching_figure

    run = _run(tmp_path / "r", ["1A-00", "2A-00", "3A-00"])
    with RunDir.writer(run, "test") as rd:
        fig = patching_figure(rd, rd.rows(RunDir.PATCHING))
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    asis = next(v for k, v in lines.items() if k.startswith("null-asis, unpatched"))
    assert asis.get_ydata()[0] == pytest.approx(1 / 3) and "(n=9)" in asis.get_label()  # 3 prompts x 3 continuations
    assert any(k.startswith("moved-unused, unpatched") for k in lines)
    probe = next(k for k in lines if k.startswith("m asis<-moved"))
    assert "3 cuts, 3 prompts, 9 continuations per layer" in probe
    assert any(isinstance(c, PolyCollection) for c in ax.collections)  # the interval band
    assert fig.get_size_inches()[0] * fig.dpi >= 1000  # drawn for the full page width
    plt.close(fig)


def test_figures_are_full_width_and_the_interventions_figure_is_legible(tmp_path):
    from PIL import Image

    from experiments.stages.report import render_page

    run = _run(tmp_path / "r", ["1A-00", "2A-00"])
    page = render_page([run])
    css = page[page.index("<style>"):page.index("</style>")]
    assert "max-width: 520px" not in css and re.search(r"figure img \{[^}]*width: 100%", css)
    for png in ("interventions-layout.png", "patching-layout.png"):
        w, h = Image.open(run / png).size
        assert w >= 1000, (png, w)  # shown at its own size on a 1,100 px page: 10 pt text is ~15 px, not ~6


def test_a_table_of_contents_links_every_section(tmp_path):
    from experiments.stages.report import render_page

    page = render_page([_run(tmp_path / "r", ["1A-00", "2A-00"])])
    nav = page[page.index('<nav class="toc"'):page.index("</nav>")]
    targets = re.findall(r'href="#([^"]+)"', nav)
    ids = set(re.findall(r'id="([^"]+)"', page))
    assert targets and all(t in ids for t in targets)
    for section in ("Summary", "Exp. 3, stage 2", "Steering along a probe direction", "Configuration"):
        assert section in nav, section
    h3 = re.findall(r"<h3[^>]*>", page)
    assert h3 and all("id=" in h for h in h3)  # every section of a run can be linked to


def test_the_steering_section_says_not_computed_or_shows_its_table_and_plot(tmp_path):
    from experiments.stages.report import render_page

    text = _text(render_page([_run(tmp_path / "none", ["1A-00"])]))
    assert "Steering: not computed — the run has no steering rows" in text and "ambench steer --run RUN --layer L" in text
    page = render_page([_run(tmp_path / "some", ["1A-00", "2A-00"], steering=True)])
    text = _text(page)
    part = text[text.index("Steering along a probe direction (beyond the paper) Each"):]
    assert "region occupancy" in part and "95% CI" in part and "[img]" in part[:part.index("Attention focus")]
    assert "Does steering along the probe's direction move the drawing?" in text
    assert render_page([tmp_path / "some"]) == page  # the figure drawn for the page is the same bytes each time
