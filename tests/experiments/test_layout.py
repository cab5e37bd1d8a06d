"""Layout prompts (schema), triviality, the render stage and the validity/triviality table."""

import json

import numpy as np
import pytest

from bench.layout.prompts import SUBCATEGORIES, LayoutPromptError, load_layout_prompts, validate
from bench.layout.scoring import TRIVIAL_SHARE, dominant_share, is_trivial
from tests.experiments.runs import GENERATIONS, append
from experiments.stages.layout import format_table, layout_table
from experiments.stages.render import read_renders, render_stage


def test_the_150_prompts_load_and_follow_the_schema():
    ps = load_layout_prompts()
    assert len(ps) == 150 and len({p.id for p in ps}) == 150
    for s in SUBCATEGORIES:
        assert sum(p.subcategory == s for p in ps) == 10
    assert all(p.subject in p.text and p.tier[1] == p.subcategory[0] for p in ps)


def test_schema_errors_are_clear():
    good = {"id": "1A-00", "tier": "T1", "tier_name": "elements", "subcategory": "1A", "subcategory_name": "single shapes",
            "subject": "a dot", "text": "Draw a dot."}
    assert validate([good], complete=False)[0].id == "1A-00"
    for change, msg in [({"tier": "T4"}, "tier"), ({"subcategory": "2A", "subcategory_name": "flags"}, "does not belong"),
                        ({"subject": "a cat"}, "not part of the text"), ({"id": "x"}, "should start with"),
                        ({"text": ""}, "missing or empty")]:
        with pytest.raises(LayoutPromptError, match=msg):
            validate([dict(good, **change)], complete=False)
    with pytest.raises(LayoutPromptError, match="duplicate"):
        validate([good, good], complete=False)
    with pytest.raises(LayoutPromptError, match="needs 10 prompts"):
        validate([good])


def test_triviality_threshold():
    img = np.full((24, 24, 3), 255, np.uint8)
    assert dominant_share(img) == 1.0 and is_trivial(img)
    img[0, :24] = 0  # 24 cells differ: 552/576 = 0.958
    assert is_trivial(img)
    img[1, :5] = 0  # 29 cells differ: 547/576 = 0.9497
    assert not is_trivial(img) and TRIVIAL_SHARE == 0.95


def _row(pid, sample, text, model="m"):
    return {"task": "layout", "prompt_id": pid, "model": model, "protocol": "zero-shot", "sample": sample, "seed": 1,
            "temperature": 0.0, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos", "entropy": [0.1],
            "mean_entropy": 0.1}


def test_render_stage_and_table(tmp_path):
    rows = [_row("1A-00", 0, "```python\nfill('white')\ncircle(12, 12, 6, 'red')\n```"),
            _row("1A-00", 1, "fill('blue')"),
            _row("2A-00", 0, "import pygame\npygame.init()"),
            _row("3A-00", 0, "fill('white')\nrect(0, 0, 12, 24, 'green')")]
    append(tmp_path, rows)
    render_stage(tmp_path, workers=1)
    r = read_renders(tmp_path)
    assert len(r) == 4
    t = {x["tier"]: x for x in layout_table(tmp_path)}
    assert (t["T1"]["attempts"], t["T1"]["valid"], t["T1"]["trivial"]) == (2, 2, 1)
    assert (t["T2"]["valid"], t["T3"]["valid"], t["T3"]["trivial"]) == (0, 1, 0)
    assert t["all"]["attempts"] == 4 and abs(t["all"]["valid_rate"] - 0.75) < 1e-12
    assert "trivial" in format_table(list(t.values()), "tier")
    # resumable: new rows are rendered, old ones are not redone
    append(tmp_path, [_row("3E-00", 0, "fill('black')")])
    render_stage(tmp_path, workers=1)
    assert len(read_renders(tmp_path)) == 5
    subs = layout_table(tmp_path, "subcategory")
    assert {x["subcategory"] for x in subs} == {"1A", "2A", "3A", "3E", "all"}
    json.dumps(subs)


