"""Known-answer verdicts (experiments/organisms.py) from constructed result rows: rows that must pass, rows that must
fail, a missing statistic that must not pass, and a rule chosen by what a model declares, never by its name."""

from __future__ import annotations

import json

import pytest

from experiments.organisms import KINDS, declared, known_answers, verdicts
from experiments.rundir import RunDir


def _delta(model, delta, ci, q, r2_text=0.0):
    return {"model": model, "task": "layout", "target": "own", "features": "delta", "position": "last", "layer": "best",
            "delta_r2": delta, "delta_ci": ci, "q_bh": q, "p_perm": q, "r2_resid": delta + r2_text, "r2_text": r2_text}


def _run(tmp_path, name, models, probes=(), table=None):
    run = tmp_path / name
    with RunDir.writer(run, "test") as rd:
        rd.append(RunDir.GENERATIONS, [{"task": "layout", "prompt_id": "p0", "model": m, "protocol": "few-shot-2",
                                        "medium": "v1", "sample": 0, "seed": 0, "temperature": 0.0, "prefix": "",
                                        "text": "", "code": None, "n_tokens": 1, "stop": "eos", "entropy": [0.1],
                                        "mean_entropy": 0.1} for m in models])
        if probes:
            rd.append(RunDir.PROBES, list(probes))
        if table is not None:
            rd.write_json(RunDir.INTERVENTIONS_TABLE, table)
    return run


def _by_method(rows):
    return {(r["organism"], r["method"]): r["recovered"] for r in rows}


def test_no_plan_passes_only_with_a_test_that_finds_nothing(tmp_path):
    m = "organism:random-planner"
    cases = {"nothing": (_delta(m, 0.01, [-0.02, 0.04], 0.4), True),
             "found": (_delta(m, 0.05, [0.01, 0.09], 0.001), False),
             # --n-perm 0: no permutation test, no q: "not measured", never "not significant"
             "untested": (_delta(m, 0.01, [-0.02, 0.04], None), None)}
    for name, (row, want) in cases.items():
        got = _by_method(verdicts(_run(tmp_path, name, [m], [row])))
        assert got[("random-planner", "Delta R^2 (own, `last`)")] is want, name


def test_hidden_plan_needs_delta_ci_and_q(tmp_path):
    m = "organism:xor-planner"
    cases = {"found": (_delta(m, 0.6, [0.4, 0.8], 0.0004), True),
             "ci_includes_0": (_delta(m, 0.6, [-0.1, 0.8], 0.0004), False),
             "q_too_big": (_delta(m, 0.6, [0.4, 0.8], 0.02), False),
             "untested": (_delta(m, 0.6, [0.4, 0.8], None), None)}
    for name, (row, want) in cases.items():
        got = _by_method(verdicts(_run(tmp_path, name, [m], [row])))
        assert got[("xor-planner", "Delta R^2 (own, `last`)")] is want, name
        assert got[("xor-planner", "TF-IDF text baseline")] is True


def test_the_rule_follows_the_declaration_not_the_name(tmp_path):
    """A folder named like the random planner that declares a hidden plan gets the hidden-plan rule; a folder that
    declares nothing gets no verdict; a declaration passed in overrides."""
    folder = tmp_path / "random-planner-copy"
    folder.mkdir()
    (folder / "training.json").write_text(json.dumps({"known_answer": {"kind": "hidden-plan", "statement": "mine"}}))
    plain = tmp_path / "some-model"
    plain.mkdir()
    assert declared(str(folder)) == {"kind": "hidden-plan", "statement": "mine"}
    assert declared(str(plain)) is None and declared("organism:random-planner")["kind"] == "no-plan"
    row = _delta(str(folder), 0.6, [0.4, 0.8], 0.0004)
    run = _run(tmp_path, "run", [str(folder), str(plain)], [row, _delta(str(plain), 0.6, [0.4, 0.8], 0.0004)])
    rows = verdicts(run)
    assert {r["kind"] for r in rows} == {"hidden-plan"} and {r["organism"] for r in rows} == {"random-planner-copy"}
    assert _by_method(rows)[("random-planner-copy", "Delta R^2 (own, `last`)")] is True
    # the same rows judged as a no-plan organism fail: the rule is the declaration's
    again = verdicts(run, {str(folder): {"kind": "no-plan"}})
    assert _by_method(again)[("random-planner-copy", "Delta R^2 (own, `last`)")] is False


def test_tracking_and_fixed_plan_rules(tmp_path):
    def arms(model, unused, used, lo_hi):
        return [{"task": "layout", "model": model, "arm": "null-asis", "rate": 0.2},
                {"task": "layout", "model": model, "arm": "moved-unused", "rate": 0.2 + unused, "delta_vs_asis": unused,
                 "delta_ci": lo_hi},
                {"task": "layout", "model": model, "arm": "moved-used", "rate": 0.2 + used, "delta_vs_asis": used,
                 "delta_ci": [used - 0.05, used + 0.05]}]
    t, f = "organism:tracker", "organism:fixed-plan"
    good = _run(tmp_path, "good", [t, f], table={"arms": arms(t, 0.5, 0.1, [0.4, 0.6]) + arms(f, 0.0, 0.0, [-0.05, 0.05])})
    got = _by_method(verdicts(good))
    assert got[("tracker", "moved-unused - null-asis (continued drawing)")] is True
    assert got[("tracker", "dose-response (moved-unused > moved-used)")] is True
    assert got[("fixed-plan", "moved arms - null-asis")] is True
    swapped = _run(tmp_path, "swapped", [t, f], table={"arms": arms(t, 0.0, 0.0, [-0.05, 0.05]) + arms(f, 0.5, 0.1, [0.4, 0.6])})
    got = _by_method(verdicts(swapped))
    assert got[("tracker", "moved-unused - null-asis (continued drawing)")] is False
    assert got[("fixed-plan", "moved arms - null-asis")] is False


def test_known_answers_of_one_run_or_of_a_preset_folder(tmp_path):
    m = "organism:random-planner"
    _run(tmp_path / "out", "planners", [m], [_delta(m, 0.01, [-0.02, 0.04], 0.4)])
    rows = known_answers(tmp_path / "out")
    assert [r["recovered"] for r in rows] == [True]
    assert "random-planner" in (tmp_path / "out" / "known_answers.md").read_text()
    assert [r["recovered"] for r in known_answers(tmp_path / "out" / "planners")] == [True]


def test_every_builtin_organism_declares_a_known_kind():
    from interp.organisms.zoo import ORGANISMS

    assert all(o.constructs in KINDS for o in ORGANISMS.values())


def test_a_trained_folder_records_its_declaration(tmp_path, monkeypatch):
    """train_organism writes `known_answer` into training.json, where `declared` finds it (the optimisation itself is
    replaced by an untrained model of the same builder: what is checked is the record, not the training)."""
    from interp.organisms import build, planners
    from interp.organisms.tokenizer import build_tokenizer
    from interp.organisms.train import TrainConfig, build_model

    cfg = TrainConfig(steps=1, n_layers=1, d_model=16, d_mlp=32, n_heads=2)
    monkeypatch.setattr(build, "train_weights", lambda data, c, seed, progress=None:
                        (build_model(c, build_tokenizer(), seed), data.heldout[:1], 8, [1.0]))
    out = tmp_path / "mine"
    build.train_organism("mine", planners.dataset("random-planner"), cfg, out, 0, "v0", evaluate_heldout=False,
                         known_answer={"kind": "no-plan", "statement": "coin flips"})
    assert declared(str(out)) == {"kind": "no-plan", "statement": "coin flips"}
