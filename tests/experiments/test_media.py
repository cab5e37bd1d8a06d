"""Issue 16, "is the T2/T3 inversion a property of the 24x24 medium?": the media v1-48 and outline wired
through prompts, generation, renders (each attempt at its own resolution), the study's arms, and the
T2/T3 gap contrast across media on a run whose answer was constructed."""

import json

import numpy as np
import pytest

from bench.canvas.medium import OUTLINE_VOCABULARY, get_medium
from bench.layout.prompts import load_layout_prompts
from bench.sandbox.runtime import execute
from experiments.rundir import AttemptKey, RunDir
from experiments.stages.layout import layout_table, tier_gap, tier_gap_table
from experiments.stages.render import read_renders, render_stage, renders_complete, row_key
from interp.prompts import EXAMPLES, PromptError, PromptItem, Protocol, build, examples_for, system_prompt
from tests.experiments.runs import GENERATIONS, append, read_rows

ITEM = PromptItem("x", "layout", "Draw a cat sitting on a mat.", "a cat sitting on a mat")


def _row(model, pid, k, text, medium="v1", task="layout", protocol="zero-shot"):
    return {"task": task, "prompt_id": pid, "model": model, "protocol": protocol, "medium": medium, "sample": k,
            "seed": k, "temperature": 0.7, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos",
            "entropy": [0.1], "mean_entropy": 0.1}


# --------------------------------------------------------------------------- prompts


@pytest.mark.parametrize("name", ["v1", "v1-48", "outline"])
def test_every_example_program_draws_inside_its_medium(name):
    medium = get_medium(name)
    progs = [e.program(name) for e in EXAMPLES if e.program(name) is not None]
    assert len(progs) >= 2
    for code in progs:
        res = execute(code, medium)
        assert res.outcome == "ok", (name, code, res.reason)
        for call in res.calls:  # every position the program names is on the grid
            prim = medium.vocabulary[call.kind]
            for ri, ci in prim.position_pairs(len(call.params)):
                assert 0 <= call.params[ri] < medium.grid and 0 <= call.params[ci] < medium.grid, (name, code)
    if name == "outline":
        assert any(any(c.kind in set(OUTLINE_VOCABULARY) - {"fill", "set_pixel", "rect", "circle", "line", "poly"}
                       for c in execute(p, medium).calls) for p in progs)


def test_the_48_cell_examples_draw_the_same_pictures_at_twice_the_grid():
    for e in EXAMPLES:
        big = e.program("v1-48")
        if big is None:
            continue
        small = execute(e.code).calls
        large = execute(big, get_medium("v1-48")).calls
        assert [c.kind for c in small] == [c.kind for c in large]
        for a, b in zip(small, large):
            assert [2 * v for v in a.params] == list(b.params) and a.color == b.color


def test_system_prompt_and_examples_follow_the_medium(tiny):
    tok = tiny.tokenizer
    b48 = build(ITEM, Protocol("few-shot", 2, medium=get_medium("v1-48")), tok)
    assert b48.medium == "v1-48" and "48x48" in b48.text and "0 to 47" in b48.text and "24x24" not in b48.text
    assert "rect(36, 0, 12, 48, 'green')" in b48.text and "rect(18, 0, 6, 24, 'green')" not in b48.text
    bo = build(ITEM, Protocol("few-shot", 2, medium=get_medium("outline")), tok)
    assert bo.medium == "outline" and "rect_outline(r, c, h, w, color)" in bo.text and "circle_outline(14, 12, 4" in bo.text
    assert "rect_outline" not in system_prompt() and "rect_outline" in system_prompt(get_medium("outline"))
    with pytest.raises(PromptError, match="only 2 worked examples exist for medium v1-48"):
        examples_for("layout", 3, medium="v1-48")
    tr = PromptItem("s000", "translation", "Draw on a 24x24 grid of cells.")
    with pytest.raises(PromptError, match="is for the layout task"):
        build(tr, Protocol("zero-shot", medium=get_medium("v1-48")), tok)
    assert build(tr, Protocol("zero-shot", medium=get_medium("outline")), tok).medium == "outline"
    with pytest.raises(PromptError, match="no canvas medium"):
        Protocol("zero-shot", medium=get_medium("outline"), output="svg")


