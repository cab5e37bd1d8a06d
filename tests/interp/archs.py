"""Tiny random models of every architecture the runtime supports, built in code (a second or two each).

Each is a 2-block model with d_model 32 on the tiny BPE tokenizer, its unembedding scaled up so that
greedy paths are not near ties. Sliding-window architectures get a window of `WINDOW` tokens, shorter
than the test prompts, so a window that counts padding shows. `custom` is a ChatGLM-shaped class that
transformers does not know, loaded from the folder's own modeling file (`auto_map`, trust_remote_code).
The paper's eight models map onto these: Qwen2.5-Coder 14B/32B -> qwen2, Gemma 2 9B/27B -> gemma2,
GLM-4 9B -> glm (the -hf checkpoints) or custom (the original remote-code ChatGLM), GLM-4 32B -> glm4,
CodeLlama 34B and Llama 3.1 8B -> llama.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.interp.tiny import build_tokenizer

WINDOW = 8  #: sliding window of the windowed architectures (test prompts are ~20-30 tokens)
REMOTE = Path(__file__).parent / "remote_code" / "modeling_tinyglm.py"

#: architecture -> whether it has sliding-window layers in these configs
WINDOWED = {"mistral", "gemma2", "gemma3", "phi3"}
ARCHS = ("llama", "qwen2", "glm4", "glm", "mistral", "qwen3", "gemma3", "gemma2", "phi3", "olmo2", "gpt_neox", "gpt2",
         "custom")
PAPER_MODELS = {
    "Qwen2.5-Coder 14B/32B": "qwen2", "Gemma 2 9B/27B": "gemma2", "GLM-4 9B (-hf)": "glm",
    "GLM-4 9B (original, remote code)": "custom", "GLM-4 32B": "glm4", "CodeLlama 34B": "llama", "Llama 3.1 8B": "llama",
}


def _config(arch: str, tok: Any) -> tuple[Any, Any]:
    import transformers as tf

    ids = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    common = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=2048, **ids)  # holds the translation prompts (1,213 byte-level tokens)
    if arch == "llama":
        return tf.LlamaConfig(**common), tf.LlamaForCausalLM
    if arch == "qwen2":
        return tf.Qwen2Config(**common), tf.Qwen2ForCausalLM
    if arch == "glm4":
        return tf.Glm4Config(head_dim=8, **common), tf.Glm4ForCausalLM
    if arch == "glm":
        return tf.GlmConfig(head_dim=8, **common), tf.GlmForCausalLM
    if arch == "mistral":
        return tf.MistralConfig(sliding_window=WINDOW, head_dim=8, **common), tf.MistralForCausalLM
    if arch == "qwen3":
        return tf.Qwen3Config(head_dim=8, **common), tf.Qwen3ForCausalLM
    if arch == "gemma3":
        return (tf.Gemma3TextConfig(head_dim=8, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"],
                                    query_pre_attn_scalar=8, **common), tf.Gemma3ForCausalLM)
    if arch == "gemma2":
        return (tf.Gemma2Config(head_dim=8, sliding_window=WINDOW, layer_types=["sliding_attention", "full_attention"],
                                query_pre_attn_scalar=8, **common), tf.Gemma2ForCausalLM)
    if arch == "phi3":
        return tf.Phi3Config(sliding_window=WINDOW, **common), tf.Phi3ForCausalLM
    if arch == "olmo2":
        return tf.Olmo2Config(**common), tf.Olmo2ForCausalLM
    if arch == "gpt_neox":
        return (tf.GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 max_position_embeddings=512, rotary_pct=0.5, **ids), tf.GPTNeoXForCausalLM)
    if arch == "gpt2":
        return tf.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=512, **ids), tf.GPT2LMHeadModel
    raise KeyError(arch)


def build_arch(arch: str, folder: Path, seed: int = 0) -> Path:
    """Save a tiny random model of `arch` (see ARCHS) with the tiny tokenizer into `folder`."""
    import torch

    tok = build_tokenizer(folder, chat=True)
    torch.manual_seed(seed)
    if arch == "custom":
        return _build_custom(folder, tok)
    config, cls = _config(arch, tok)
    model = cls(config)
    with torch.no_grad():  # larger logits than the default init: greedy paths that are not near ties
        model.get_output_embeddings().weight.mul_(8.0)
    model.save_pretrained(folder)
    return folder


def _build_custom(folder: Path, tok: Any) -> Path:
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("modeling_tinyglm_build", REMOTE)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    config = module.TinyGLMConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                  pad_token_id=tok.pad_token_id, architectures=["TinyGLMForCausalLM"])
    model = module.TinyGLMForCausalLM(config)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    model.save_pretrained(folder)
    shutil.copy(REMOTE, folder / "modeling_tinyglm.py")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "modeling_tinyglm.TinyGLMConfig",
                       "AutoModelForCausalLM": "modeling_tinyglm.TinyGLMForCausalLM"}
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return folder


# --------------------------------------------------------------------------- the matrix case (CPU and GPU)

TEXTS = ["Draw the flag of Germany. A cat sitting on a mat under a light blue sky.",
         "You write short Python programs that draw"]
NO_BRIDGE = {"custom"}


def _hf(folder: Path, dtype: Any, attention: str, remote: bool, device: str) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation=attention, device_map={"": device},
                                                trust_remote_code=remote).eval()


def _same(a: Any, b: Any) -> bool:
    return [g.tokens for g in a] == [g.tokens for g in b] and [g.entropy for g in a] == [g.entropy for g in b]


def check_architecture(arch: str, dtype: str, folder: Path, device: str = "cpu", bridge: bool = True) -> dict[str, Any]:
    """Every runtime feature on the tiny `arch` model on `device` (tests/interp/test_architectures.py on the CPU,
    tests/interp/test_cuda.py on a GPU); asserts each one and returns the matrix row."""
    import copy
    import time

    import numpy as np
    import torch

    from hooks.steer import add_direction
    from interp.runtime import Runtime, Sampling, StopRule

    rule = StopRule(max_new_tokens=6, eos=False, fence=False)
    t0 = time.perf_counter()
    tdtype = getattr(torch, dtype)
    remote = arch == "custom"
    rt = Runtime.from_folder(folder, name=arch, device=device, dtype=tdtype, trust_remote_code=remote)
    assert all(p.device.type == torch.device(device).type for p in rt.model.parameters())  # placed where asked
    res: dict[str, Any] = {"arch": arch, "dtype": dtype, "architecture": rt.info.architecture, "attention": rt.info.attention,
                           "window": WINDOW if arch in WINDOWED else None}
    prompts = [rt.tokenizer(t)["input_ids"] for t in TEXTS]
    assert len(prompts[0]) > 2 * WINDOW and len(prompts[0]) != len(prompts[1])
    hf = _hf(folder, tdtype, rt.info.attention, remote, device)
    ids, mask, offsets = rt.pad(prompts)
    pos_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    n = rt.info.n_layers
    res["load"] = True

    # generate == Hugging Face greedy (its own decode loop and cache, sliding-window layers included)
    mine = rt.generate(prompts, [Sampling()] * 2, rule)
    gc = copy.deepcopy(hf.generation_config)
    gc.eos_token_id, gc.max_new_tokens, gc.do_sample, gc.pad_token_id = None, rule.max_new_tokens, False, rt.pad_id
    with torch.inference_mode():
        ref = hf.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
    assert [g.tokens for g in mine] == ref[:, ids.shape[1]:].tolist()
    res["generate"] = True

    # capture == Hugging Face hidden states at the chosen positions
    positions = [[0, len(p) // 2, len(p) - 1] for p in prompts]
    pre = rt.capture(prompts, positions)
    post = rt.capture(prompts, positions, layers=[n], final="post-norm")
    with torch.inference_mode():
        hs = hf(input_ids=ids, attention_mask=mask, position_ids=pos_ids, output_hidden_states=True).hidden_states
        normed = rt.sites.norm(pre[:, n].to(rt.device, tdtype)).float().cpu()
    hs = [h.float().cpu() for h in hs]
    tol = 1e-5 if dtype == "float32" else 1e-2
    err = 0.0
    for i, (off, pos) in enumerate(zip(offsets, positions)):
        at = [off + p for p in pos]
        for layer in range(n):
            err = max(err, (pre[i, layer] - hs[layer][i, at]).abs().max().item())
        err = max(err, (post[i, 0] - hs[n][i, at]).abs().max().item())
        err = max(err, (normed[i] - hs[n][i, at]).abs().max().item())
    assert err <= tol, err
    res["capture"] = True
    res["capture_max_abs_diff"] = err

    # capture with a shared prefix (a few-shot protocol's examples, computed once into a shifted KV cache) == the
    # model's hidden states of each whole prompt; a row with a captured position inside the prefix runs whole
    from interp.runtime.kv import SHARED_PREFIX_MIN, prefix_groups as _prefix_groups

    prefix = (prompts[0] * 8)[:SHARED_PREFIX_MIN + 6]
    rows = [prefix + prompts[1][:k] for k in (2, 5, 9)] + [prefix + prompts[0][:4]]
    spos = [[len(prefix), len(r) - 2, len(r) - 1] for r in rows]
    rows, spos = rows + [prefix + prompts[1][:3]], spos + [[0, 5, len(prefix) + 2]]
    groups = _prefix_groups(rows, spos)
    assert sorted(c for c, _ in groups) == [0, len(prefix)], groups  # the path under test is taken
    shared = rt.capture(rows, spos)
    ids2, mask2, offs2 = rt.pad(rows)
    with torch.inference_mode():
        hs2 = hf(input_ids=ids2, attention_mask=mask2, position_ids=(mask2.cumsum(-1) - 1).clamp(min=0),
                 output_hidden_states=True).hidden_states
    err = 0.0
    for i, (off, pos) in enumerate(zip(offs2, spos)):
        at = [off + p for p in pos]
        for layer in range(n):
            err = max(err, (shared[i, layer] - hs2[layer][i, at].float().cpu()).abs().max().item())
    assert err <= tol, err
    res["capture_shared_prefix"] = True
    res["capture_shared_prefix_max_abs_diff"] = err

    # patch: identity is an exact no-op; layer-0 patch with a donor's activations == continuing the donor
    prefix, donor, target = prompts[0][:20], prompts[0][20:23], prompts[1][:3]
    assert len(prefix) > WINDOW
    base = rt.continue_batch(prefix, [target], [Sampling()], rule)
    ident = rt.continue_batch(prefix, [target], [Sampling()], rule, prefill_hooks=[("blocks.0.hook_resid_pre", lambda a, hook: a)])
    assert _same(base, ident)
    donor_acts = rt.capture([prefix + donor], [[20, 21, 22]], layers=[0])[0, 0]

    def put(act: Any, hook: Any = None) -> Any:
        act[:, -3:, :] = donor_acts.to(act.device, act.dtype)
        return act

    patched = rt.continue_batch(prefix, [target], [Sampling()], rule, prefill_hooks=[("blocks.0.hook_resid_pre", put)])
    as_donor = rt.continue_batch(prefix, [donor], [Sampling()], rule)
    assert patched[0].tokens == as_donor[0].tokens and patched[0].tokens != base[0].tokens
    res["patch"] = True

    # steer: zero vector is an exact no-op; a large vector changes what is generated
    zero = rt.generate(prompts, [Sampling()] * 2, rule, hooks=[("blocks.1.hook_resid_pre", add_direction(np.zeros(rt.info.d_model)))])
    assert _same(mine, zero)
    push = np.random.default_rng(0).standard_normal(rt.info.d_model) * 20.0
    steered = rt.generate(prompts, [Sampling()] * 2, rule, hooks=[("blocks.1.hook_resid_pre", add_direction(push))])
    assert [g.tokens for g in steered] != [g.tokens for g in mine]
    res["steer"] = True

    # continue == generate alone, suffixes of different lengths (padding never inside a window)
    suffixes = [prompts[0][20:21], prompts[0][20:23], prompts[1][:5]]
    # sampled rows in float32 only: a draw compares a seeded uniform with cumulative probabilities, which bf16 rounds to
    # 2^-8, so the shared-prefix and the whole-sequence paths (other sums, same math) take neighbouring tokens where a
    # draw lands near a boundary: gemma3 under ATEN_CPU_CAPABILITY=avx2 did (issue 29). Greedy rows in both dtypes.
    samp = [Sampling(), Sampling(1.0, 3), Sampling(1.0, 4)] if dtype == "float32" else [Sampling()] * 3
    shared = rt.continue_batch(prefix, suffixes, samp, rule)
    for sfx, s, g in zip(suffixes, samp, shared):
        assert rt.generate([prefix + sfx], [s], rule)[0].tokens == g.tokens
    res["continue"] = True

    # the bridge agrees with the forward hooks (float32; eager vs the model's kernel: rounding only)
    if arch in NO_BRIDGE or not bridge:
        res["bridge"] = None
    elif dtype == "float32":
        with rt.via_bridge():
            b_pre = rt.capture(prompts, positions)
            b_patched = rt.continue_batch(prefix, [target], [Sampling()], rule, prefill_hooks=[("blocks.0.hook_resid_pre", put)])
            b_steered = rt.generate(prompts, [Sampling()] * 2, rule, hooks=[("blocks.1.hook_resid_pre", add_direction(push))])
        assert (b_pre - pre).abs().max().item() <= 1e-4
        assert b_patched[0].tokens == patched[0].tokens
        assert [g.tokens for g in b_steered] == [g.tokens for g in steered]
        res["bridge"] = True
    res["seconds"] = round(time.perf_counter() - t0, 2)
    return res
