"""Cross-model selectivity (issue 16) on synthetic runs with constructed answers: models whose activations
encode their own layouts give a positive own-minus-others gap with a CI above 0 (and the swapped
pairing, the broken variant, a negative one); models whose activations encode only what their layouts
share give a gap whose CI covers 0; identical models give exactly 0. The cells equal the probe stage's
`layer: best` rows."""

import json

import numpy as np
import pytest

from bench.layout.prompts import load_layout_prompts
from experiments.rundir import RunDir, read_rows
from experiments.stages.probe import ProbeSettings, consensus, probe_stage
from experiments.stages.render import render_stage
from experiments.stages.selectivity import SelectivitySettings, selectivity_stage
from tests.experiments.runs import append
from tests.experiments.test_probe import _acts

GRID = dict(pca=(2, 4, 8, 16), alphas=(0.1, 1.0, 10.0, 100.0), outer=5, inner=3)
S = SelectivitySettings(n_boot=400, **GRID)
PROMPTS = [p.id for p in load_layout_prompts()][:30]


def _row(model, pid, k, text):
    return {"task": "layout", "prompt_id": pid, "model": model, "protocol": "zero-shot", "medium": "v1", "sample": k,
            "seed": k, "temperature": 0.7, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos",
            "entropy": [0.1], "mean_entropy": 0.1}


def _programs(rng, shared=None, jitter=0):
    """One rectangle per prompt (4 attempts, rows moved by -1..1): drawn at random, or the shared one
    moved by up to `jitter` cells per model."""
    out = {}
    for i, pid in enumerate(PROMPTS):
        if shared is None:
            r, c, h, w = (int(v) for v in (rng.integers(0, 12), rng.integers(0, 12), rng.integers(6, 12), rng.integers(6, 12)))
        else:
            r, c, h, w = shared[pid]
            r, c = r + int(rng.integers(-jitter, jitter + 1)), c + int(rng.integers(-jitter, jitter + 1))
        out[pid] = (r, c, h, w)
    return out


def _run(tmp_path, progs: dict[str, dict]):
    rows = []
    for model, prog in progs.items():
        for pid, (r, c, h, w) in prog.items():
            for k in range(4):
                rows.append(_row(model, pid, k, f"fill('white')\nrect({r + k % 3 - 1}, {c}, {h}, {w}, 'red')"))
    append(tmp_path, rows)
    render_stage(tmp_path, workers=1)
    return {m: np.stack([consensus(tmp_path, m, "layout", "zero-shot")[0][p]["own"] for p in PROMPTS]) for m in progs}


def _rows(rows, kind, position="last"):
    return [r for r in rows if r["kind"] == kind and r.get("position") == position]


@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    """Two models with independent layouts; each model's activations encode its own consensus."""
    run = tmp_path_factory.mktemp("own")
    rng = np.random.default_rng(0)
    y = _run(run, {"m1": _programs(rng), "m2": _programs(rng)})
    return run, y


def test_own_layouts_give_a_positive_gap_and_the_cells_are_the_probe_rows(own_run):
    run, y = own_run
    rng = np.random.default_rng(1)
    _acts(run, "m1", PROMPTS, "layout", y["m1"], 2, rng)
    _acts(run, "m2", PROMPTS, "layout", y["m2"], 1, rng)
    rows = selectivity_stage(run, S)
    assert rows == read_rows(run / RunDir.SELECTIVITY)
    for pos in ("subject", "turn", "last"):
        gaps = {r["model"]: r for r in _rows(rows, "gap", pos)}
        for m in ("m1", "m2"):
            assert gaps[m]["gap"] > 0.3 and gaps[m]["ci"][0] > 0 and gaps[m]["own_best"], (pos, gaps[m])
        (mean,) = _rows(rows, "mean_gap", pos)
        assert mean["ci"][0] > 0 and abs(mean["gap"] - np.mean([g["gap"] for g in gaps.values()])) < 1e-5
        assert mean["n_models"] == 2 and mean["own_best"] == 2 and mean["n_prompts"] == 30
        cells = {(r["model"], r["target"]): r for r in _rows(rows, "cell", pos)}
        assert set(cells) == {("m1", "m1"), ("m1", "m2"), ("m2", "m1"), ("m2", "m2")}
        assert cells[("m1", "m1")]["own"] and not cells[("m1", "m2")]["own"]
        assert cells[("m1", "m1")]["chosen_layers"] == [2] * 5
        for (m, t), c in cells.items():
            assert c["ci"][0] <= c["r2"] <= c["ci"][1]
    # the cells are the probe stage's best-layer rows (same targets, folds, grid and seed)
    probes = probe_stage(run, s=ProbeSettings(tasks=("layout",), n_perm=0, n_perm_layers=0, n_boot=100, **GRID))
    best = {(r["model"], r["target"], r["position"]): r["r2"] for r in probes
            if r.get("features") == "resid" and r.get("layer") == "best"}
    for r in (r for r in rows if r["kind"] == "cell"):
        target = "own" if r["own"] else f"model:{r['target']}"
        assert abs(best[(r["model"], target, r["position"])] - r["r2"]) < 1e-6