def test_generate_writes_the_medium_into_the_attempt_key(tiny, tmp_path):
    from experiments.stages.generate import GenerateSettings, attempt_seed, generate_stage, regenerate

    s = GenerateSettings(samples=1, temperature=1.0, seed=3, max_new_tokens=6, batch_size=4, protocol="few-shot", medium="v1-48")
    generate_stage(tiny, [ITEM], tmp_path, s, model="tiny")
    generate_stage(tiny, [ITEM], tmp_path, GenerateSettings(**{**s.as_dict(), "medium": "v1"}), model="tiny")
    rows = read_rows(tmp_path / GENERATIONS)
    assert [(r["medium"], r["sample"]) for r in rows] == [("v1-48", 0), ("v1-48", 1), ("v1", 0), ("v1", 1)]
    for r in rows:
        assert r["seed"] == attempt_seed(3, AttemptKey.of(r))
    assert rows[1]["seed"] != rows[3]["seed"]  # the medium is part of the key, so of the seed
    stages = json.loads((tmp_path / "config.json").read_text())["stages"]
    assert {"generate/tiny/layout/v1-48/few-shot-2", "generate/tiny/layout/v1/few-shot-2"} <= set(stages)
    again = regenerate(tiny, ITEM, rows[1], s)
    assert again["text"] == rows[1]["text"] and again["medium"] == "v1-48"
    from experiments.rundir import RunError

    with pytest.raises(RunError, match="unknown medium"):
        generate_stage(tiny, [ITEM], tmp_path, GenerateSettings(**{**s.as_dict(), "medium": "v2"}), model="tiny")


# --------------------------------------------------------------------------- renders


def test_each_attempt_renders_in_its_own_medium(tmp_path):
    """On the old stage every attempt went through the v1 sandbox into one 24x24 store: an outline program
    was invalid (unknown primitive) and a 48-cell program was clipped to the top-left quarter."""
    outline = "fill('white')\nrect_outline(2, 2, 10, 10, 'red')"
    big = "fill('white')\nrect(30, 30, 10, 10, 'blue')"
    append(tmp_path, [_row("m", "2A-00", 0, outline, "outline"), _row("m", "2A-00", 0, outline, "v1"),
                      _row("m", "2A-00", 1, big, "v1-48"), _row("m", "2A-00", 1, big, "v1")])
    render_stage(tmp_path, workers=1)
    rows = read_rows(tmp_path / GENERATIONS)
    r = read_renders(tmp_path)
    got = {AttemptKey.of(x).medium + ":" + ("outline" if "outline" in x["text"] else "big"): r[row_key(x)] for x in rows}
    assert got["outline:outline"]["outcome"] == "ok" and got["v1:outline"]["outcome"] != "ok"
    assert got["outline:outline"]["pixels"].shape == (24, 24, 3) and got["outline:outline"]["pixels"][6, 6].tolist() == [255, 255, 255]
    px = got["v1-48:big"]["pixels"]
    assert px.shape == (48, 48, 3) and px[35, 35].tolist() != [255, 255, 255] and px[29, 29].tolist() == [255, 255, 255]
    assert got["v1:big"]["pixels"].shape == (24, 24, 3)
    assert (tmp_path / "renders").is_dir() and (tmp_path / "renders-v1-48").is_dir() and (tmp_path / "renders-outline").is_dir()
    assert renders_complete(tmp_path) and set(read_renders(tmp_path, "v1-48")) == {row_key(rows[2])}
    t = {(x["protocol"], x["tier"]): x for x in layout_table(tmp_path)}
    assert t[("v1-48/zero-shot", "T2")]["valid"] == 1 and t[("outline/zero-shot", "T2")]["valid"] == 1
    assert t[("zero-shot", "T2")]["attempts"] == 2 and t[("zero-shot", "T2")]["valid"] == 1


