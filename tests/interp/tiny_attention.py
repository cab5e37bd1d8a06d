"""A tiny Llama whose layer-0 attention is set by hand: every query puts weight exp(score) on the tokens
of chosen ids and 1 on every other token, so the attention focus on those tokens has a closed form."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from tests.interp.tiny import CORPUS, build_tokenizer

#: requests whose spatial words the tokenizer keeps as whole tokens (so a word is one token of its own)
SPATIAL_CORPUS = ["Draw a red ball to the left of a blue box.", "Draw a small circle above a large square.",
                  "Draw a triangle below a star.", "Draw a kite to the upper right of a child."] * 6
D_MODEL, HEADS, KV_HEADS = 32, 4, 2
HEAD_DIM = D_MODEL // HEADS
ROPE_THETA = 1e10  #: the slowest rotary pair turns by < 1e-4 rad over 2,000 positions: scores do not depend on distance
EMBED = 10.0  #: the marked tokens' embedding (on dimension 0 only)


def tokenizer_for(folder: Path):
    return build_tokenizer(folder, corpus=CORPUS + SPATIAL_CORPUS, vocab_size=600)


def build_focused(folder: Path, words: Sequence[str], score: float, n_layers: int = 2, seed: int = 0) -> Path:
    """The model folder. Layer 0: q = a constant bias, k reads embedding dimension 0, which only the tokens
    of `words` (their ids after a space) have, so a query's score is `score` on those tokens and 0 on all
    others (exactly, up to the RMS norm's epsilon and the negligible rotation). `score` 0 is uniform
    attention (the broken variant: no focus)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fast = tokenizer_for(folder)
    marked = marked_ids(fast, words)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=D_MODEL, intermediate_size=2 * D_MODEL, num_hidden_layers=n_layers,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=4096,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                      tie_word_embeddings=False, attention_bias=True, rope_theta=ROPE_THETA)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb[:, 0] = 0.0
        for i in marked:
            emb[i] = 0.0
            emb[i, 0] = EMBED
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight.zero_()
        attn.q_proj.bias.zero_()
        attn.k_proj.weight.zero_()
        attn.k_proj.bias.zero_()
        slow = HEAD_DIM // 2 - 1  # the rotary pair that turns slowest: (slow, slow + HEAD_DIM / 2)
        normed = EMBED / math.sqrt(EMBED ** 2 / D_MODEL + cfg.rms_norm_eps)  # embedding dimension 0 after the RMS norm
        for h in range(HEADS):
            attn.q_proj.bias[h * HEAD_DIM + slow] = 1.0
        for h in range(KV_HEADS):
            attn.k_proj.weight[h * HEAD_DIM + slow, 0] = score * math.sqrt(HEAD_DIM) / normed
    model.save_pretrained(folder)
    return folder


def marked_ids(tok, words: Sequence[str]) -> set[int]:
    """The token ids of the words as they occur after a space (each must be one token)."""
    out = set()
    for w in words:
        ids = tok(" " + w, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise ValueError(f"{w!r} is {len(ids)} tokens in the test tokenizer; add it to SPATIAL_CORPUS")
        out.add(ids[0])
    return out
