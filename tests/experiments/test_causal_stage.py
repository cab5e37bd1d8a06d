"""The causal stage (issue 41): readable or used, at the layout probe's best site, in the study.

- The site is the layer with the best R^2 at `last`; readability is the nested-CV best row's interval above 0.
- The verdict's three sentences say what the test showed, and a model the probe cannot read is never "used", nor
  loaded (nothing to move).
- The known answers through the stage's own code path (tests/experiments/test_organism_study.py holds the run on
  the xor-planner): a plan the drawing follows comes out "used"; the interchange with source and base swapped (a
  broken variant) does not.
- The known-answer rules read the stage's rows: a hidden plan must be "used", a model with nothing to use must not.
"""

from __future__ import annotations

import json

import pytest

from experiments.rundir import RunDir
from experiments.stages.causal import CausalSettings, causal_stage, site_of, verdict
from interp.causal import causal_outcome


def _probe_rows(model="m", r2s=(0.1, 0.6, 0.4), best_ci=(0.3, 0.8), chosen=None):
    rows = [{"model": model, "task": "layout", "target": "own", "features": "resid", "position": "last", "layer": i,
             "r2": r, "r2_mean": r, "ci": [r - 0.2, r + 0.2], "n_prompts": 40} for i, r in enumerate(r2s)]
    rows.append({"model": model, "task": "layout", "target": "own", "features": "resid", "position": "last",
                 "layer": "best", "r2": max(r2s), "ci": list(best_ci), "n_prompts": 40,
                 "chosen": [{"layer": c, "k": 4, "alpha": 1.0} for c in (chosen or [])]})
    rows.append({"model": model, "task": "layout", "target": "own", "features": "resid", "position": "turn", "layer": 0,
                 "r2": 0.99, "n_prompts": 40})  # another position: never the site
    return rows


def test_the_site_is_the_best_layer_and_readability_is_the_nested_cv_interval():
    s = CausalSettings()
    site = site_of(_probe_rows(), "m", s)
    assert site["layer"] == 1 and site["r2"] == 0.6 and site["readable"] is True
    assert site_of(_probe_rows(best_ci=(-0.1, 0.5)), "m", s)["readable"] is False
    assert site_of(_probe_rows(best_ci=(None, None)), "m", s)["readable"] is None
    assert site_of(_probe_rows(r2s=(0.5, 0.5 + 1e-9, 0.2)), "m", s)["layer"] == 0  # no choice on the last bits
    assert site_of(_probe_rows(), "other", s) is None
    # the layer moved is the one the nested CV chose most often (the readable probe's), not the best single layer;
    # and it must be readable itself (the outside attack's case: the best row readable, the moved layer not)
    voted = site_of(_probe_rows(r2s=(0.1, 0.6, 0.15), chosen=[2, 2, 1]), "m", s)
    assert voted["layer"] == 2 and voted["chosen_by"] == "nested CV" and voted["readable"] is False
    assert site_of(_probe_rows(r2s=(0.1, 0.6, 0.4), chosen=[2, 2, 1]), "m", s)["readable"] is True


def test_the_rule_and_its_words():
    used = {"p": 0.001, "effect_lo": 0.1, "effect": 0.2, "effect_hi": 0.3, "n": 30, "n_groups": 10, "min_p": 0.002}
    assert causal_outcome(True, used) == "used"
    assert causal_outcome(True, {**used, "p": 0.2}) == "readable-not-shown"
    assert causal_outcome(True, {**used, "effect_lo": -0.01}) == "readable-not-shown"
    assert causal_outcome(False, used) == "not-readable"  # an effect without a readable probe is not "used"
    assert causal_outcome(None, used) == "no-test" and causal_outcome(True, None) == "no-test"
    # 4 groups cannot reach 0.05 (min p 0.125): no test, never "not shown" (the attack's case)
    assert causal_outcome(True, {**used, "p": 0.125, "min_p": 0.125, "n_groups": 4}) == "no-test"
    site = {"layer": 3, "best_r2": 0.5, "best_ci": [0.2, 0.7], "n": 30}
    words = {o: verdict({"outcome": o, "site": site, "grouping": "groups", "methods": {"interchange": used}})
             for o in ("used", "readable-not-shown", "not-readable")}
    assert words["used"].startswith("used: ") and "in 10 groups" in words["used"]
    assert words["readable-not-shown"].startswith("readable but not shown to be used")
    assert words["not-readable"].startswith("not readable") and "ran anyway" in words["not-readable"]
    assert not any(w.startswith("used") for o, w in words.items() if o != "used")
    assert verdict({"outcome": "no-test", "reason": "no probe rows"}) == "no test: no probe rows"


