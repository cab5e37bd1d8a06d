"""Issue 40's bad-input walk over every public call of the runtime: each bad input is one sentence (ValueError or
TypeError naming the argument), never a torch, numpy, Python-internal or bare assertion error, never a silent NaN or
no-op; no hook stays attached and a later forward gives the same logits.

In the probe before the fixes (56 of these cases, on the xor-planner), 26 gave torch's or Python's own errors
(IndexError from the embedding, KeyError from the bridge, a broadcast RuntimeError for a steering vector of the wrong
size, AttributeError from a table, "too many dimensions 'str'") or finished silently with a wrong or NaN result (a NaN steering vector, a temperature of NaN or -1, max_new_tokens 0,
float capture positions truncated, a first-column steering index steering the padding of a shorter row, an empty
scan, a measure returning None or NaN)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from hooks.steer import add_direction
from interp.runtime import Sampling, StopRule, plain_prompt
from interp.runtime.steering import dose_response, plot_dose_response

A = [5, 6, 7, 8]
B = [5, 6, 7, 8, 9, 10]
R = "blocks.1.hook_resid_pre"


def m(lg):
    return lg[:, -1, 5]


def v(rt, k=0):
    return np.ones(rt.info.d_model + k, dtype=np.float32)


CASES = {
    # steering hooks
    "add_direction: vector of the wrong size": (lambda rt: rt.forward(A, hooks=[(R, add_direction(v(rt, 1)))]),
                                                ValueError, "steering vector has 33 entries"),
    "add_direction: NaN vector": (lambda rt: add_direction(np.full(32, np.nan)), ValueError, "NaN or inf"),
    "add_direction: text vector": (lambda rt: add_direction("abc"), TypeError, "must be numbers"),
    "add_direction: 2-D vector": (lambda rt: add_direction(np.ones((2, 32))), ValueError, "must be 1-D"),
    "add_direction: first-column index on rows of two lengths": (
        lambda rt: rt.forward([A, B], hooks=[(R, add_direction(v(rt), [0]))]), ValueError, "padding in the shorter"),
    "add_direction: float positions": (lambda rt: add_direction(v(rt), [1.5]), ValueError, "token indices"),
    "add_direction: unknown mode": (lambda rt: add_direction(v(rt), "decode"), ValueError, "positions must be one of"),
    # generation
    "generate: prompts None": (lambda rt: rt.generate(None, [Sampling()]), TypeError, "prompts must be a list"),
    "generate: texts": (lambda rt: rt.generate(["hello"], [Sampling()]), TypeError, "not texts"),
    "generate: a Sampling short": (lambda rt: rt.generate([A, B], [Sampling()]), ValueError, "2 prompts and 1 Sampling"),
    "generate: not a Sampling": (lambda rt: rt.generate([A], [0.5]), TypeError, "Sampling\\(temperature"),
    "generate: empty prompt": (lambda rt: rt.generate([[]], [Sampling()]), ValueError, "at least one token"),
    "generate: token id outside the vocabulary": (lambda rt: rt.generate([[10 ** 6]], [Sampling()]), ValueError,
                                                  "outside the model's vocabulary"),
    "generate: float token ids": (lambda rt: rt.generate([[1.0, 2.0]], [Sampling()]), TypeError, "token ids \\(ints\\)"),
    "Sampling: temperature NaN": (lambda rt: Sampling(temperature=float("nan")), ValueError, "finite number >= 0"),
    "Sampling: temperature -1": (lambda rt: Sampling(temperature=-1.0), ValueError, "finite number >= 0"),
    "Sampling: float seed": (lambda rt: Sampling(seed=1.5), TypeError, "seed must be an int"),
    "StopRule: max_new_tokens 0": (lambda rt: StopRule.free_text(0), ValueError, "positive integer"),
    "StopRule: max_new_tokens -1": (lambda rt: StopRule(max_new_tokens=-1), ValueError, "positive integer"),
    "StopRule: strings a text": (lambda rt: StopRule(strings="END"), TypeError, "tuple of non-empty"),
    "generate: hook on an unknown name": (lambda rt: rt.generate([A], [Sampling()], hooks=[("blocks.7.x", lambda x, hook: x)]),
                                          ValueError, "no hook point"),
    "continue_batch: prefix None": (lambda rt: rt.continue_batch(None, [B], [Sampling()]), TypeError, "prefix must be"),
    "continue_batch: no suffixes": (lambda rt: rt.continue_batch(A, [], [Sampling()]), ValueError, "one Sampling per suffix"),
    "continue_batch: suffix of texts": (lambda rt: rt.continue_batch(A, ["x"], [Sampling()]), TypeError, "not texts"),
    # capture
    "capture: position out of range": (lambda rt: rt.capture([A], [[99]]), ValueError, "out of range"),
    "capture: layer out of range": (lambda rt: rt.capture([A], [[0]], layers=[99]), ValueError, "out of range"),
    "capture: float positions": (lambda rt: rt.capture([A], [[0.5]]), TypeError, "token indices"),
    "capture: fewer position lists than prompts": (lambda rt: rt.capture([A, B], [[0]]), ValueError, "one list of token"),
    "capture: final site unknown": (lambda rt: rt.capture([A], [[0]], final="x"), ValueError, "final site"),
    "hook_names: layer out of range": (lambda rt: rt.hook_names([99]), ValueError, "out of range"),
    "input_embeddings: token id outside the vocabulary": (lambda rt: rt.input_embeddings([10 ** 6]), ValueError,
                                                         "outside the model's vocabulary"),
    "attention_mass: query out of range": (lambda rt: rt.attention_mass(A, [99], [[0]]), ValueError, "must lie in"),
    # forward and cache
    "run_with_cache: unknown name": (lambda rt: rt.run_with_cache(A, names=["blocks.9.hook_resid_pre"]), ValueError,
                                     "no hook point"),
    "run_with_cache: misspelt name": (lambda rt: rt.run_with_cache(A, names=["blocks.0.hook_resid_pree"]), ValueError,
                                      "did you mean 'blocks.0.hook_resid_pre'"),
    "run_with_cache: names an int": (lambda rt: rt.run_with_cache(A, names=5), TypeError, "names must be"),
    "run_with_cache: empty names": (lambda rt: rt.run_with_cache(A, names=[]), TypeError, "non-empty list"),
    "forward: hook on an unknown name": (lambda rt: rt.forward(A, hooks=[("blocks.0.nope", lambda x, hook: x)]), ValueError,
                                         "no hook point"),
    "forward: grad a text": (lambda rt: rt.forward(A, grad="yes"), TypeError, "grad must be True or False"),
    # patching
    "patch_scan: unknown name": (lambda rt: rt.patch_scan(A, A, m, "blocks.0.nope"), ValueError, "no hook point"),
    "patch_scan: no names": (lambda rt: rt.patch_scan(A, A, m, []), TypeError, "non-empty list"),
    "patch_scan: empty layers": (lambda rt: rt.patch_scan(A, A, m, "blocks.{L}.hook_resid_pre", layers=[]), ValueError,
                                 "no site"),
    "patch_scan: layer out of range": (lambda rt: rt.patch_scan(A, A, m, "blocks.{L}.hook_resid_pre", layers=[9]),
                                       ValueError, "layers must lie in"),
    "patch_scan: metric not a function": (lambda rt: rt.patch_scan(A, A, 5, R), TypeError, "metric must be a function"),
    "patch_scan: head out of range": (lambda rt: rt.patch_scan(A, A, m, "blocks.{L}.attn.hook_z", heads=[9]), ValueError,
                                      "heads must lie in"),
    "patch_scan: batch_size 0": (lambda rt: rt.patch_scan(A, A, m, R, batch_size=0), ValueError, "batch_size"),
    "attribution_scan: position out of range": (lambda rt: rt.attribution_scan(A, A, m, R, positions=[50]), ValueError,
                                                "positions must lie in"),
    "path_scan: receivers None": (lambda rt: rt.path_scan(A, A, m, sender=(0, 0), receivers=None), ValueError,
                                  "receivers must be one of"),
    # steering tables and plots
    "dose_response: alpha NaN": (lambda rt: rt.dose_response([A], R, v(rt), [0, float("nan")], m), ValueError, "finite"),
    "dose_response: direction of the wrong size": (lambda rt: rt.dose_response([A], R, v(rt, 3), [0, 1], m), ValueError,
                                                   "d_model = 32"),
    "dose_response: NaN direction": (lambda rt: rt.dose_response([A], R, np.full(32, np.nan), [0, 1], m), ValueError,
                                     "NaN or inf"),
    "dose_response: unknown name": (lambda rt: rt.dose_response([A], "blocks.9.hook_resid_pre", v(rt), [0, 1], m),
                                    ValueError, "no hook point"),
    "dose_response: first-column index on rows of two lengths": (
        lambda rt: rt.dose_response([A, B], R, v(rt), [0, 1], m, positions=[0]), ValueError, "padding in the shorter"),
    "dose_response: level 2": (lambda rt: rt.dose_response([A], R, v(rt), [0, 1], m, level=2), ValueError, "level"),
    "steering.dose_response: measure returns None": (lambda rt: dose_response(lambda a: None, [0, 1]), TypeError,
                                                     "returned NoneType"),
    "steering.dose_response: measure returns NaN": (lambda rt: dose_response(lambda a: [float("nan"), 1.0], [0, 1]),
                                                    ValueError, "NaN or inf for 1 of 2"),
    "plot_dose_response: not a table": (lambda rt: plot_dose_response("x"), TypeError, "must be the DataFrame"),
    "plot_dose_response: columns missing": (lambda rt: plot_dose_response(pd.DataFrame({"a": [1]})), ValueError,
                                            "lacks the columns"),
    # issue 42: every prompt bounded by the model's context (and the text by a byte cap) before any forward
    "forward: a prompt past the context": (lambda rt: rt.forward([[5] * 3000]), ValueError, "context is 2,048 tokens"),
    "forward: a 10 MB text": (lambda rt: rt.forward("x" * 10_000_000), ValueError, "at most 131,072 bytes"),
    "generate: a prompt past the context": (lambda rt: rt.generate([[5] * 3000], [Sampling()]), ValueError,
                                            "prompts\\[0\\] is 3,000 tokens"),
    "capture: a prompt past the context": (lambda rt: rt.capture([[5] * 3000], [[0]]), ValueError, "context is 2,048"),
    "patch_scan: a 10 MB text": (lambda rt: rt.patch_scan("x" * 10_000_000, "y" * 10_000_000, m, R), ValueError,
                                 "bytes of text"),
    "PromptItem: a 10 MB prompt": (lambda rt: __import__("interp.prompts", fromlist=["PromptItem"]).PromptItem(
        "p", "layout", "x" * 10_000_000), ValueError, "at most 100,000 bytes"),
    # issue 42's outside attack on the bounds
    "continue_batch: the prefix and a suffix past the context together": (
        lambda rt: rt.continue_batch([5] * 1500, [[5] * 1500], [Sampling()], StopRule(max_new_tokens=1)), ValueError,
        "the prefix \\+ suffixes\\[0\\] is 3,000 tokens"),
    "forward: 3 million token ids, refused by their count": (lambda rt: rt.forward([[5] * 3_000_000]), ValueError,
                                                              "inputs\\[0\\] is 3,000,000 tokens"),
    "generate: 3 million token ids, refused by their count": (
        lambda rt: rt.generate([[5] * 3_000_000], [Sampling()]), ValueError, "prompts\\[0\\] is 3,000,000 tokens"),
    "path_scan: a prompt past the context, before the bridge": (
        lambda rt: rt.path_scan([5] * 3000, [6] * 3000, m, sender=(0, 0)), ValueError, "3,000 tokens"),
    "plain_prompt: None": (lambda rt: plain_prompt(rt.tokenizer, None), ValueError, "non-empty text"),
    "plain_prompt: absent substring": (lambda rt: plain_prompt(rt.tokenizer, "abc", {"x": "zzz"}), ValueError,
                                       "not in the prompt"),
    "plain_prompt: float position": (lambda rt: plain_prompt(rt.tokenizer, "abc", {"x": 1.5}), ValueError,
                                     "a substring of the prompt or a token index"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_bad_input_is_one_sentence(tiny, case):
    call, error, words = CASES[case]
    before = tiny.forward(A)
    with pytest.raises((ValueError, TypeError)) as got:
        call(tiny)
    assert got.type is error or issubclass(got.type, error), (case, got.type, got.value)
    assert got.match(words), (case, str(got.value))
    assert "\n" not in str(got.value) and len(str(got.value)) < 400, case  # one sentence
    assert not any(h for mod in tiny.model.modules() for h in (mod._forward_hooks, mod._forward_pre_hooks) if h), case
    assert torch.equal(tiny.forward(A), before), case


def test_generation_stops_at_the_context(tiny):
    """Issue 42's attack: a 2,040-token prompt with 200 new tokens decoded out to 2,240 positions of a 2,048 context.
    A row now stops when its next token would be fed past the context (stop "context")."""
    g = tiny.generate([[5] * 2040], [Sampling()], StopRule(max_new_tokens=200, eos=False, fence=False))[0]
    assert g.stop == "context" and len(g.tokens) == 2048 - 2040 + 1
    short = tiny.generate([[5] * 10], [Sampling()], StopRule(max_new_tokens=5, eos=False, fence=False))[0]
    assert short.stop == "max_tokens" and len(short.tokens) == 5


def test_a_call_whose_logits_would_not_fit_is_refused_before_its_forward(tiny, monkeypatch):
    """Issue 42's attack: 20,000 prompts in one forward (tens of GB of logits on a real vocabulary)."""
    from interp.runtime import forward as fw

    monkeypatch.setattr(fw, "MAX_LOGITS_BYTES", 1 << 20)
    with pytest.raises(ValueError, match="pass fewer or shorter prompts per call"):
        tiny.forward([[5, 6]] * 2000)
    assert tiny.forward([[5, 6]] * 10).shape[0] == 10