def test_the_swapped_pairing_fails_the_check(own_run, tmp_path):
    """The broken variant: each model's activations encode the other model's layouts. The check of the test
    above (gap > 0, CI above 0) fails: the gap is negative."""
    import shutil

    run, y = own_run
    other = tmp_path / "run"
    shutil.copytree(run, other, ignore=shutil.ignore_patterns("activations", RunDir.LOCK))
    rng = np.random.default_rng(1)
    _acts(other, "m1", PROMPTS, "layout", y["m2"], 2, rng)
    _acts(other, "m2", PROMPTS, "layout", y["m1"], 1, rng)
    gaps = _rows(selectivity_stage(other, S), "gap")
    assert all(g["gap"] < -0.3 and g["ci"][1] < 0 and not g["own_best"] for g in gaps)


def test_a_shared_layout_gives_a_gap_whose_ci_covers_zero(tmp_path):
    """Two models draw the same layout per prompt, each moved by its own small jitter; both models'
    activations encode the layout the two share (the mean of their consensus), not their own: the paper's
    finding. The gap is near 0 and its CI covers 0."""
    rng = np.random.default_rng(3)
    shared = _programs(rng)
    y = _run(tmp_path, {"m1": _programs(rng, shared, 2), "m2": _programs(rng, shared, 2)})
    assert not np.allclose(y["m1"], y["m2"])
    common = (y["m1"] + y["m2"]) / 2
    act_rng = np.random.default_rng(4)
    _acts(tmp_path, "m1", PROMPTS, "layout", common, 2, act_rng)
    _acts(tmp_path, "m2", PROMPTS, "layout", common, 1, act_rng)
    rows = selectivity_stage(tmp_path, S)
    cells = {(r["model"], r["target"]): r["r2"] for r in _rows(rows, "cell")}
    assert min(cells.values()) > 0.4  # both models' layouts are decodable from either model
    for g in _rows(rows, "gap"):
        assert abs(g["gap"]) < 0.1 and g["ci"][0] <= 0 <= g["ci"][1], g
    (mean,) = _rows(rows, "mean_gap")
    assert mean["ci"][0] <= 0 <= mean["ci"][1]


def test_identical_models_give_exactly_zero_and_one_model_is_skipped(tmp_path):
    rng = np.random.default_rng(5)
    prog = _programs(rng)
    y = _run(tmp_path, {"m1": prog, "m2": prog})
    for m in ("m1", "m2"):
        _acts(tmp_path, m, PROMPTS, "layout", y[m], 2, np.random.default_rng(6))
    rows = selectivity_stage(tmp_path, S)
    for g in (r for r in rows if r["kind"] == "gap"):
        assert g["gap"] == 0 and g["ci"] == [0, 0]
    one = selectivity_stage(tmp_path, S, models=["m1"])
    assert [r["kind"] for r in one] == ["skipped"] and "at least 2" in one[0]["reason"]
    json.dumps(rows)


def test_cli_and_report_section(own_run):
    from typer.testing import CliRunner

    from experiments.cli import app
    from experiments.stages.report import write_report

    run, y = own_run
    if not (run / "activations").is_dir():
        rng = np.random.default_rng(1)
        _acts(run, "m1", PROMPTS, "layout", y["m1"], 2, rng)
        _acts(run, "m2", PROMPTS, "layout", y["m2"], 1, rng)
    res = CliRunner().invoke(app, ["selectivity", "--run", str(run), "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    assert "mean own-minus-others gap over 2 models" in res.output and "(own best)" in res.output
    page = write_report(run).read_text()
    assert "Cross-model selectivity" in page and "models decode their own layouts better than the others" in page
    res = CliRunner().invoke(app, ["selectivity", "--run", str(run / "nothing")])
    assert res.exit_code == 2 and "has no activations" in res.output