def test_paired_delta_bootstrap_known_answer_and_coverage():
    from experiments.stages.layout import paired_delta

    a = {f"p{i}": [1.0, 2.0] for i in range(20)}
    b = {f"p{i}": [2.0, 3.0] for i in range(20)}
    out = paired_delta(a, b, n_boot=500, seed=1)
    assert out["delta"] == 1.0 and out["ci"] == [1.0, 1.0] and out["seed"] == 1
    # coverage on a simulated case: true delta 0.5, prompt effects shared by both arms, noise per prompt
    rng = np.random.default_rng(0)
    hits = 0
    for rep in range(200):
        base = rng.normal(0, 1, 40)
        a = {f"p{i}": [base[i] + rng.normal(0, 0.5)] for i in range(40)}
        b = {f"p{i}": [base[i] + 0.5 + rng.normal(0, 0.5)] for i in range(40)}
        lo, hi = paired_delta(a, b, n_boot=400, seed=rep)["ci"]
        hits += lo <= 0.5 <= hi
    assert 0.88 <= hits / 200 <= 0.99
    with pytest.raises(ValueError, match="at least 2 prompts"):
        paired_delta({"x": [1.0]}, {"y": [1.0]})


def test_svg_attempts_render_and_compare_with_canvas(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli import app

    svg = ('<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512"><rect width="512" height="512" fill="white"/>'
           '<circle cx="256" cy="256" r="150" fill="red"/></svg>')
    rows = []
    for i, pid in enumerate(["1A-00", "1A-01", "2A-00"]):
        rows.append(_row(pid, 0, "fill('white')"))  # canvas: trivial
        s = dict(_row(pid, 0, "```svg\n" + svg + "\n```"), medium="svg")
        rows.append(s)
    rows.append(dict(_row("2A-01", 0, "<svg xmlns='http://www.w3.org/2000/svg'><script/></svg>"), medium="svg"))
    append(tmp_path, rows)
    render_stage(tmp_path, workers=1)
    r = read_renders(tmp_path)
    svg_rows = {k: v for k, v in r.items() if json.loads(k)[3] == "svg"}
    assert sum(v["outcome"] == "ok" for v in svg_rows.values()) == 3
    assert any("script" in v["reason"] for v in svg_rows.values())
    assert len(list((tmp_path / "svg_native").glob("*.png"))) == 3
    res = CliRunner().invoke(app, ["layout", "compare", "--run", str(tmp_path), "--a", "zero-shot", "--b", "svg/zero-shot",
                                   "--boot", "200"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["delta"] == 1.0 and out["prompts"] == 3


def test_svg_protocol_prompts(tmp_path):
    from interp.prompts import PromptItem, Protocol, build
    from tests.interp.tiny import build_tiny
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build_tiny(tmp_path / "t"))
    item = PromptItem("x", "layout", "Draw a cat.", "a cat")
    b = build(item, Protocol("few-shot", 2, output="svg"), tok)
    assert (b.protocol, b.medium) == ("few-shot-2", "svg") and "SVG image of 512x512" in b.text and "```svg\n<svg" in b.text and "fill(" not in b.text
    c = build(item, Protocol("completion", 0, output="svg"), tok)
    assert c.opener == "```svg\n" and (c.protocol, c.medium) == ("completion-0", "svg")


def _too_precise(text: str) -> list[str]:
    """Numbers in printed text with more than 3 significant digits after the decimal point (0.06666666666666667)."""
    import re

    out = []
    for m in re.finditer(r"-?\d+\.\d+(?:e-?\d+)?", text):
        digits = m.group(0).lstrip("-").split("e")[0].replace(".", "").lstrip("0").rstrip("0")
        if len(digits) > 3:
            out.append(m.group(0))
    return out


def test_layout_compare_prints_numbers_rounded_for_people(tmp_path):
    """`ambench layout compare` printed raw JSON (a delta of 0.06666666666666667); what a command prints is rounded
    to 3 significant digits, while the files keep full precision."""
    from typer.testing import CliRunner

    from experiments.cli import app

    rows = []
    for i, pid in enumerate(["1A-00", "1A-01", "2A-00"]):
        rows.append(_row(pid, 0, "fill('white')"))  # canvas: trivial
        rows.append(dict(_row(pid, 0, "fill('white')\nrect(0, 0, 12, 24, 'red')" if i else "fill('navy')"), protocol="few-shot-2"))
    append(tmp_path, rows)
    render_stage(tmp_path, workers=1)
    res = CliRunner().invoke(app, ["layout", "compare", "--run", str(tmp_path), "--a", "zero-shot", "--b", "few-shot-2",
                                   "--boot", "200"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    assert out["delta"] == 0.667 and out["prompts"] == 3
    assert not _too_precise(res.output), res.output