def test_settings_are_checked():
    from experiments.rundir import RunError

    for bad in ({"position": "turn"}, {"when": "sometimes"}, {"rank": 0}, {"max_prompts": 3}, {"alpha": 1.5},
                {"task": "poetry"}):
        with pytest.raises(RunError):
            CausalSettings(**bad)


def test_a_probe_that_reads_nothing_loads_nothing_and_is_not_readable(tmp_path, tiny_folder):
    """On the small study (a random tiny model: nothing to read), the stage writes its row from the probe rows alone:
    no runtime is given, and none is needed."""
    from tests.experiments.runs import run_small_study

    run = tmp_path / "run"
    run_small_study(tiny_folder, run)
    rows = RunDir(run).rows(RunDir.CAUSAL)
    assert len(rows) == 1 and rows[0]["outcome"] in ("not-readable", "no-test")
    if rows[0]["outcome"] == "not-readable":
        assert "nothing was moved" in verdict(rows[0]) and "per_prompt" not in rows[0]
        row = causal_stage(None, run, rows[0]["model"], CausalSettings(max_prompts=64))
        assert row["outcome"] == "not-readable"
        with pytest.raises(Exception, match="load it"):
            causal_stage(None, run, rows[0]["model"], CausalSettings(max_prompts=64, when="always"))
    report = (run / "report" / "index.html").read_text()
    assert "Readable or used?" in report


def _run_with_causal(tmp_path, rows):
    run = tmp_path / "r"
    from tests.experiments.runs import append

    append(run, [{"task": "layout", "prompt_id": "p", "model": r["model"], "protocol": "zero-shot", "medium": "v1",
                  "sample": 0, "seed": 0, "temperature": 0.0, "text": "", "prefix": "", "code": None, "n_tokens": 0,
                  "stop": "eos", "entropy": [], "input": "x", "mean_entropy": None} for r in rows])
    with RunDir.writer(run, "test") as rd:
        rd.write_rows(RunDir.CAUSAL, rows)
    return run


def test_known_answer_rules_read_the_causal_rows(tmp_path):
    from experiments.verdicts import verdicts

    plan, none = "organism:xor-planner", "organism:random-planner"
    run = _run_with_causal(tmp_path, [{"model": plan, "task": "layout", "outcome": "used"},
                                      {"model": none, "task": "layout", "outcome": "not-readable"}])
    rows = {(r["organism"], r["method"].split(" ")[0]): r for r in verdicts(run)}
    assert rows[("xor-planner", "causal")]["recovered"] is True
    assert rows[("random-planner", "causal")]["recovered"] is True
    run2 = _run_with_causal(tmp_path / "b", [{"model": plan, "task": "layout", "outcome": "readable-not-shown"},
                                             {"model": none, "task": "layout", "outcome": "used"}])
    rows = {(r["organism"], r["method"].split(" ")[0]): r for r in verdicts(run2)}
    assert rows[("xor-planner", "causal")]["recovered"] is False
    assert rows[("random-planner", "causal")]["recovered"] is False
    run3 = _run_with_causal(tmp_path / "c", [{"model": plan, "task": "layout", "outcome": "no-test"}])
    rows = {(r["organism"], r["method"].split(" ")[0]): r for r in verdicts(run3)}
    assert rows[("xor-planner", "causal")]["recovered"] is None
    assert json.dumps(rows[("xor-planner", "causal")])  # the table's rows stay JSON
