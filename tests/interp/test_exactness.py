"""Issue 15's failures, each reproduced on a tiny model: default loading, windows, kernels, remote code, placement."""

from __future__ import annotations

import builtins

import numpy as np
import pytest
import torch

from hooks.steer import add_direction
from interp.models import ModelError
from interp.runtime import Runtime, Sampling, StopRule
from tests.interp.archs import WINDOW, build_arch

TEXT = "Draw the flag of Germany. A cat sitting on a mat under a light blue sky, please, on a grid."
RULE = StopRule(max_new_tokens=16, eos=False, fence=False)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: a second thread only costs its wake-ups
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def arch_folder(tmp_path_factory):
    built: dict[str, object] = {}

    def get(arch):
        if arch not in built:
            built[arch] = build_arch(arch, tmp_path_factory.mktemp(arch) / "model")
        return built[arch]

    return get


def test_gemma2_loads_by_default_with_the_kernel_it_supports(arch_folder):
    rt = Runtime.from_folder(arch_folder("gemma2"))  # transformers refuses sdpa for Gemma 2
    assert rt.info.architecture == "Gemma2ForCausalLM" and rt.info.attention == "eager"
    assert "no sdpa" in rt.info.attention_note
    toks = rt.tokenizer(TEXT)["input_ids"]
    assert len(rt.generate([toks], [Sampling()], RULE)[0].tokens) == 16


def test_an_explicit_kernel_the_model_lacks_is_one_clear_error(arch_folder):
    with pytest.raises(ModelError, match="cannot load .*Gemma2ForCausalLM.*does not support an attention implementation"):
        Runtime.from_folder(arch_folder("gemma2"), attention="sdpa")


@pytest.mark.parametrize("arch", ["gemma3", "mistral", "gemma2"])
def test_continuations_on_a_sliding_window_model_equal_generating_alone(arch, arch_folder):
    rt = Runtime.from_folder(arch_folder(arch))
    toks = rt.tokenizer(TEXT)["input_ids"]
    prefix = toks[:2 * WINDOW + 4]  # longer than the window, so a window that counts padding shows
    suffixes = [toks[20:21], toks[20:24], toks[20:27]]
    samp = [Sampling(), Sampling(), Sampling(1.0, 7)]
    shared = rt.continue_batch(prefix, suffixes, samp, RULE)
    for sfx, s, g in zip(suffixes, samp, shared):
        alone = rt.generate([prefix + sfx], [s], RULE)[0]
        assert alone.tokens == g.tokens
        assert np.allclose(alone.entropy, g.entropy, atol=1e-4)


def test_identity_patch_and_zero_steering_are_exact_noops_in_bf16(arch_folder):
    rt = Runtime.from_folder(arch_folder("llama"), dtype=torch.bfloat16)
    toks = rt.tokenizer(TEXT)["input_ids"]
    prefix, suffix = toks[:18], toks[18:22]

    def same(a, b):
        return [g.tokens for g in a] == [g.tokens for g in b] and [g.entropy for g in a] == [g.entropy for g in b]

    base = rt.continue_batch(prefix, [suffix, suffix[:2]], [Sampling(), Sampling(1.0, 5)], RULE)
    for layer in range(rt.info.n_layers):
        ident = rt.continue_batch(prefix, [suffix, suffix[:2]], [Sampling(), Sampling(1.0, 5)], RULE,
                                  prefill_hooks=[(f"blocks.{layer}.hook_resid_pre", lambda a, hook: a)])
        assert same(base, ident)  # tokens and entropies bit for bit
    plain = rt.generate([toks, toks[:9]], [Sampling(), Sampling(1.0, 2)], RULE)
    zero = rt.generate([toks, toks[:9]], [Sampling(), Sampling(1.0, 2)], RULE,
                       hooks=[("blocks.1.hook_resid_pre", add_direction(np.zeros(rt.info.d_model)))])
    assert same(plain, zero)


def test_remote_code_needs_the_explicit_flag_and_never_prompts(arch_folder, monkeypatch):
    folder = arch_folder("custom")

    def no_prompt(*a, **k):
        raise AssertionError("the loader asked an interactive question")

    monkeypatch.setattr(builtins, "input", no_prompt)
    with pytest.raises(ModelError, match=r"needs its own modeling code .*pass --trust-remote-code"):
        Runtime.from_folder(folder)
    rt = Runtime.from_folder(folder, trust_remote_code=True)
    assert rt.info.trust_remote_code and rt.info.architecture == "TinyGLMForCausalLM"
    assert rt.sites.blocks_name == "transformer.encoder.layers" and rt.sites.norm_name == "transformer.encoder.final_layernorm"
    with pytest.raises(ModelError, match="TransformerBridge cannot adapt TinyGLMForCausalLM"):
        rt.bridge  # noqa: B018


