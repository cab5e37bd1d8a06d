"""`ambench run --prompts FILE --references FILE`: the study on a user's own prompt set (what the organisms preset uses),
and the organisms preset's shape (its parts are ordinary studies on committed prompt files)."""

from __future__ import annotations

import json

import pytest

from tests.interp.tiny import build_tiny


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("pf") / "tiny")


def _files(tmp_path):
    """Two translation prompts with their own ids and references, and two layout prompts, in one prompt file."""
    from bench.translation.references import load_references
    from interp.prompts import PromptItem, translation_items, write_prompts

    refs = load_references("sampled")[:2]
    items = translation_items([r.id for r in refs])
    mine = [PromptItem(f"mine-t{i}", "translation", it.text, it.subject) for i, it in enumerate(items)]
    mine += [PromptItem("mine-l0", "layout", "draw a red square in the top left", "a red square"),
             PromptItem("mine-l1", "layout", "draw a blue disc at the bottom", "a blue disc")]
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(mine, prompts)
    references = tmp_path / "refs.jsonl"
    references.write_text("".join(json.dumps({**r.to_json(), "id": f"mine-t{i}"}) + "\n" for i, r in enumerate(refs)))
    return prompts, references


def _run(model, out, *extra):
    """`ambench run` in this process (tests.experiments.runs.ambench: the exit status and the messages are the
    command's; an exception it did not turn into one sentence is raised here)."""
    from tests.experiments.runs import ambench

    cmd = ["run", "--model", str(model), "--out", str(out), "--samples", "0",
           "--translation-samples", "0", "--max-new-tokens", "6", "--continuations", "1", "--intervene-tokens", "4",
           "--n-perm", "19", "--n-perm-layers", "19", *extra]  # the fewest permutations: no p is checked
    return ambench(cmd, code=None)


def test_study_runs_on_a_prompt_file_with_its_own_references(model, tmp_path):
    prompts, references = _files(tmp_path)
    res = _run(model, tmp_path / "run", "--prompts", str(prompts), "--references", str(references))
    assert res.exit_code == 0, res.stderr[-2000:]
    gens = [json.loads(line) for line in (tmp_path / "run" / "generations.jsonl").read_text().splitlines()]
    assert sorted({(g["task"], g["prompt_id"]) for g in gens}) == [("layout", "mine-l0"), ("layout", "mine-l1"),
                                                                   ("translation", "mine-t0"), ("translation", "mine-t1")]
    scores = [json.loads(line) for line in (tmp_path / "run" / "translation_scores.jsonl").read_text().splitlines()]
    assert sorted(s["ref_id"] for s in scores) == ["mine-t0", "mine-t1"]  # scored against the file's references
    recorded = [json.loads(line) for line in (tmp_path / "run" / "prompts.jsonl").read_text().splitlines()]
    assert {r["id"] for r in recorded} >= {"mine-t0", "mine-l1"}
    config = json.loads((tmp_path / "run" / "config.json").read_text())["stages"]["study"]["config"]
    assert config["prompt_files"] == [str(prompts)] and config["references"] == str(references)


def test_a_bad_prompt_file_is_one_sentence(model, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "task": "poetry", "text": "a poem"}\n')
    res = _run(model, tmp_path / "run", "--prompts", str(bad))
    assert res.exit_code == 2 and "Traceback" not in res.stderr
    assert "task 'poetry'" in res.stderr
    res = _run(model, tmp_path / "run2", "--prompts", str(tmp_path / "missing.jsonl"))
    assert res.exit_code == 2 and "does not exist" in res.stderr and "Traceback" not in res.stderr


def test_organisms_preset_parts_are_studies_on_committed_prompt_files():
    from experiments.organisms import parts_of
    from experiments.study import StudyConfig, data_path

    parts = parts_of("organisms")
    assert set(parts) == {"translator", "planners", "tracker"}
    for name, settings in parts.items():
        c = StudyConfig.from_preset("quick", **settings)  # every part is an ordinary study's settings
        assert all(m.startswith("organism:") for m in c.models)
        for f in c.prompt_files:
            assert data_path(f).is_file(), f
    with pytest.raises(ValueError, match="one study per part"):
        StudyConfig.from_preset("organisms")
    assert parts_of("quick") is None