def test_interventions_take_only_the_paper_canvas(tmp_path):
    """A 48-cell attempt as an intervention source would be spliced on the 24-cell grid with a 48x48 painted
    mask and continued from a v1 prompt: the old plan took every non-SVG attempt."""
    from experiments.stages.intervene import plan_cuts

    text = "```python\nfill('white')\nrect(2, 2, 4, 4, 'red')\nrect(12, 10, 6, 6, 'blue')\n```"
    append(tmp_path, [_row("m", "1A-00", 0, text, "v1"), _row("m", "1A-00", 0, text, "v1-48"),
                      _row("m", "1A-00", 0, text, "outline")])
    render_stage(tmp_path, workers=1)
    cuts, records = plan_cuts(tmp_path, "m")
    assert [c["key"].medium for c in cuts] == ["v1"] and {r["medium"] for r in records} == {"v1"}


# --------------------------------------------------------------------------- the T2/T3 gap across media


def test_tier_gap_bootstrap_known_answer_and_coverage():
    out = tier_gap([0.0, 0.5, 1.0], [1.0, 1.0], n_boot=300, seed=2)
    assert out["gap"] == 0.5 and out["T2"] == 0.5 and out["seed"] == 2 and out["ci"][1] == 1.0
    # coverage: true gap 0.3, per-prompt noise, 25 prompts a tier
    rng = np.random.default_rng(0)
    hits = sum(lo <= 0.3 <= hi for lo, hi in (tier_gap(rng.normal(0, 1, 25), rng.normal(0.3, 1, 25), 400, rep)["ci"]
                                               for rep in range(200)))
    assert 0.88 <= hits / 200 <= 0.99
    with pytest.raises(ValueError, match="at least 2 prompts"):
        tier_gap([1.0], [1.0, 2.0])


GOOD = "fill('white')\nrect(2, 2, 20, 20, 'red')"  # valid and non-trivial in every medium
TRIVIAL = "fill('white')"


def _counts(rng, mean, n):
    """Good attempts (of 4) per prompt: around `mean`, varying by prompt."""
    return [int(np.clip(round(mean + rng.normal(0, 0.8)), 0, 4)) for _ in range(n)]


@pytest.fixture(scope="module")
def media_run(tmp_path_factory):
    """One model, 8 T2 and 8 T3 prompts, 4 attempts each, in three media: v1 and outline show the
    inversion (T3 ~3 of 4 good, T2 ~1 of 4), v1-48 does not (T2 ~3 of 4 as well). Judge verdicts are
    added for v1 and v1-48: 4 for a good attempt, 1 otherwise."""
    run = tmp_path_factory.mktemp("media") / "run"
    prompts = load_layout_prompts()
    t2 = [p.id for p in prompts if p.tier == "T2"][:8]
    t3 = [p.id for p in prompts if p.tier == "T3"][:8]
    rng = np.random.default_rng(5)
    good: dict = {}
    for medium, (m2, m3) in {"v1": (1, 3), "v1-48": (3, 3), "outline": (1, 3)}.items():
        for ids, mean in ((t2, m2), (t3, m3)):
            for pid, c in zip(ids, _counts(rng, mean, len(ids))):
                good[(medium, pid)] = c
    rows, judged = [], []
    for (medium, pid), c in good.items():
        for k in range(4):
            rows.append(_row("m", pid, k, GOOD if k < c else TRIVIAL, medium))
            if medium != "outline":
                judged.append({"judge": "j", "model": "m", "task": "layout", "protocol": "zero-shot", "medium": medium,
                               "prompt_id": pid, "sample": k, "overall": 4.0 if k < c else 1.0,
                               "tier": "T2" if pid in t2 else "T3"})
    append(run, rows)
    append(run, judged, RunDir.JUDGE_SCORES)
    render_stage(run, workers=1)
    return run, good, t2, t3