def test_weights_load_straight_onto_the_device(arch_folder, monkeypatch):
    """No load-then-move: `from_pretrained` places the weights (device_map), nothing calls `.to` on the model."""
    from transformers import PreTrainedModel

    moved = []
    original = torch.nn.Module.to

    def spy(self, *a, **k):
        if isinstance(self, PreTrainedModel):
            moved.append(type(self).__name__)
        return original(self, *a, **k)

    monkeypatch.setattr(torch.nn.Module, "to", spy)
    rt = Runtime.from_folder(arch_folder("llama"))
    assert moved == [] and rt.info.device_map == {"": "cpu"} and rt.info.device == "cpu"


def test_device_maps_on_cpu_give_the_same_model(arch_folder):
    folder = arch_folder("llama")
    ref = Runtime.from_folder(folder)
    rt_tokens = ref.tokenizer(TEXT)["input_ids"]
    want = ref.generate([rt_tokens], [Sampling()], RULE)[0].tokens
    split = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "cpu", "model.norm": "cpu",
             "model.rotary_emb": "cpu", "lm_head": "cpu"}
    for device_map in ("auto", split):
        rt = Runtime.from_folder(folder, device_map=device_map)
        assert rt.info.device_map == {"": "cpu"}  # the placement that resulted: one device here
        toks = rt.generate([rt_tokens], [Sampling()], RULE, hooks=[("blocks.1.hook_resid_pre", lambda a, hook: a)])[0].tokens
        assert toks == want


def test_quantized_loading_is_explicit_and_its_errors_are_clear(arch_folder):
    import importlib.util

    folder = arch_folder("llama")
    with pytest.raises(ModelError, match="unknown quantization 'int3'"):
        Runtime.from_folder(folder, quantize="int3")
    if importlib.util.find_spec("bitsandbytes") is None:
        with pytest.raises(ModelError, match="needs bitsandbytes"):
            Runtime.from_folder(folder, quantize="8bit")
    else:  # pragma: no cover - only where bitsandbytes is installed
        rt = Runtime.from_folder(folder, quantize="8bit")
        assert rt.info.quantization == "8bit"


def test_bf16_on_a_cpu_whose_sdpa_kernel_cannot_run_it_loads_eager_and_says_so(arch_folder, monkeypatch):
    """Issue 29: on an Intel CPU with AMX, torch 2.13 under ATEN_CPU_CAPABILITY=default raises "pack_vnni2 is only
    supported when avx512 is supported" from its bfloat16 flash-attention kernel, and every bf16 load failed at its
    first prompt. This machine's sdpa runs bf16, so the failure is emulated: sdpa raises torch's error for bfloat16
    (what that CPU does); the runtime must load eager, record why, and generate and capture as usual."""
    from interp.runtime import load

    real = torch.nn.functional.scaled_dot_product_attention

    def amx_at_default(q, *a, **k):
        if q.dtype == torch.bfloat16:
            raise RuntimeError("pack_vnni2 is only supported when avx512 is supported")
        return real(q, *a, **k)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", amx_at_default)
    monkeypatch.setattr(load, "_SDPA_RUNS", {}, raising=False)
    rt = Runtime.from_folder(arch_folder("llama"), dtype=torch.bfloat16)
    assert rt.info.attention == "eager" and "cannot run bfloat16" in rt.info.attention_note
    assert "pack_vnni2" in rt.info.attention_note and rt.info.attention_note.endswith("runs eager")
    toks = rt.tokenizer(TEXT)["input_ids"]
    assert len(rt.generate([toks], [Sampling()], RULE)[0].tokens) == 16
    assert torch.isfinite(rt.capture([toks], [[0, len(toks) - 1]]).float()).all()
    # float32 never asks: its sdpa is untouched
    assert Runtime.from_folder(arch_folder("llama")).info.attention == "sdpa"
    monkeypatch.setattr(load, "_SDPA_RUNS", {}, raising=False)
    assert load.cpu_sdpa_failure(torch.float32) == "" and load.cpu_sdpa_failure(torch.bfloat16).startswith("PyTorch")


def test_bf16_loads_with_sdpa_where_the_cpu_runs_it(arch_folder, monkeypatch):
    from interp.runtime import load

    monkeypatch.setattr(load, "_SDPA_RUNS", {}, raising=False)
    if load.cpu_sdpa_failure(torch.bfloat16):
        pytest.skip(f"this CPU's sdpa cannot run bfloat16: {load.cpu_sdpa_failure(torch.bfloat16)}")
    rt = Runtime.from_folder(arch_folder("llama"), dtype=torch.bfloat16)
    assert rt.info.attention == "sdpa" and rt.info.attention_note == ""
