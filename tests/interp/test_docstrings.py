"""Every public call of the runtime names each of its arguments in its docstring and carries an example that runs
(issue 40: 20 of 26 calls had no example and 19 left an argument undescribed). The examples run here, in order, on
the xor-planner organism with the names the docs use (`rt`, `text`, `tokens`, `clean`, `corrupt`, `logit_diff`, the
many-pair `corrupts`, `cleans`, `metrics`, `templates`, a direction `v`)."""

from __future__ import annotations

import inspect
import re
import textwrap

import numpy as np
import pytest

from hooks.steer import add_direction
from interp.pair_effects import pair_inference
from interp.runtime import PlainPrompt, Runtime, Sampling, StopRule, plain_prompt
from interp.runtime.patching import PairScan, Scan
from interp.runtime.steering import dose_response, mean_interval, plot_dose_response

#: the public calls: every public Runtime method and property, and the module-level functions and classes
CALLS = ([getattr(Runtime, n) for n in dir(Runtime) if not n.startswith("_") and callable(getattr(Runtime, n))]
         + [Runtime.bridge, plain_prompt, add_direction, dose_response, plot_dose_response, mean_interval, pair_inference,
            Scan, PairScan, Sampling, StopRule.free_text])


def _name(call) -> str:
    return getattr(call, "__qualname__", None) or getattr(getattr(call, "fget", None), "__qualname__", "bridge")


def _doc(call) -> str:
    return inspect.getdoc(call.fget if isinstance(call, property) else call) or ""


def example(call) -> str:
    """The indented block after `Example::` in the docstring, dedented."""
    doc = _doc(call)
    m = re.search(r"Example::\n\n((?:[ \t]+.*\n?|\n)+)", doc + "\n")
    return textwrap.dedent(m.group(1)).strip() if m else ""


def test_there_are_the_public_calls_we_think():
    assert len(CALLS) == 29  # 18 Runtime methods, its bridge, 10 module-level calls and classes


@pytest.mark.parametrize("call", CALLS, ids=_name)
def test_every_argument_is_described_and_there_is_an_example(call):
    fn = call.fget if isinstance(call, property) else call
    doc = _doc(call)
    params = [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")] if not isinstance(fn, type) else []
    missing = [p for p in params if not re.search(rf"\b{p}\b", doc)]
    assert not missing, f"{_name(call)}: arguments not described: {missing}"
    assert example(call), f"{_name(call)}: no Example:: block"


@pytest.fixture(scope="module")
def names():
    rt = Runtime.load("organism:xor-planner", device="cpu")
    text = "a pink kite flies at noon by the lake in the snow"
    tokens = rt.tokenizer(text)["input_ids"]
    clean = tokens
    corrupt = rt.tokenizer(text.replace("pink", "teal"))["input_ids"]
    a, b = rt.tokenizer.convert_tokens_to_ids("1"), rt.tokenizer.convert_tokens_to_ids("4")

    def logit_diff(logits):
        return logits[:, -1, a] - logits[:, -1, b]

    texts = [text.replace("kite", noun) for noun in ("kite", "bird", "flag", "kite", "bird", "flag")]
    texts = [t.replace("noon", "dawn") if i % 2 else t for i, t in enumerate(texts)]
    cleans = [rt.tokenizer(t)["input_ids"] for t in texts]
    corrupts = [rt.tokenizer(t.replace("pink", "teal"))["input_ids"] for t in texts]
    return {"rt": rt, "Runtime": Runtime, "text": text, "tokens": tokens, "clean": clean, "corrupt": corrupt,
            "logit_diff": logit_diff, "cleans": cleans, "corrupts": corrupts, "metrics": [logit_diff] * len(cleans),
            "templates": [t.split()[2] for t in texts], "v": np.random.default_rng(0).normal(size=rt.info.d_model),
            "Sampling": Sampling, "StopRule": StopRule, "plain_prompt": plain_prompt, "PlainPrompt": PlainPrompt,
            "add_direction": add_direction, "dose_response": dose_response, "plot_dose_response": plot_dose_response,
            "mean_interval": mean_interval, "pair_inference": pair_inference, "np": np}


@pytest.mark.parametrize("call", CALLS, ids=_name)
def test_the_example_runs(call, names):
    code = example(call)
    assert code
    exec(compile(code, f"<example of {_name(call)}>", "exec"), dict(names))
