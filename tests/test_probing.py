"""The probe stage on a synthetic run whose layer 2 carries the layout plan (a planted linear code)."""

import json

import numpy as np

from activations.store import ActivationWriter
from bench.layout.prompts import load_layout_prompts
from experiments.generation import GENERATIONS, append_rows
from experiments.probing import PROBES, ProbeSettings, consensus, probe_stage
from experiments.render import render_stage
from interp.probes import occupancy


def _run(tmp_path, n_prompts=30, samples=4, seed=0):
    rng = np.random.default_rng(seed)
    prompts = [p.id for p in load_layout_prompts()][:n_prompts]
    rows, rects = [], {}
    for pid in prompts:
        r, c, h, w = (int(v) for v in (rng.integers(0, 12), rng.integers(0, 12), rng.integers(6, 12), rng.integers(6, 12)))
        rects[pid] = (r, c, h, w)
        for k in range(samples):
            dr = int(rng.integers(-1, 2))
            text = f"fill('white')\nrect({r + dr}, {c}, {h}, {w}, 'red')" if k != samples - 1 or pid != prompts[0] else "fill('white')"
            rows.append({"task": "layout", "prompt_id": pid, "model": "m", "protocol": "zero-shot", "sample": k, "seed": k,
                         "temperature": 0.7, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos",
                         "entropy": [0.1], "mean_entropy": 0.1})
    rows.append({**rows[0], "prompt_id": "3E-09", "sample": 0})  # one prompt with a single attempt: dropped
    append_rows(tmp_path / GENERATIONS, rows)
    render_stage(tmp_path, workers=1)
    return prompts, rects


def test_probe_stage_finds_the_planted_layer(tmp_path):
    prompts, _ = _run(tmp_path)
    cons, counts = consensus(tmp_path, "m", "zero-shot", 3)
    assert counts == {"prompts_seen": 31, "kept": 30, "dropped": 1}
    rng = np.random.default_rng(1)
    d, sites = 40, 4
    code = rng.normal(size=(36, d))
    acts = rng.normal(size=(len(prompts), sites, 3, d)).astype(np.float32)
    y = np.stack([cons[p]["own"] for p in prompts])
    acts[:, 2, :, :] += (3 * y @ code)[:, None, :].astype(np.float32)
    meta = {"model": {"name": "m"}, "protocol": "zero-shot", "positions": ["subject", "turn", "last"]}
    with ActivationWriter(tmp_path / "activations" / "m.h5", sites, 3, d, meta) as w:
        w.append(prompts, acts, np.zeros((len(prompts), 3)))
    s = ProbeSettings(n_perm=4, n_boot=100, pca=(2, 4, 8, 16), alphas=(0.1, 1.0, 10.0, 100.0), outer=5, inner=3)
    rows = probe_stage(tmp_path, s=s)
    own = {(r["layer"], r["position"]): r for r in rows if r.get("features") == "resid" and r["target"] == "own"}
    assert own[(2, "last")]["r2"] > 0.5 and own[(0, "last")]["r2"] < 0.1
    assert own[("best", "last")]["r2"] > 0.5 and all(c["layer"] == 2 for c in own[("best", "last")]["chosen"])
    assert own[(2, "last")]["p_perm"] == 0.2 and "q_bh" in own[(2, "last")]
    kinds = {r.get("kind") for r in rows}
    assert {"targets", "ceiling"} <= kinds
    assert any(r.get("features") == "text" for r in rows)
    assert (tmp_path / PROBES).is_file() and (tmp_path / "probes" / "m.png").is_file()
    lines = [json.loads(x) for x in (tmp_path / PROBES).read_text().splitlines()]
    assert len(lines) == len(rows)
    assert occupancy(np.zeros((24, 24, 3), np.uint8), (0, 0, 0)).sum() == 0


def test_shared_specific_and_cross_model_rows_with_two_models(tmp_path):
    prompts, _ = _run(tmp_path)
    rows = []
    from experiments.generation import read_rows

    for r in read_rows(tmp_path / GENERATIONS):  # a second model that draws the same pictures
        rows.append(dict(r, model="m2"))
    append_rows(tmp_path / GENERATIONS, rows)
    render_stage(tmp_path, workers=1)
    rng = np.random.default_rng(2)
    for name in ("m", "m2"):
        cons, _ = consensus(tmp_path, name, "zero-shot", 3)
        y = np.stack([cons[p]["own"] for p in prompts])
        acts = rng.normal(size=(len(prompts), 3, 3, 20)).astype(np.float32)
        acts[:, 1] += (3 * y @ rng.normal(size=(36, 20)))[:, None, :].astype(np.float32)
        meta = {"model": {"name": name}, "protocol": "zero-shot", "positions": ["subject", "turn", "last"]}
        with ActivationWriter(tmp_path / "activations" / f"{name}.h5", 3, 3, 20, meta) as w:
            w.append(prompts, acts, np.zeros((len(prompts), 3)))
    s = ProbeSettings(n_perm=0, n_boot=100, pca=(2, 4, 8), alphas=(0.1, 1.0, 10.0), outer=5, inner=3)
    out = probe_stage(tmp_path, s=s)
    got = {(r["model"], r["target"]) for r in out if r.get("features") == "resid"}
    assert {("m", "own"), ("m", "shared"), ("m", "specific"), ("m", "model:m2"), ("m2", "model:m")} <= got
    shared = next(r for r in out if r.get("features") == "resid" and r["model"] == "m" and r["target"] == "shared"
                  and r["layer"] == 1 and r["position"] == "last")
    assert shared["r2"] > 0.5  # both models draw the same: the shared component is the whole signal
    assert (tmp_path / "probes" / "m-shared.png").is_file()
