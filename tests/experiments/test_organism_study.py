"""The pipeline's stages recover the organisms' known answers (docs/organisms.md), on the committed weights.

Each test runs the unchanged stages (generate, capture, probes; generate, interventions, patching;
generate, translation scoring) into a run directory, on a subset of an organism's held-out prompts, and
asserts the constructed answer from the rows. Each has a broken variant that must fail the same check: the
sibling organism built the other way (fixed-plan for the tracker, the other planner's targets for a planner's
activations) or an untrained model of the same shape. Skipped when the committed weights are missing or stale
(tests/interp/test_organisms.py fails for that).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from interp.organisms import WEIGHTS, record
from interp.organisms.zoo import ORGANISMS, code_version

def needs(*names: str):
    """Skip unless the committed weights of these organisms exist and were built by the current code
    (tests/interp/test_organisms.py fails for missing or stale ones: retrain with scripts/train_organisms.py)."""
    stale = [n for n in names if (record(WEIGHTS / n) or {}).get("code_version") != code_version(n)]
    return pytest.mark.skipif(bool(stale), reason=f"committed weights missing or stale: {', '.join(stale)}")


def _generate(run, names, items, samples=0, max_new_tokens=200):
    from experiments.stages.generate import GenerateSettings, generate_stage
    from interp.runtime import Runtime

    rts = {}
    for name in names:
        rt = Runtime.load(f"organism:{name}", device="cpu")
        s = GenerateSettings(samples, 0.7, 0, max_new_tokens, 40, "auto", 0, "canvas")
        generate_stage(rt, items, run, s, model=f"organism:{name}")
        rts[name] = rt
    return rts


def _prompts(name, n, step=1):
    from interp.prompts import load_prompts

    return load_prompts(WEIGHTS / name / "prompts.jsonl")[::step][:n]


@needs("xor-planner", "xor-planner-b")
def test_probe_stage_recovers_the_planners_plans_and_not_the_siblings(tmp_path):
    from experiments.stages.capture import CaptureSettings, capture_stage
    from experiments.stages.probe import ProbeSettings, probe_stage

    run = tmp_path / "run"
    items = _prompts("xor-planner", 80, 2)
    rts = _generate(run, ("xor-planner", "xor-planner-b"), items)
    for name, rt in rts.items():
        capture_stage(rt, items, run, CaptureSettings("auto", 0, "float32", 40), model=f"organism:{name}")
    rows = probe_stage(run, None, ProbeSettings(tasks=("layout",), n_perm=99, n_perm_layers=0, n_boot=200,
                                                pca=(4, 8, 16, 32), outer=5, inner=3))

    def one(**m):
        got = [r for r in rows if all(r.get(k) == v for k, v in m.items())]
        assert len(got) == 1, m
        return got[0]

    for name, other in (("xor-planner", "xor-planner-b"), ("xor-planner-b", "xor-planner")):
        m = f"organism:{name}"
        d = one(model=m, target="own", features="delta", position="last")
        assert d["r2_text"] < 0.1, d  # the text baseline cannot read an XOR of words that share no bigram
        assert d["delta_r2"] > 0.5 and d["delta_ci"][0] > 0, d
        # 99 permutations: p >= 0.01 by construction; q corrects over every Delta test of the task and target (issue
        # 39: both models at every position, 6 tests here), so q = p * 6 / (tests at least as small)
        assert d["p_perm"] <= 0.01 and d["q_bh"] <= 0.02, d
        assert d["bh_family"].startswith("every Delta test of task layout, target own: 6 tests"), d
        # beyond the text (issue 19): no lexical reading of the prompt, the model's own input embeddings included,
        # gives an XOR of two words, so the plan is beyond every baseline and the Freedman-Lane p is at its floor
        bt = one(model=m, target="own", features="beyond_text", position="last")
        whole = {b: v for b, v in bt["baselines"].items() if "/" not in b}  # every reading's whole design
        # (a screened ceiling, issue 39's reading through its 4 or 16 columns most associated with the target, reads
        # 0.2-0.3 of the plan's word pairs; the plan stays beyond it by more than 0.5)
        assert max(whole.values()) < 0.2 and bt["delta_beyond"] > 0.5 and bt["p_fl"] <= 0.01, bt
        layers = sorted((r for r in rows if r["model"] == m and r.get("target") == "own" and r.get("features") == "resid"
                         and r["position"] == "last" and isinstance(r["layer"], int)), key=lambda r: r["layer"])
        assert layers[0]["r2"] < 0.1 and max(r["r2"] for r in layers) > 0.8  # not in the embeddings; in the stream
        # the broken variant: the same activations with the sibling's plans as targets decode nothing
        cross = one(model=m, target=f"model:organism:{other}", features="resid", position="last", layer="best")
        assert cross["r2"] < 0.3, cross
        spec = one(model=m, target="specific", features="resid", position="last", layer="best")
        assert spec["ci"][0] > 0, spec  # the model-specific component is decodable here, by construction
    _causal_stage_known_answer(run, rts["xor-planner"])


def _causal_stage_known_answer(run, rt):
    """Issue 41, through the stage's own code path on the run above: the plan the xor-planner's bars follow is "used"
    at its best site (interchange along the concept moves each drawing towards its source prompt's, interval above 0,
    p at the flips' floor); the broken variant (source and base in each other's roles: the source's residual with the
    base's component) is not."""
    from dataclasses import replace

    from experiments.stages.causal import CausalSettings, causal_stage
    from interp import causal

    s = CausalSettings(max_prompts=48, max_new_tokens=200, methods=("interchange",))
    row = causal_stage(rt, run, "organism:xor-planner", s)
    ic = row["methods"]["interchange"]
    assert row["outcome"] == "used" and row["site"]["readable"], row
    assert ic["effect_lo"] > 0.1 and ic["p"] <= 0.001 and ic["n"] >= 40, ic
    real = causal.interchange_hook

    def swapped(basis, sources):
        import torch

        def apply(h):
            u = torch.as_tensor(basis, dtype=h.dtype)
            src = torch.as_tensor(sources, dtype=h.dtype)
            return src + ((h - src) @ u) @ u.T
        return causal._last_column(apply)

    try:
        causal.interchange_hook = swapped
        broken = causal_stage(rt, run, "organism:xor-planner", replace(s, seed=1))
    finally:
        causal.interchange_hook = real
    assert broken["outcome"] != "used", broken["methods"]


@needs("tracker", "fixed-plan")
def test_intervention_stage_separates_the_tracker_from_the_fixed_plan_writer(tmp_path):
    from experiments.stages.intervene import InterveneSettings, intervene_stage, summarise_interventions
    from experiments.stages.patch import PatchSettings, patch_stage

    run = tmp_path / "run"
    items = _prompts("tracker", 24, 3)
    rts = _generate(run, ("tracker", "fixed-plan"), items, max_new_tokens=300)
    for name, rt in rts.items():
        intervene_stage(rt, run, f"organism:{name}", InterveneSettings(continuations=3, max_new_tokens=24, limit=24))
    patch_stage(rts["tracker"], run, "organism:tracker", PatchSettings(layers=(0, 2, 4), continuations=2, max_new_tokens=24, limit=6))
    table = summarise_interventions(run, 0, n_boot=300, n_perm=300)
    arms = {(r["model"].split(":")[1], r["arm"]): r for r in table["arms"]}
    tr_mu, tr_used = arms[("tracker", "moved-unused")], arms[("tracker", "moved-used")]
    assert tr_mu["delta_vs_asis"] >= 0.3 and tr_mu["delta_ci"][0] > 0, tr_mu
    assert tr_mu["rate"] > tr_used["rate"], (tr_mu, tr_used)  # dose-response: moved off the region > moved within it
    for arm in ("moved-unused", "moved-used"):
        fx = arms[("fixed-plan", arm)]
        assert fx["delta_ci"][0] <= 0 <= fx["delta_ci"][1], fx  # the broken variant: nothing to find
    assert not (arms[("fixed-plan", "moved-unused")]["delta_vs_asis"] >= 0.3
                and arms[("fixed-plan", "moved-unused")]["delta_ci"][0] > 0)
    patch = [r for r in table["patching"] if r["model"] == "organism:tracker"]
    assert {r["layer"] for r in patch} == {0, 2, 4} and all(r["cuts"] > 0 for r in patch)


@needs("translator")
def test_translation_scoring_gives_the_translator_exact_piou(tmp_path):
    from experiments.rundir import RunDir
    from experiments.stages.translation import score_attempts

    run = tmp_path / "run"
    items = _prompts("translator", 30, 6)
    _generate(run, ("translator",), items, max_new_tokens=300)
    out = tmp_path / "scores.jsonl"
    score_attempts(WEIGHTS / "translator" / "references.jsonl", run / RunDir.GENERATIONS, out)
    piou = [json.loads(line)["piou"] for line in out.read_text().splitlines()]
    assert len(piou) == len(items) and float(np.median(piou)) >= 0.9
    # the broken variant: the same answers scored against the next prompt's reference
    refs = [json.loads(line) for line in (WEIGHTS / "translator" / "references.jsonl").read_text().splitlines()]
    ids = [r["id"] for r in refs]
    shifted = tmp_path / "shifted.jsonl"
    shifted.write_text("".join(json.dumps({**r, "id": ids[(i + 1) % len(ids)]}) + "\n" for i, r in enumerate(refs)))
    wrong = tmp_path / "wrong.jsonl"
    score_attempts(shifted, run / RunDir.GENERATIONS, wrong)
    assert float(np.median([json.loads(line)["piou"] for line in wrong.read_text().splitlines()])) < 0.5


@pytest.fixture
def untrained_planner(tmp_path):
    """A model of the xor-planner's shape and tokenizer with its initial weights and no training."""
    from interp.organisms.tokenizer import build_tokenizer
    from interp.organisms.train import build_model
    from interp.runtime import Runtime

    folder = tmp_path / "untrained"
    tok = build_tokenizer()
    build_model(ORGANISMS["xor-planner"].config, tok, 0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return Runtime.from_folder(folder, name="untrained")


@needs("xor-planner")
def test_trajectory_finds_the_planners_plan_before_it_draws_and_an_untrained_model_has_none(tmp_path, untrained_planner):
    """Plan or state (issue 16) on real activations: the xor-planner names its plan before its code, so its final
    canvas is decodable at the last prompt token and ahead of the drawn code; the same attempts probed in an
    untrained model of the same shape (the broken variant) hold no plan."""
    from experiments.rundir import RunDir
    from experiments.stages.trajectory import TrajectorySettings, trajectory_stage, verdict

    run = tmp_path / "run"
    rts = _generate(run, ("xor-planner",), _prompts("xor-planner", 60, 3))
    s = TrajectorySettings(boundaries=3)
    with RunDir.writer(run) as rd:
        got = trajectory_stage(rts["xor-planner"], rd, "organism:xor-planner", s)["rows"]
    assert got[0]["counts"]["used"] == 60
    pts = {(r["boundary"], r["probe"]): r for r in got if r.get("probe")}
    assert pts[(0, "final")]["r2"] > 0.8 and pts[(0, "final-state")]["lead"] and pts[(1, "final-state")]["lead"]
    assert "a plan ahead of the state" in verdict(got)
    # the broken variant: an untrained model reading the same attempts (rows copied under its name)
    from experiments.rundir import reading

    rows = [{**r, "model": "untrained"} for r in reading(run).rows(RunDir.GENERATIONS)]
    with RunDir.writer(run) as rd:
        rd.append(RunDir.GENERATIONS, rows)
        broken = trajectory_stage(untrained_planner, rd, "untrained", s)["rows"]
    bpts = {(r["boundary"], r["probe"]): r for r in broken if r.get("probe")}
    assert bpts[(0, "final")]["r2"] < 0.5 and not bpts[(0, "final-state")]["lead"]
