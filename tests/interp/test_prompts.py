"""Prompt protocols, positions and prompt files."""

import json

import pytest

from interp.prompts import (EXAMPLES, POSITIONS, PromptError, PromptItem, Protocol, build, examples_for, load_prompts,
                            system_prompt, translation_items)

ITEM = PromptItem("g", "layout", "Draw the flag of Germany, please.", "the flag of Germany")


def _decode_at(tok, built, name):
    return tok.decode([built.tokens[built.positions[name]]])


@pytest.mark.parametrize("proto", [Protocol("zero-shot"), Protocol("few-shot", 2), Protocol("completion", 1)])
def test_positions_on_the_tiny_tokenizer(tiny, proto):
    tok = tiny.tokenizer
    b = build(ITEM, proto, tok)
    p = b.positions
    assert set(p) == set(POSITIONS) and p["subject"] < p["turn"] < p["last"] == len(b.tokens) - 1
    # the subject token ends the phrase: decoding up to it ends with "Germany", up to turn ends with "please."
    assert tok.decode(b.tokens[: p["subject"] + 1]).endswith("Germany")
    assert tok.decode(b.tokens[: p["turn"] + 1]).endswith("please.")
    assert b.open_fence == (proto.name == "completion")
    assert b.text.endswith("<|im_start|>assistant\n") if proto.name != "completion" else b.text.endswith("```python\n")


def test_auto_protocol_and_errors(tiny):
    assert Protocol("auto").resolve(True).name == "zero-shot"
    assert Protocol("auto").resolve(False).name == "completion"
    with pytest.raises(PromptError, match="needs a chat template"):
        Protocol("few-shot").resolve(False)
    with pytest.raises(PromptError, match="unknown protocol"):
        Protocol("two-shot")
    with pytest.raises(PromptError, match="only 4 worked examples"):
        examples_for("layout", 9)
    assert build(ITEM, Protocol("zero-shot"), tiny.tokenizer).protocol == "zero-shot"
    assert build(ITEM, Protocol("few-shot", 3), tiny.tokenizer).protocol == "few-shot-3"


def test_few_shot_examples_come_first_by_task_and_render_valid_code():
    from bench.sandbox.runtime import execute

    assert [e.task for e in examples_for("translation", 2)] == ["translation", "translation"]
    for e in EXAMPLES:
        assert execute(e.code).outcome == "ok"


def test_examples_are_not_evaluated_prompts():
    from interp.prompts import layout_items

    evaluated = {it.text for it in translation_items()} | {it.text for it in layout_items()} | {it.subject for it in layout_items()}
    for e in EXAMPLES:
        assert e.text not in evaluated
        assert not any(e.text in t or (t and t in e.text) for t in evaluated)


def test_system_prompt_states_the_rules():
    s = system_prompt()
    for needle in ("24x24", "(row, column)", "top-left", "fill(", "no other imports", "no print", "navy", "'#rrggbb'"):
        assert needle in s


def test_translation_items_have_the_shape_list_as_subject():
    items = translation_items(["s000"])
    assert items[0].subject.startswith("1. ") and items[0].text.endswith(items[0].subject)


def test_prompt_file_errors(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"id": "x", "task": "layout", "text": "Draw a cat.", "subject": "a cat"}) + "\n")
    assert load_prompts(p)[0].subject_span == (5, 10)
    for bad, msg in [
        ("{oops", "not JSON"),
        (json.dumps({"id": "x"}), "needs at least 'id' and 'text'"),
        (json.dumps({"id": "x", "text": "t"}), "no 'task'"),
        (json.dumps({"id": "x", "text": "t", "task": "poetry"}), "is not one of"),
        (json.dumps({"id": "x", "text": "Draw a cat.", "task": "layout", "subject": "a dog"}), "not part of its text"),
        (json.dumps({"id": "x", "text": "t", "task": "layout"}) + "\n" + json.dumps({"id": "x", "text": "u", "task": "layout"}), "duplicate layout id"),
        ("", "no prompts"),
    ]:
        p.write_text(bad + "\n")
        with pytest.raises(PromptError, match=msg):
            load_prompts(p)
    with pytest.raises(PromptError, match="does not exist"):
        load_prompts(tmp_path / "none.jsonl")
