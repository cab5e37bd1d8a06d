"""Generation and capture stages: seeded, resumable after a kill, identical to an unbroken run."""

import json

import pytest

from activations.store import ActivationStore
from experiments.rundir import AttemptKey
from experiments.rundir import RunError
from experiments.stages.capture import CaptureSettings, capture_stage
from experiments.stages.generate import GenerateSettings, attempt_seed, generate_stage, regenerate
from tests.experiments.runs import GENERATIONS, read_rows
from interp.prompts import PromptItem, Protocol

ITEMS = [
    PromptItem("a", "layout", "Draw the flag of Germany.", "the flag of Germany"),
    PromptItem("b", "layout", "Draw a cat sitting on a mat.", "a cat sitting on a mat"),
    PromptItem("c", "layout", "Draw a red ball under a blue sky.", "a red ball"),
]
S = GenerateSettings(samples=2, temperature=1.0, seed=7, max_new_tokens=10, batch_size=4, protocol="zero-shot")


def test_rows_seeds_and_counts(tiny, tmp_path):
    counts = generate_stage(tiny, ITEMS, tmp_path, S, model="tiny")
    assert counts == {"attempts": 9, "written": 9, "skipped": 0, "stale": 0}
    rows = read_rows(tmp_path / GENERATIONS)
    assert [(r["prompt_id"], r["sample"]) for r in rows] == [(i.id, k) for i in ITEMS for k in range(3)]
    for r in rows:
        assert r["seed"] == attempt_seed(7, AttemptKey("tiny", "layout", "zero-shot", "v1", r["prompt_id"], r["sample"]))
        assert r["temperature"] == (0.0 if r["sample"] == 0 else 1.0)
        assert len(r["entropy"]) == r["n_tokens"] <= 10 and r["stop"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["stages"]["generate/tiny/layout/v1/zero-shot"]["settings"]["seed"] == 7
    assert generate_stage(tiny, ITEMS, tmp_path, S, model="tiny") == {"attempts": 9, "written": 0, "skipped": 9, "stale": 0}


def test_killed_run_resumes_to_identical_file(tiny, tmp_path):
    whole = tmp_path / "whole"
    generate_stage(tiny, ITEMS, whole, S, model="tiny")
    reference = (whole / GENERATIONS).read_bytes()
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "config.json").write_bytes((whole / "config.json").read_bytes())
    lines = reference.splitlines(keepends=True)
    # a kill after the first batch plus a torn half line of the second
    (cut / GENERATIONS).write_bytes(b"".join(lines[:4]) + lines[4][:30])
    generate_stage(tiny, ITEMS, cut, S, model="tiny")
    assert (cut / GENERATIONS).read_bytes() == reference
    # a kill in the middle of a batch's lines (only some rows written): the batch is redone, nothing duplicated
    (cut / GENERATIONS).write_bytes(b"".join(lines[:6]))
    generate_stage(tiny, ITEMS, cut, S, model="tiny")
    assert (cut / GENERATIONS).read_bytes() == reference


def test_any_attempt_regenerates_alone(tiny, tmp_path):
    generate_stage(tiny, ITEMS, tmp_path, S, model="tiny")
    rows = read_rows(tmp_path / GENERATIONS)
    for r in (rows[4], rows[8]):
        item = next(i for i in ITEMS if i.id == r["prompt_id"])
        again = regenerate(tiny, item, r, S)
        # tokens, text and seed are identical; entropies agree up to float rounding of a batch vs one row
        strip = lambda d: {k: v for k, v in d.items() if k not in ("entropy", "mean_entropy")}  # noqa: E731
        assert strip(again) == strip(r)
        assert max(abs(x - y) for x, y in zip(again["entropy"], r["entropy"])) < 1e-4


def test_other_settings_in_the_same_run_are_refused(tiny, tmp_path):
    generate_stage(tiny, ITEMS[:1], tmp_path, S, model="tiny")
    with pytest.raises(RunError, match="other settings.*temperature"):
        generate_stage(tiny, ITEMS[:1], tmp_path, GenerateSettings(**{**S.as_dict(), "temperature": 0.5}), model="tiny")


def test_capture_stage_resumes_by_prompt(tiny, tmp_path):
    p1 = capture_stage(tiny, ITEMS[:2], tmp_path, CaptureSettings("zero-shot", batch_size=1), model="tiny")
    p2 = capture_stage(tiny, ITEMS, tmp_path, CaptureSettings("zero-shot", batch_size=2), model="tiny")
    assert p1 == p2
    with ActivationStore(p2) as s:
        assert s.prompt_ids == ["a", "b", "c"] and s.shape == (3, 3, 3, 32)
        assert s.meta["model"]["name"] == "tiny" and s.meta["protocol"] == "zero-shot"
        assert s.meta["hook_names"][-1] == "blocks.1.hook_resid_post"
        fresh = tiny.capture([[1, 2, 3]], [[0, 1, 2]])  # sanity: capture returns float32 tensors
        assert fresh.dtype.is_floating_point


def test_capture_stores_the_request_embedding_mean(tiny, tmp_path):
    """The probe stage's `embedding-mean` baseline: the model's input embeddings averaged over the request's own tokens
    (not the template's), stored beside the activations with row checksums; a store without them says None."""
    import numpy as np

    from interp.prompts import build

    folder = capture_stage(tiny, ITEMS, tmp_path, CaptureSettings("zero-shot", batch_size=2), model="tiny")
    with ActivationStore(folder) as st:
        rows = st.rows_of("layout")
        got = st.embed_mean([rows[i.id] for i in ITEMS])
    for it, g in zip(ITEMS, got):
        b = build(it, Protocol("zero-shot"), tiny.tokenizer, chat=tiny.info.chat)
        idx = b.tokens_in([b.request])
        assert idx and len(idx) < len(b.tokens)  # the request, not the whole prompt
        assert np.allclose(g, tiny.input_embeddings(b.tokens)[idx].mean(axis=0), atol=1e-6)
    assert not np.allclose(got[0], got[1])
    # an edited embedding is refused by its checksum
    import h5py

    part = sorted(folder.glob("part-*.h5"))[0]
    with h5py.File(part, "r+") as f:
        f["embed_mean"][0, 0] += 1.0
    with ActivationStore(folder) as st:
        with pytest.raises(Exception, match="checksum"):
            st.embed_mean([st.rows_of("layout")["a"]])
