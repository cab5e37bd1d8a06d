"""Interventions on the tiny model: arms, seeded continuations, resume, keys, exclusions, statistics, patching."""

import json

import numpy as np

from bench.intervene.splice import strip_digits
from tests.experiments.runs import GENERATIONS, append, read_rows
from experiments.rundir import RunDir
from experiments.stages.intervene import (CUTS, INTERVENTIONS, InterveneSettings, arm_table, dose_response, intervene_stage,
                                          plan_cuts, plot_interventions, summarise_interventions)
from experiments.stages.patch import PATCHING, PatchSettings, patch_stage

TEXTS = [
    "```python\nfill('white')\nrect(2, 2, 4, 4, 'red')\nrect(2, 10, 6, 6, 'blue')  # the blue box\n```",
    "```python\nfill('black')\ncircle(12, 12, 3, 'gold')\nline(0, 0, 5, 5, 'red')\nfor i in range(2):\n    set_pixel(i, i, 'red')\n```",
]
S = InterveneSettings(continuations=3, max_new_tokens=6, seed=1)


def _row(pid, text, model="tiny", task="layout", sample=0):
    return {"task": task, "prompt_id": pid, "model": model, "protocol": "zero-shot", "medium": "v1", "sample": sample,
            "seed": 1, "temperature": 0.0, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos",
            "entropy": [0.1], "mean_entropy": 0.1}


def _run(tmp_path, models=("tiny",), extra=()):
    from experiments.stages.render import render_stage

    rows = [_row(f"1A-0{i}", t, m) for m in models for i, t in enumerate(TEXTS)]
    append(tmp_path, rows + list(extra))
    render_stage(tmp_path, workers=1)  # plan_cuts reads renders and never writes


def test_intervene_stage_arms_seeds_resume_and_stats(tiny, tmp_path):
    _run(tmp_path)
    cuts, records = plan_cuts(tmp_path, "tiny")
    assert len(cuts) == 2 and cuts[0]["stmt"].name == "rect" and cuts[1]["stmt"].name == "line"
    assert [(r["comment"], r["code_after"]) for r in records] == [(True, False), (False, True)]
    for c in cuts:
        asis = next(a for a in c["arms"] if a.arm == "null-asis").prefix
        for a in c["arms"]:
            if a.arm.startswith("moved"):
                assert strip_digits(a.prefix) == strip_digits(asis) and a.prefix != asis
                assert "# the blue box" in a.prefix or c["stmt"].name != "rect"  # the comment stays, byte-identical
    counts = intervene_stage(tiny, tmp_path, "tiny", S)
    rows = read_rows(tmp_path / INTERVENTIONS)
    assert counts["cuts"] == 2 and counts["cuts_with_rows"] == 2 and len(rows) == counts["continuations"]
    moved = sum(len(r["splice_identical"]) for r in records)
    assert counts["splices_byte_identical"] == f"{moved}/{moved}"
    arms = {r["arm"] for r in rows}
    assert {"null-empty", "null-asis"} <= arms and all(isinstance(r["continued"], bool) for r in rows)
    assert {r["medium"] for r in rows} == {"v1"} and {r["task"] for r in rows} == {"layout"}
    before = (tmp_path / INTERVENTIONS).read_bytes()
    assert intervene_stage(tiny, tmp_path, "tiny", S)["continuations"] == len(rows)
    assert (tmp_path / INTERVENTIONS).read_bytes() == before
    other = tmp_path / "again"
    other.mkdir()
    _run(other)
    intervene_stage(tiny, other, "tiny", S)
    assert (other / INTERVENTIONS).read_bytes() == before
    assert len({r["seed"] for r in rows}) == len(rows)
    table = arm_table(rows, n_boot=200, n_perm=200)
    assert {t["arm"] for t in table} == arms
    for t in table:
        assert 0 <= t["rate"] <= 1 and t["rate_ci"][0] <= t["rate"] + 1e-12 <= t["rate_ci"][1] + 2e-12
        if "p_perm" in t:
            assert 0 < t["p_perm"] <= 1 and "q_bh" in t
            assert abs((t["paired_rate"] - t["paired_asis_rate"]) - t["delta_vs_asis"]) < 1e-12
    dose = dose_response(rows)
    assert all(d["continuations"] > 0 for d in dose)
    with RunDir.writer(tmp_path) as rd:
        assert plot_interventions(rd, table, dose).is_file()


