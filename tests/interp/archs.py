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
                  max_position_embeddings=512, **ids)
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
