"""A tiny ChatGLM-shaped causal LM that transformers does not know: it loads only with trust_remote_code.

Copied into a model folder whose config.json names it in `auto_map`, like THUDM's original glm-4-9b.
Its module tree follows ChatGLM's (`transformer.embedding.word_embeddings`, `transformer.encoder.layers`
with fused `query_key_value`, `transformer.encoder.final_layernorm`, `transformer.output_layer`), its
blocks return tuples, and it runs eager attention only: everything the runtime must find without an
adapter. It keeps its KV cache in a transformers `DynamicCache`.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast


class TinyGLMConfig(PretrainedConfig):
    model_type = "tinyglm"
    attribute_map = {"num_hidden_layers": "num_layers"}  # what generation utilities read

    def __init__(self, vocab_size: int = 400, hidden_size: int = 32, num_layers: int = 2, num_attention_heads: int = 4,
                 ffn_hidden_size: int = 64, layernorm_epsilon: float = 1e-5, rope_theta: float = 10000.0, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_attention_heads = num_attention_heads
        self.ffn_hidden_size = ffn_hidden_size
        self.layernorm_epsilon = layernorm_epsilon
        self.rope_theta = rope_theta
        super().__init__(**kwargs)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin


class SelfAttention(nn.Module):
    def __init__(self, config: TinyGLMConfig, layer_idx: int):
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.layer_idx = layer_idx
        self.query_key_value = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def forward(self, x, mask, cos, sin, cache):
        b, t, _ = x.shape
        q, k, v = (y.view(b, t, self.heads, self.head_dim).transpose(1, 2) for y in self.query_key_value(x).chunk(3, -1))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        return self.dense((weights @ v).transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, config: TinyGLMConfig):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(config.hidden_size, 2 * config.ffn_hidden_size, bias=False)
        self.dense_4h_to_h = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=False)

    def forward(self, x):
        a, b = self.dense_h_to_4h(x).chunk(2, dim=-1)
        return self.dense_4h_to_h(nn.functional.silu(a) * b)


class GLMBlock(nn.Module):
    def __init__(self, config: TinyGLMConfig, layer_idx: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.layernorm_epsilon)
        self.self_attention = SelfAttention(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.layernorm_epsilon)
        self.mlp = MLP(config)

    def forward(self, hidden_states, mask, cos, sin, cache):
        h = hidden_states + self.self_attention(self.input_layernorm(hidden_states), mask, cos, sin, cache)
        return (h + self.mlp(self.post_attention_layernorm(h)), cache)


class GLMTransformer(nn.Module):
    def __init__(self, config: TinyGLMConfig):
        super().__init__()
        self.layers = nn.ModuleList(GLMBlock(config, i) for i in range(config.num_layers))
        self.final_layernorm = RMSNorm(config.hidden_size, config.layernorm_epsilon)


class Embedding(nn.Module):
    def __init__(self, config: TinyGLMConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)

    def forward(self, ids):
        return self.word_embeddings(ids)


class ChatGLMModel(nn.Module):
    def __init__(self, config: TinyGLMConfig):
        super().__init__()
        self.embedding = Embedding(config)
        self.encoder = GLMTransformer(config)
        self.output_layer = nn.Linear(config.hidden_size, config.vocab_size, bias=False)


class TinyGLMForCausalLM(PreTrainedModel, GenerationMixin):
    config_class = TinyGLMConfig
    base_model_prefix = "transformer"
    _supports_sdpa = False  # eager only, like most remote code: the runtime must fall back to it
    _no_split_modules = ["GLMBlock"]

    def __init__(self, config: TinyGLMConfig):
        super().__init__(config)
        self.transformer = ChatGLMModel(config)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)

    def get_input_embeddings(self):
        return self.transformer.embedding.word_embeddings

    def get_output_embeddings(self):
        return self.transformer.output_layer

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None,
                logits_to_keep=0, output_hidden_states=None, return_dict=True, **kwargs):
        b, t = input_ids.shape
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        if attention_mask is None:
            attention_mask = torch.ones((b, past + t), dtype=torch.long, device=input_ids.device)
        if position_ids is None:
            position_ids = torch.arange(past, past + t, device=input_ids.device)[None].expand(b, -1)
        x = self.transformer.embedding(input_ids)
        # causal + padding mask over absolute cache slots, finite so that all-padding rows stay finite
        q_slot = torch.arange(past, past + t, device=x.device)[:, None]
        k_slot = torch.arange(past + t, device=x.device)[None, :]
        allowed = (k_slot <= q_slot)[None, None] & attention_mask[:, None, None, :].bool()
        mask = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill(~allowed, torch.finfo(x.dtype).min)
        head_dim = self.config.hidden_size // self.config.num_attention_heads
        inv = 1.0 / (self.config.rope_theta ** (torch.arange(0, head_dim, 2, device=x.device).float() / head_dim))
        freqs = position_ids.float()[..., None] * inv
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        hidden = []
        for layer in self.transformer.encoder.layers:
            hidden.append(x)
            x, _ = layer(x, mask, cos, sin, past_key_values if use_cache else None)
        x = self.transformer.encoder.final_layernorm(x)
        hidden.append(x)
        keep = slice(-logits_to_keep, None) if logits_to_keep else slice(None)
        logits = self.transformer.output_layer(x[:, keep])
        return CausalLMOutputWithPast(logits=logits, past_key_values=past_key_values if use_cache else None,
                                      hidden_states=tuple(hidden) if output_hidden_states else None)