def test_the_gap_contrast_finds_a_constructed_medium_effect_and_not_a_null_one(media_run):
    run, good, t2, t3 = media_run
    rows = tier_gap_table(run, n_boot=2000, seed=0)

    def gap(medium, scale=1.0, offset=0.0):  # computed here from the construction, not by the stage
        s = {pid: offset + scale * good[(medium, pid)] / 4 for pid in t2 + t3}
        return np.mean([s[p] for p in t3]) - np.mean([s[p] for p in t2])

    gaps = {(r["metric"], r["medium"]): r for r in rows if r["kind"] == "gap"}
    con = {(r["metric"], r["b"]): r for r in rows if r["kind"] == "contrast"}
    vnt = "valid and non-trivial"
    for medium in ("v1", "v1-48", "outline"):
        assert abs(gaps[(vnt, medium)]["gap"] - gap(medium)) < 1e-12
        assert gaps[(vnt, medium)]["n_T2"] == gaps[(vnt, medium)]["n_T3"] == 8
    assert gaps[(vnt, "v1")]["inverted"] and gaps[(vnt, "v1")]["ci"][0] > 0
    # the constructed effect: the inversion is there at 24x24 and gone at 48 cells
    c48 = con[(vnt, "v1-48")]
    assert abs(c48["difference"] - (gap("v1-48") - gap("v1"))) < 1e-12 and c48["difference"] < -0.2
    assert c48["ci"][1] < 0 and abs(c48["gap_a"] - gap("v1")) < 1e-12 and abs(c48["gap_b"] - gap("v1-48")) < 1e-12
    # the null: outline has the same inversion as v1, so the difference's CI covers 0
    cout = con[(vnt, "outline")]
    assert cout["ci"][0] <= 0 <= cout["ci"][1] and abs(cout["difference"] - (gap("outline") - gap("v1"))) < 1e-12
    # the judge's overall score: 1 + 3 * (good share) per prompt, so every gap is 3x the rate's gap
    j48 = con[("judge j overall", "v1-48")]
    assert abs(j48["difference"] - 3 * (gap("v1-48") - gap("v1"))) < 1e-9 and j48["ci"][1] < 0
    assert ("judge j overall", "outline") not in con  # no verdicts for outline


def test_single_medium_runs_have_no_gap_table(tmp_path):
    append(tmp_path, [_row("m", "2A-00", 0, GOOD), _row("m", "3A-00", 0, GOOD)])
    render_stage(tmp_path, workers=1)
    assert tier_gap_table(tmp_path) == []


# --------------------------------------------------------------------------- the study


def test_study_config_media_arms_and_errors():
    from experiments.study import StudyConfig

    c = StudyConfig.from_preset("quick", media=("v1-48", "outline"))
    assert c.arms() == [("translation", "canvas", "v1"), ("layout", "canvas", "v1"), ("layout", "canvas", "v1-48"),
                        ("layout", "canvas", "outline")]
    assert c.generate("layout", "canvas", "v1-48").medium == "v1-48" and c.as_dict()["media"] == ["v1-48", "outline"]
    assert StudyConfig(**{**c.as_dict(), "models": ["x"]}).media == ("v1-48", "outline")  # from JSON: lists
    for bad, msg in ((("v2",), "unknown medium"), (("svg",), "SVG is --svg"), (("outline", "outline"), "twice")):
        with pytest.raises(ValueError, match=msg):
            StudyConfig.from_preset("quick", media=bad)


def test_merge_puts_media_arms_in_the_unsharded_order(tmp_path):
    """Rows of a medium arm go after the paper arms (the order an unsharded run writes); the old merge key
    sorted them among the v1 layout rows by prompt."""
    from experiments.study import StudyConfig, merge_runs, prompt_sets

    c = StudyConfig.from_preset("quick", translation_prompts=1, layout_per_subcategory=1, samples=0, media=("v1-48",))
    sets = prompt_sets(c)
    want = [_row("m", it.id, 0, TRIVIAL, "v1", "translation") for it in sets["translation"]]
    want += [_row("m", it.id, 0, TRIVIAL, "v1") for it in sets["layout"]]
    want += [_row("m", it.id, 0, TRIVIAL, "v1-48") for it in sets["layout"]]
    config = {"stages": {"study": {"config": {**c.as_dict(), "models": ["m"]}, "versions": {}, "shard": [0, 2]}}}
    shards = []
    for i in range(2):
        d = tmp_path / f"s{i}"
        append(d, want[i::2][::-1])
        (d / "config.json").write_text(json.dumps(config))
        shards.append(d)
    merge_runs(shards, tmp_path / "merged")
    got = read_rows(tmp_path / "merged" / GENERATIONS)
    assert [AttemptKey.of(r) for r in got] == [AttemptKey.of(r) for r in want]


