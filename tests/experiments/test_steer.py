"""Steering: the probe direction is the gradient of the probe, and a steered generation goes through hooks."""

import numpy as np
import pytest

from bench.canvas.regions import region_mask
from experiments.stages.steer import probe_direction, summarise_steering
from hooks.steer import add_direction
from interp.probes import fold_predictions


def test_direction_is_the_probe_gradient():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 20))
    y = rng.uniform(size=(60, 36))
    g = probe_direction(x, y, "left", k=8, alpha=1.0)
    assert abs(np.linalg.norm(g) - 1) < 1e-12
    # finite difference of the fitted probe's predicted left-half occupancy along g vs a random direction
    base = x[:1]
    m = region_mask("left", 6).ravel()

    def left(v):
        return fold_predictions(x, y, v, [8], [1.0])[0, 0][0][m].mean()

    eps = 1e-3
    along = (left(base + eps * g) - left(base)) / eps
    for _ in range(5):
        r = rng.normal(size=20)
        r /= np.linalg.norm(r)
        assert along >= (left(base + eps * r) - left(base)) / eps - 1e-9
    assert along > 0
    with pytest.raises(ValueError, match="unknown region"):
        region_mask("middle", 6)


def test_add_direction_hook_changes_generation(tiny):
    from interp.prompts import PromptItem, Protocol, build
    from interp.runtime import Sampling, StopRule

    b = build(PromptItem("a", "layout", "Draw a cat.", "a cat"), Protocol("zero-shot"), tiny.tokenizer)
    rule = StopRule(max_new_tokens=8, eos=False, fence=False)
    plain = tiny.generate([b.tokens], [Sampling()], rule)[0]
    v = np.ones(tiny.info.d_model) * 40.0
    steered = tiny.generate([b.tokens], [Sampling()], rule, hooks=[("blocks.1.hook_resid_pre", add_direction(v))])[0]
    assert steered.tokens != plain.tokens
    zero = tiny.generate([b.tokens], [Sampling()], rule, hooks=[("blocks.1.hook_resid_pre", add_direction(v * 0))])[0]
    assert zero.tokens == plain.tokens


def test_summary_means_over_valid_renders():
    rows = [{"model": "m", "layer": 3, "region": "left", "strength": s, "valid": v, "region_occupancy": o, "other_occupancy": 0.1}
            for s, v, o in [(0.0, True, 0.2), (0.0, False, None), (2.0, True, 0.6), (2.0, True, 0.4)]]
    out = {r["strength"]: r for r in summarise_steering(rows)}
    assert out[0.0]["valid"] == 1 and out[0.0]["region_occupancy"] == 0.2 and abs(out[2.0]["region_occupancy"] - 0.5) < 1e-12


def test_steer_stage_end_to_end_on_a_run(tiny, tmp_path):
    from experiments.stages.capture import CaptureSettings, capture_stage
    from tests.experiments.runs import GENERATIONS, append, read_rows
    from experiments.stages.render import render_stage
    from experiments.stages.steer import STEERING, SteerSettings, steer_stage
    from interp.prompts import Protocol, layout_items

    items = layout_items()[:6]
    rows = []
    for i, it in enumerate(items):
        for k in range(2):
            rows.append({"task": "layout", "prompt_id": it.id, "model": "tiny", "protocol": "zero-shot", "sample": k, "seed": k,
                         "temperature": 0.7, "prefix": "", "text": f"fill('white')\nrect({i}, {2 * i}, 8, 8, 'red')",
                         "code": None, "n_tokens": 1, "stop": "eos", "entropy": [0.1], "mean_entropy": 0.1})
    append(tmp_path, rows)
    render_stage(tmp_path, workers=1)
    capture_stage(tiny, items, tmp_path, CaptureSettings("zero-shot"), model="tiny")
    ss = SteerSettings(layer=1, region="left", strengths=(0.0, 4.0), samples=2, max_new_tokens=6, limit=2)
    summary = steer_stage(tiny, tmp_path, ss, model="tiny")
    assert {s["strength"] for s in summary} == {0.0, 4.0} and all(s["attempts"] == 4 for s in summary)
    got = read_rows(tmp_path / STEERING)
    assert len(got) == 8 and len({r["seed"] for r in got}) == 4  # the same seeds at every strength
    again = steer_stage(tiny, tmp_path, ss, model="tiny")
    assert again == summary and len(read_rows(tmp_path / STEERING)) == 8  # resumed: nothing redone
    # a second model name on the same run steers on its own (its rows are not taken for the first model's)
    capture_stage(tiny, items, tmp_path, CaptureSettings("zero-shot"), model="tiny2")
    append(tmp_path, [dict(r, model="tiny2") for r in rows])
    render_stage(tmp_path, workers=1)
    other = steer_stage(tiny, tmp_path, ss, model="tiny2")
    assert {s["model"] for s in other} == {"tiny", "tiny2"} and len(read_rows(tmp_path / STEERING)) == 16
