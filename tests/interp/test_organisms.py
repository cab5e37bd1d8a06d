"""Model organisms: data that the sandbox and the pipeline's parsers accept, a tokenizer and chat template that
the prompt builder can place positions in, deterministic and atomic training, and name resolution."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest

from bench.canvas.extract import extract_code
from bench.intervene.splice import continued_drawing, statements
from bench.sandbox.pool import SandboxPool
from interp.organisms import planners, tracker, translator
from interp.organisms.data import ANSWER_CLOSE, answer
from interp.organisms.tokenizer import build_tokenizer, render
from interp.organisms.train import TrainConfig, prompt_text, sequence_text
from interp.organisms.zoo import ORGANISMS, code_version
from interp.prompts import Protocol, build, load_prompts

TINY = TrainConfig(n_layers=1, d_model=16, n_heads=2, d_mlp=32, steps=3, batch_size=4, warmup=1, log_every=1)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def datasets():
    return {name: o.dataset() for name, o in ORGANISMS.items()}


# --------------------------------------------------------------------------- tokenizer and template


def test_tokenizer_round_trips_ascii_and_makes_numbers_single_tokens(tok):
    text = "fill('white')\nrect(18,6,6,6,'red')\n# 123 05 {x}[y] ~`\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    pieces = tok.convert_ids_to_tokens(ids)
    assert "18" in pieces and "12" in pieces and "05" not in pieces
    # every coordinate a splice can write on the 24x24 canvas is one token, so moves keep token counts
    assert all(len(tok(str(n), add_special_tokens=False)["input_ids"]) == 1 for n in range(100))
    assert tok.convert_ids_to_tokens(tok("é", add_special_tokens=False)["input_ids"]) == ["<unk>"]


def test_offsets_map_each_token_to_its_characters(tok):
    text = render("cover the left half with 6x6 red squares on white", tokenizer=tok)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    rebuilt = "".join(text[a:b] for a, b in enc["offset_mapping"])
    assert rebuilt == text


def test_template_renders_only_the_last_request_and_matches_the_training_text(tok):
    messages = [{"role": "system", "content": "a long system prompt"}, {"role": "user", "content": "first"},
                {"role": "assistant", "content": "```python\nfill('white')\n```"}, {"role": "user", "content": "second"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == prompt_text("second")
    assert "system" not in text and "first" not in text
    reply = answer("fill('white')\n")
    assert render("second", reply, tok) == sequence_text("second", reply)


def test_every_organism_prompt_builds_with_positions_on_its_text(tok, datasets):
    for name, data in datasets.items():
        for ex in data.heldout[:20]:
            for proto in (Protocol("zero-shot", 0), Protocol("few-shot", 2), Protocol("auto")):
                b = build(ex.item, proto, tok)
                assert ex.item.text in b.text
                assert b.text.endswith("<|assistant|>") and b.tokens[-1] == tok.convert_tokens_to_ids("<|assistant|>")
            start = b.text.index(ex.item.text)
            sub_end = start + ex.item.subject_span[1]
            offsets = tok(b.text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            assert offsets[b.positions["subject"]][1] == sub_end, name
            assert offsets[b.positions["turn"]][1] == start + len(ex.item.text), name


# --------------------------------------------------------------------------- data


def test_programs_run_in_the_sandbox_and_parse_as_the_pipeline_expects(datasets):
    """Every held-out answer, every distinct planner answer (864 per planner) and the first 400 training answers
    of each other organism run in the sandbox; each stops at its closing fence, extracts to its program, and
    every drawing statement is a spliceable top-level call."""
    examples = []
    for name, data in datasets.items():
        examples += [e for e in data.heldout if e.program]
        if name in planners.PLANS:
            keys = itertools.product(*[range(r) for r in planners.RADIX])
            examples += [planners.example(k, v, h) for k in keys if k[2] == k[3] == 0 for v in (0, 1) for h in (0, 1)]
        else:
            examples += data.training_examples(400, seed=1)
    unique = {e.answer: e for e in examples}
    with SandboxPool(workers=2) as pool:
        results = pool.run(list(unique))
    bad = [(text, r.outcome, r.reason) for text, r in zip(unique, results) if not r.valid]
    assert not bad, bad[:3]
    for text, e in unique.items():
        assert extract_code(text) == e.program.rstrip("\n")
        assert text.endswith(ANSWER_CLOSE) and text.count("```") == 2
        stmts = statements(text)
        drawing = [s for s in stmts if s.name != "fill"]
        assert len(stmts) == e.program.count("\n") and drawing and all(s.spliceable for s in drawing)
        assert not continued_drawing(text[drawing[-1].line_end :])  # the closing fence ends the drawing


def test_planners_write_their_plan_as_the_first_token(tok, datasets):
    for name in ("xor-planner", "xor-planner-b"):
        for e in datasets[name].heldout[:20]:
            first = tok(e.answer, add_special_tokens=False)["input_ids"][0]
            assert tok.convert_ids_to_tokens(first) == f"{planners.BAR[e.plan['v']] // 4}{planners.BAR[e.plan['h']] // 4}"


def test_splits_are_by_prompt_and_shared_within_a_family(datasets):
    for name, data in datasets.items():
        held = {e.item.text for e in data.heldout}
        train = {e.item.text for e in data.training_examples(3000, seed=0)}
        assert held and not held & train, name
        assert len({e.item.id for e in data.heldout}) == len(data.heldout)
    ids = lambda n: [e.item.id for e in datasets[n].heldout]  # noqa: E731
    assert ids("xor-planner") == ids("xor-planner-b") == ids("random-planner")
    assert ids("tracker") == ids("fixed-plan")


def test_planner_bits_are_xors_independent_of_single_attributes_and_of_each_other(datasets):
    a, b = datasets["xor-planner"].heldout, datasets["xor-planner-b"].heldout
    for ea, eb in zip(a, b):
        A, B, C, D = (ea.plan[k] for k in "ABCD")
        assert (ea.plan["v"], ea.plan["h"]) == (A ^ B, B ^ C)
        assert (eb.plan["v"], eb.plan["h"]) == (A ^ D, C ^ D)
    bits = {f"{n}.{k}": np.array([e.plan[k] for e in ex]) for n, ex in (("a", a), ("b", b)) for k in ("v", "h")}
    attrs = {k: np.array([e.plan[k] for e in a]) for k in "ABCD"}
    for name, x in bits.items():
        for attr, y in attrs.items():  # balanced held-out set: no linear trace of any single attribute
            assert abs(np.corrcoef(x, y)[0, 1]) < 1e-9, (name, attr)
    for own in ("a.v", "a.h"):
        for other in ("b.v", "b.h"):  # each bit of one planner is independent of each bit of the other
            assert abs(np.corrcoef(bits[own], bits[other])[0, 1]) < 1e-9, (own, other)


def test_planner_attributes_never_share_a_bigram(datasets):
    """No word pair holds class-revealing words of two attributes, so TF-IDF 1-2 grams see each attribute alone."""
    reveals: dict[str, str] = {}  # word -> attribute whose class it gives away (it occurs in one class only)
    for attr, (zero, one) in (("A", planners.COLOURS), ("B", planners.TIMES), ("C", planners.PLACES)):
        w0 = {w for ph in zero for w in ph.split()}
        w1 = {w for ph in one for w in ph.split()}
        for w in w0 ^ w1:
            reveals[w] = attr
    for e in datasets["xor-planner"].heldout:
        toks = e.item.text.replace(",", "").split()
        assert {reveals[t] for t in toks if t in reveals} == {"A", "B", "C"}
        for w1, w2 in zip(toks, toks[1:]):
            assert not (w1 in reveals and w2 in reveals and reveals[w1] != reveals[w2]), (w1, w2)


def test_tracker_targets_the_first_uncovered_slot_and_fixed_plan_one_slot_per_statement():
    rng = np.random.default_rng(0)
    kinds = {"exact": 0, "shift": 0, "outside": 0, "redo": 0}
    for region, s in (("the left half", 6), ("the bottom-right quarter", 6), ("the top half", 12)):
        todo, reg = tracker.slots(region, s), tracker.region_mask(region)
        for _ in range(150):
            squares = tracker.tracker_squares(region, s, rng)
            painted = np.zeros((24, 24), bool)
            previous = None
            for r, c in squares:
                k = tracker.first_uncovered(painted, todo, s)
                assert k is not None  # nothing is written once every slot is covered
                sr, sc = todo[k]
                kinds["redo"] += previous == k
                if (r, c) == (sr, sc):
                    kinds["exact"] += 1
                elif (r == sr and 0 < abs(c - sc) <= 2) or (c == sc and 0 < abs(r - sr) <= 2):
                    kinds["shift"] += 1
                else:
                    assert not tracker.square(r, c, s)[reg].any()
                    kinds["outside"] += 1
                painted |= tracker.square(r, c, s)
                previous = k
            assert tracker.first_uncovered(painted, todo, s) is None
            fixed = tracker.fixed_squares(region, s, rng)
            assert len(fixed) == len(todo)
            assert all(abs(r - sr) + abs(c - sc) <= 2 or not tracker.square(r, c, s)[reg].any()
                       for (r, c), (sr, sc) in zip(fixed, todo))
    assert min(kinds.values()) > 20, kinds
    assert tracker.tracker_squares("the left half", 6, None) == tracker.slots("the left half", 6)


def test_translator_references_score_their_own_program_perfectly(datasets):
    from bench.sandbox.runtime import execute
    from bench.translation.piou import reference_geometry, score_result
    from bench.translation.references import Reference

    data = datasets["translator"]
    refs = data.extra["references.jsonl"]
    assert [r["id"] for r in refs] == [e.item.id for e in data.heldout]
    for e, row in list(zip(data.heldout, refs))[:40]:
        rg = reference_geometry(Reference.from_json(json.loads(json.dumps(row))))
        assert score_result(execute(e.answer), rg).piou == pytest.approx(1.0)


# --------------------------------------------------------------------------- training


def test_training_is_deterministic_and_seeded(tmp_path, datasets):
    from interp.organisms.build import train_organism

    data = datasets["xor-planner"]
    a = train_organism("xor-planner", data, TINY, tmp_path / "a", 7, "test", evaluate_heldout=False)
    b = train_organism("xor-planner", data, TINY, tmp_path / "b", 7, "test", evaluate_heldout=False)
    c = train_organism("xor-planner", data, TINY, tmp_path / "c", 8, "test", evaluate_heldout=False)
    assert a["weights_sha256"] == b["weights_sha256"] and a["data"]["sha256"] == b["data"]["sha256"]
    assert c["weights_sha256"] != a["weights_sha256"] and c["data"]["sha256"] != a["data"]["sha256"]
    assert a["loss_curve"] == b["loss_curve"]
    rec = json.loads((tmp_path / "a" / "training.json").read_text())
    assert rec["seed"] == 7 and rec["config"]["steps"] == TINY.steps and rec["code_version"] == "test"
    assert load_prompts(tmp_path / "a" / "prompts.jsonl")[0].id == data.heldout[0].item.id


def test_a_killed_build_leaves_nothing_that_looks_finished(tmp_path, datasets):
    from interp.organisms.build import train_organism

    def die(step, loss):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_organism("tracker", datasets["tracker"], TINY, tmp_path / "m", 0, "test", progress=die)
    assert list(tmp_path.iterdir()) == []


def test_a_trained_folder_loads_in_the_runtime_as_a_chat_model(tmp_path, datasets):
    from interp.organisms.build import train_organism
    from interp.runtime import Runtime, Sampling, StopRule

    train_organism("translator", datasets["translator"], TINY, tmp_path / "m", 0, "test", evaluate_heldout=False)
    rt = Runtime.from_folder(tmp_path / "m", name="organism:test")
    assert rt.info.chat and rt.tokenizer.convert_tokens_to_ids("<|end|>") in rt.stop_ids
    b = build(datasets["translator"].heldout[0].item, Protocol("auto"), rt.tokenizer, chat=rt.info.chat)
    assert b.protocol == "zero-shot"
    g = rt.generate([b.tokens], [Sampling(0.7, 1)], StopRule(max_new_tokens=8))[0]
    assert len(g.tokens) <= 8
    refs = [json.loads(x) for x in (tmp_path / "m" / "references.jsonl").read_text().splitlines()]
    assert len(refs) == len(datasets["translator"].heldout)


# --------------------------------------------------------------------------- names and the cache


def test_organism_names_resolve_and_bad_ones_say_what_to_do():
    from interp.models import ModelError, resolve
    from interp.organisms import parse

    assert resolve("organism:tracker") == ("organism", None)
    assert parse("organism:tracker@3") == ("tracker", 3)
    with pytest.raises(ModelError, match="unknown organism"):
        resolve("organism:nope")
    with pytest.raises(ModelError, match="unknown organism"):
        resolve("organism:tracker@x")


def test_first_use_builds_into_the_cache_once(tmp_path, monkeypatch):
    import interp.organisms as org
    from interp.organisms import zoo

    monkeypatch.setenv("AMBENCH_CACHE", str(tmp_path))
    spec = zoo.ORGANISMS["fixed-plan"]
    monkeypatch.setitem(zoo.ORGANISMS, "fixed-plan", replace(spec, config=TINY))
    calls = []
    real = org.build_folder

    def counting(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(org, "build_folder", counting)
    first = org.folder_for("organism:fixed-plan@5")
    again = org.folder_for("organism:fixed-plan@5")
    assert first == again and len(calls) == 1
    assert first.parent == tmp_path / "models" and first.name == f"organism-fixed-plan-s5-{code_version('fixed-plan')}"
    assert (first / "model.safetensors").is_file() and not list(first.parent.glob("*.partial-*"))


def test_committed_weights_were_built_by_this_code():
    """A changed generator, tokenizer or training loop must come with retrained weights (scripts/train_organisms.py)."""
    from interp.organisms import WEIGHTS, record
    from interp.organisms.build import sha256_file

    for name in ORGANISMS:
        rec = record(WEIGHTS / name)
        assert rec is not None, f"no committed weights for {name}"
        assert rec["code_version"] == code_version(name), f"{name}: committed weights are stale; retrain them"
        assert rec["weights_sha256"] == sha256_file(WEIGHTS / name / "model.safetensors")