def test_run_with_a_medium_end_to_end(tmp_path):
    """`ambench run --medium v1-48 --attention --selectivity` on a tiny random model: a 48-cell layout arm,
    rendered at 48x48, in the layout table, the T2/T3 gap table and the report; capture and interventions
    stay on v1. The v1 layout attempts are written beforehand as the generate stage writes them (a random
    model writes no valid program), so the attention stage has valid attempts to read; selectivity, with
    one model, says why it has no table. In this process (tests.experiments.runs.ambench): what is checked is what the
    run writes, not the process running it (a subprocess paid 4-5 CPU s of interpreter start and imports). Interventions with 2
    continuations of 10 tokens (tests/experiments/test_study.py's), not the preset's 3 of 64: what is checked of them
    is the medium of their cuts, which the cuts' choice sets and the continuations do not (64 tokens took 3-6x the
    CPU of the rest of the run)."""
    from experiments.study import StudyConfig, prompt_sets
    from tests.experiments.runs import ambench
    from tests.interp.tiny import build_tiny

    model = build_tiny(tmp_path / "tiny")
    out = tmp_path / "run"
    sets = prompt_sets(StudyConfig.from_preset("quick", layout_per_subcategory=1))
    append(out, [_row(str(model), it.id, k, "```python\n" + GOOD + "\n```", protocol="few-shot-2")
                 for it in sets["layout"] for k in range(2)])
    cmd = ["run", "--model", str(model), "--out", str(out), "--translation-prompts", "1",
           "--layout-per-subcategory", "1", "--samples", "1", "--max-new-tokens", "8", "--medium", "v1-48", "--attention",
           "--selectivity", "--n-perm", "19", "--n-perm-layers", "19",  # the fewest permutations: tables, not p, are checked
           "--continuations", "2", "--intervene-tokens", "10"]
    ambench(cmd)
    rows = read_rows(out / GENERATIONS)
    big = [r for r in rows if r["medium"] == "v1-48"]
    assert len(big) == 15 * 2 and all(r["task"] == "layout" for r in big)
    renders = read_renders(out)
    assert {renders[row_key(r)]["pixels"].shape for r in big} == {(48, 48, 3)}
    assert {renders[row_key(r)]["pixels"].shape for r in rows if r["medium"] == "v1"} == {(24, 24, 3)}
    arms = {r["protocol"] for r in json.loads((out / "layout_table.json").read_text())}
    assert arms == {"few-shot-2", "v1-48/few-shot-2"}
    gaps = json.loads((out / "tier_gaps.json").read_text())
    assert {(g["kind"], g.get("b")) for g in gaps} >= {("gap", None), ("contrast", "v1-48")}
    assert {r["medium"] for r in read_rows(out / "intervention_cuts.jsonl")} == {"v1"}
    att = read_rows(out / RunDir.ATTENTION)
    assert len(att) == 30 and {r["medium"] for r in att} == {"v1"} and any(r["status"] == "ok" for r in att)
    assert json.loads((out / RunDir.ATTENTION_TABLE).read_text())[0]["attempts"] >= 1
    assert [r["kind"] for r in read_rows(out / RunDir.SELECTIVITY)] == ["skipped"]
    page = (out / "report" / "index.html").read_text()
    assert "Is the T2/T3 inversion a property of the 24x24 medium?" in page
    assert "Attention focus on the prompt's spatial words" in page and "Cross-model selectivity" in page
    summary = json.loads((out / "summary.json").read_text())
    assert {"tier_gaps", "attention", "selectivity"} <= set(summary)
