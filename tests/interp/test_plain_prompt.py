"""The plain-prompt path (interp/runtime/capture.py): any text, positions named by a substring or a token index,
in the raw text or inside the chat template, refused in one sentence when absent; the free-text stop preset."""

import pytest

from interp.runtime import FREE_TEXT, Generation, StopRule, plain_prompt
from interp.runtime.generation import check_stop

TEXT = "Draw the flag of Germany. A cat sitting on a mat."


def _covers(tok, p, index, sub):
    """The token at `index` is the one where `sub` ends: the text up to it holds sub, the text before it does not."""
    upto = tok.decode(p.tokens[: index + 1])
    before = tok.decode(p.tokens[:index])
    return sub in upto and sub not in before


def test_substring_and_index_positions(tiny):
    tok = tiny.tokenizer
    p = plain_prompt(tok, TEXT, {"flag": "flag", "cat": "A cat", "first": 0, "second_last": -2})
    assert p.tokens == tuple(tok(TEXT)["input_ids"]) and p.text == TEXT
    assert _covers(tok, p, p.positions["flag"], "flag") and _covers(tok, p, p.positions["cat"], "A cat")
    assert p.positions["first"] == 0 and p.positions["second_last"] == len(p.tokens) - 2
    assert p.positions["last"] == len(p.tokens) - 1
    _, cache = tiny.run_with_cache(p.tokens, names=["blocks.1.hook_resid_post"], positions=list(p.positions.values()))
    assert cache["blocks.1.hook_resid_post"].shape == (1, 5, tiny.info.d_model)


def test_chat_positions_are_in_the_users_text(tiny):
    tok = tiny.tokenizer
    p = plain_prompt(tok, "Draw the flag of Germany.", {"flag": "flag"}, chat=True, system="You write short Python programs.")
    assert p.text.startswith("<|im_start|>system") and p.text.endswith("<|im_start|>assistant\n")
    assert _covers(tok, p, p.positions["flag"], "flag")
    assert tok.decode(p.tokens[p.positions["last"]:]) == "\n"  # the template's final token
    # "system" is in the template, not in the user's text: refused, never a template token
    with pytest.raises(ValueError, match="'system' is not in the prompt"):
        plain_prompt(tok, "Draw the flag.", {"s": "system"}, chat=True)


def test_bad_positions_are_one_sentence(tiny):
    with pytest.raises(ValueError, match="'dog' is not in the prompt"):
        plain_prompt(tiny.tokenizer, TEXT, {"dog": "dog"})
    with pytest.raises(ValueError, match="out of range"):
        plain_prompt(tiny.tokenizer, TEXT, {"far": 999})
    with pytest.raises(ValueError, match="a substring of the prompt or a token index"):
        plain_prompt(tiny.tokenizer, TEXT, {"x": 1.5})
    with pytest.raises(ValueError, match="non-empty text"):
        plain_prompt(tiny.tokenizer, "")


def test_free_text_does_not_stop_at_a_code_fence(tiny):
    text = "Here:\n```python\nx = 1\n```\nand more words"
    toks = tiny.tokenizer(text, add_special_tokens=False)["input_ids"]
    fenced, free = Generation(tokens=list(toks)), Generation(tokens=list(toks))
    assert check_stop(tiny, fenced, toks[-1], StopRule())  # the canvas default cuts at the closing fence
    assert fenced.stop == "fence" and fenced.text.endswith("```")
    assert not check_stop(tiny, free, toks[-1], FREE_TEXT) and free.text == text
    assert StopRule.free_text(32, ("\n\n",)) == StopRule(max_new_tokens=32, eos=True, fence=False, strings=("\n\n",))


def test_a_substring_names_its_whole_span_as_well_as_its_last_token(tiny):
    """Issue 40: `positions` names a multi-token substring by its last token only ("21" -> the ones digit); `spans`
    names every token of it, and decoding the span gives the substring back."""
    tok = tiny.tokenizer
    text = "A red ball at row 21 and a flag of Germany."
    p = plain_prompt(tok, text, {"row": "21", "flag": "a flag of Germany", "first": 0})
    for name, sub in (("row", "21"), ("flag", "a flag of Germany")):
        span = p.spans[name]
        assert span[-1] == p.positions[name] and list(span) == list(range(span[0], span[-1] + 1))
        assert tok.decode(p.tokens[span[0]: span[-1] + 1]).strip() == sub
    assert len(p.spans["flag"]) > 1 and p.spans["first"] == (0,) and p.spans["last"] == (len(p.tokens) - 1,)
