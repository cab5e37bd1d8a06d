"""Interventions on the tiny model: arms, seeded continuations, resume, statistics, patching."""

import json

import numpy as np

from bench.intervene.splice import strip_digits
from experiments.generation import GENERATIONS, append_rows, read_rows
from experiments.intervention import (INTERVENTIONS, PATCHING, arm_table, dose_response, intervene_stage, patch_stage,
                                      plan_cuts, plot_interventions)

TEXTS = [
    "```python\nfill('white')\nrect(2, 2, 4, 4, 'red')\nrect(2, 10, 6, 6, 'blue')\n```",
    "```python\nfill('black')\ncircle(12, 12, 3, 'gold')\nline(0, 0, 5, 5, 'red')\n```",
]


def _run(tmp_path):
    rows = []
    for i, t in enumerate(TEXTS):
        rows.append({"task": "layout", "prompt_id": f"1A-0{i}", "model": "tiny", "protocol": "zero-shot", "sample": 0,
                     "seed": 1, "temperature": 0.0, "prefix": "", "text": t, "code": None, "n_tokens": 1, "stop": "eos",
                     "entropy": [0.1], "mean_entropy": 0.1})
    append_rows(tmp_path / GENERATIONS, rows)


def test_intervene_stage_arms_seeds_resume_and_stats(tiny, tmp_path):
    _run(tmp_path)
    cuts = plan_cuts(tmp_path, "tiny")
    assert len(cuts) == 2 and cuts[0]["stmt"].name == "rect" and cuts[1]["stmt"].name == "line"
    for c in cuts:
        asis = next(a for a in c["arms"] if a.arm == "null-asis").prefix
        for a in c["arms"]:
            if a.arm.startswith("moved"):
                assert strip_digits(a.prefix) == strip_digits(asis) and a.prefix != asis
    counts = intervene_stage(tiny, tmp_path, "tiny", continuations=3, max_new_tokens=6, seed=1)
    rows = read_rows(tmp_path / INTERVENTIONS)
    assert counts["cuts"] == 2 and len(rows) == counts["continuations_written"]
    arms = {r["arm"] for r in rows}
    assert {"null-empty", "null-asis"} <= arms and all(isinstance(r["continued"], bool) for r in rows)
    before = (tmp_path / INTERVENTIONS).read_bytes()
    assert intervene_stage(tiny, tmp_path, "tiny", continuations=3, max_new_tokens=6, seed=1)["continuations_written"] == 0
    assert (tmp_path / INTERVENTIONS).read_bytes() == before
    # determinism: a fresh directory gives byte-identical rows
    other = tmp_path / "again"
    other.mkdir()
    _run(other)
    intervene_stage(tiny, other, "tiny", continuations=3, max_new_tokens=6, seed=1)
    assert (other / INTERVENTIONS).read_bytes() == before
    # seeds differ across continuations and are recorded
    assert len({r["seed"] for r in rows}) == len(rows)
    table = arm_table(rows, n_boot=200, n_perm=200)
    assert {t["arm"] for t in table} == arms
    for t in table:
        assert 0 <= t["rate"] <= 1 and t["rate_ci"][0] <= t["rate"] + 1e-12 <= t["rate_ci"][1] + 2e-12
        if t["arm"] != "null-asis" and "p_perm" in t:
            assert 0 < t["p_perm"] <= 1 and "q_bh" in t
    dose = dose_response(rows)
    assert all(d["continuations"] > 0 for d in dose)
    assert plot_interventions(tmp_path, table, dose).is_file()


def test_arm_statistics_on_a_known_effect():
    rows = []
    rng = np.random.default_rng(0)
    for p in range(20):
        for arm, rate in (("null-asis", 0.2), ("moved-used", 0.8)):
            for k in range(9):
                rows.append({"model": "m", "prompt_id": f"p{p}", "sample": 0, "cut": 1, "arm": arm, "k": k,
                             "continued": bool(rng.random() < rate), "distance": 0.0 if arm == "null-asis" else 4.0})
    t = {r["arm"]: r for r in arm_table(rows, n_boot=500, n_perm=500)}
    d = t["moved-used"]
    assert 0.45 < d["delta_vs_asis"] < 0.75 and d["delta_ci"][0] > 0.3 and d["p_perm"] < 0.01


def test_patching_runs_per_layer_both_ways(tiny, tmp_path):
    _run(tmp_path)
    rows = patch_stage(tiny, tmp_path, "tiny", layers=[0, 1], continuations=2, max_new_tokens=4)
    got = [r for r in rows if "layer" in r]
    skipped = [r for r in rows if r.get("kind") == "skipped"]
    # the rect cut moves 2-digit numbers to 2-digit numbers (same token count): patched both ways at both
    # layers; the line cut changes the digit count of a literal, so it is skipped and counted
    assert len(got) == 4 and {r["layer"] for r in got} == {0, 1}
    assert {r["direction"] for r in got} == {"moved->asis", "asis->moved"}
    assert skipped == [{"kind": "skipped", "cuts_with_unequal_token_counts": 1}]
    assert len(read_rows(tmp_path / PATCHING)) == 4
    json.dumps(rows)