def test_the_dose_response_line_draws_every_point_of_its_table(tmp_path, monkeypatch):
    """Issue 40: the line joined only the points with an interval, so a hollow 0.0 (one prompt) between two rising
    points vanished and the plot showed a steady rise the table does not."""
    import matplotlib.pyplot as plt

    dose = [{"model": "m", "task": "layout", "bin": b, "mean_distance": d, "rate": r, "continuations": 3,
             "rate_ci": ci} for b, d, r, ci in (("1-2", 1.5, 0.2, [0.1, 0.3]), ("3", 3.0, 0.0, [None, None]),
                                                  ("4-6", 5.0, 0.6, [0.4, 0.8]))]
    seen = {}

    def keep(fig, name):
        seen["fig"] = fig
        return tmp_path / name

    monkeypatch.setattr(plt, "close", lambda fig: None)
    with RunDir.writer(tmp_path) as rd:
        monkeypatch.setattr(rd, "save_figure", keep)
        plot_interventions(rd, [], dose)
    ax = seen["fig"].axes[1]
    joined = [line for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert joined and list(joined[0].get_xdata()) == [1.5, 3.0, 5.0] and list(joined[0].get_ydata()) == [0.2, 0.0, 0.6]


def test_a_second_model_with_the_same_programs_gets_its_own_continuations_and_patching(tiny, tmp_path):
    """The audit's failure: resume keys without the model made the second model's cuts look done."""
    _run(tmp_path, models=("a", "b"))
    ca = intervene_stage(tiny, tmp_path, "a", S)
    cb = intervene_stage(tiny, tmp_path, "b", S)
    assert ca["continuations"] == cb["continuations"] > 0 and ca["cuts_with_rows"] == cb["cuts_with_rows"] == 2
    rows = read_rows(tmp_path / INTERVENTIONS)
    assert {r["model"] for r in rows} == {"a", "b"}
    ps = PatchSettings(layers=(0,), continuations=2, max_new_tokens=4)
    pa, pb = patch_stage(tiny, tmp_path, "a", ps), patch_stage(tiny, tmp_path, "b", ps)
    assert pa["rows"] == pb["rows"] > 0
    summary = summarise_interventions(tmp_path, n_boot=100, n_perm=100)
    assert {(c["model"], c["continuations"]) for c in summary["counts"]} == {("a", ca["continuations"]), ("b", cb["continuations"])}


def test_sources_are_every_valid_attempt_and_exclusions_are_counted(tiny, tmp_path):
    extra = [
        _row("1A-05", "```python\ndef draw():\n    rect(1, 1, 3, 3, 'red')\ndraw()\n```"),  # no spliceable statement
        _row("1A-06", "```python\nfill('white')  # sky\u2028ground\nrect(2, 3, 4, 4, 'red')\n```"),  # a line separator
        _row("1A-07", "```python\nfill('white')\n\f\nx = 1\nrect(2, 3, 4, 4, 'red')\n```"),  # a form feed
        _row("1A-08", "```python\nfill('white')\nrect(0, 0, 24, 24, 'red')\n```"),  # no room to move
        _row("1A-00", TEXTS[1], sample=1),  # a sampled attempt is a source too
        _row("s001", TEXTS[0], task="translation"),  # another task: not a layout source
    ]
    _run(tmp_path, extra=extra)
    cuts, records = plan_cuts(tmp_path, "tiny")
    assert {(c["key"].prompt_id, c["key"].sample) for c in cuts} == {("1A-00", 0), ("1A-01", 0), ("1A-06", 0), ("1A-07", 0),
                                                                      ("1A-08", 0), ("1A-00", 1)}
    by = {(r["prompt_id"], r["sample"]): r for r in records}
    assert by[("1A-05", 0)]["reason"] == "no spliceable statement"
    assert set(by[("1A-08", 0)]["missing"]) == {"no moved-used displacement", "no moved-unused displacement"}
    assert all(by[(p, 0)]["status"] == "cut" for p in ("1A-06", "1A-07"))
    counts = intervene_stage(tiny, tmp_path, "tiny", InterveneSettings(continuations=1, max_new_tokens=3))
    assert counts["excluded"] == {"no spliceable statement": 1, "no moved-used displacement": 1,
                                  "no moved-unused displacement": 1}
    assert (tmp_path / CUTS).is_file()
    tr = intervene_stage(tiny, tmp_path, "tiny", InterveneSettings(task="translation", continuations=1, max_new_tokens=3))
    assert tr["cuts"] == 1 and {r["task"] for r in read_rows(tmp_path / INTERVENTIONS)} == {"layout", "translation"}


def test_arm_statistics_on_a_known_effect():
    rows = []
    rng = np.random.default_rng(0)
    for p in range(20):
        for arm, rate in (("null-asis", 0.2), ("moved-used", 0.8)):
            for k in range(9):
                rows.append({"model": "m", "task": "layout", "protocol": "zero-shot", "medium": "v1", "prompt_id": f"p{p}",
                             "sample": 0, "cut": 1, "arm": arm, "k": k, "comment": p % 2 == 0, "code_after": False,
                             "continued": bool(rng.random() < rate), "distance": 0.0 if arm == "null-asis" else 4.0})
    t = {(r["stratum"], r["arm"]): r for r in arm_table(rows, n_boot=500, n_perm=500, strata=True)}
    d = t[("all", "moved-used")]
    assert 0.45 < d["delta_vs_asis"] < 0.75 and d["delta_ci"][0] > 0.3 and d["p_perm"] < 0.01
    assert t[("comment", "moved-used")]["paired_cuts"] == 10 and t[("no comment", "moved-used")]["paired_cuts"] == 10
    # a null effect: the same rate in both arms gives a delta CI around 0 and no small p
    null_rows = [dict(r, continued=bool(rng.random() < 0.5)) for r in rows]
    n = {r["arm"]: r for r in arm_table(null_rows, n_boot=500, n_perm=500)}["moved-used"]
    assert n["delta_ci"][0] < 0 < n["delta_ci"][1] and n["p_perm"] > 0.05


def test_patching_runs_per_layer_both_ways(tiny, tmp_path):
    _run(tmp_path)
    got = patch_stage(tiny, tmp_path, "tiny", PatchSettings(layers=(0, 1), continuations=2, max_new_tokens=4))
    rows = read_rows(tmp_path / PATCHING)
    # the rect cut moves 2-digit numbers to 2-digit numbers (same token count): patched both ways at both
    # layers; the line cut changes the digit count of a literal, so it is skipped and counted
    assert got["rows"] == len(rows) == 4 and got["layers"] == [0, 1] and got["cuts_with_unequal_token_counts"] == 1
    assert {r["direction"] for r in rows} == {"moved->asis", "asis->moved"} and {r["task"] for r in rows} == {"layout"}
    json.dumps(rows)


def test_the_report_says_which_reason_left_patching_empty(tmp_path):
    """Issue 40: "no cut kept its token count, or patching did not run" became the one reason that applies."""
    from experiments.stages.report import _no_patching

    with RunDir.writer(tmp_path) as rd:
        assert _no_patching(rd).startswith("the patch stage did not run")
        rd.record_config("patch/smollm2/layout", PatchSettings().as_dict())
        why = _no_patching(rd)
    assert why.startswith("the patch stage ran for smollm2 and no cut could be patched") and "did not run" not in why
