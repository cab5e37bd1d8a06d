"""Deterministic CPU training of an organism's weights: the data stream, the batches, the model and the loop.

`train_weights(data, cfg, seed)` draws `steps x batch_size` training examples from the organism's data
set with a numpy generator seeded by `seed`, cuts them into batches of similar length (shuffled with
`seed`), initialises a small Llama with `torch.manual_seed(seed)`, and trains it with AdamW (linear
warm-up, cosine decay) on the answer tokens only (the prompt is context, not target). Everything random
is seeded, the batches are fixed before the first step, and torch runs with
`use_deterministic_algorithms(True)` on `cfg.threads` threads (default one), so the same seed on the same
torch build and CPU type gives the same weights bit for bit (a test checks the weights hash).

One thread is also the fast choice on a shared machine: measured on the project's 2-core machine with
other jobs running, a training step of this model took 1.0 s with one thread and 5.5 s with two (OpenMP
threads spin waiting for each other when the cores are taken).

This module, the tokenizer and the data generators decide the weights; `interp.organisms.zoo.code_version`
hashes them. Evaluation and the folder writer live in `interp.organisms.build`.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

import numpy as np

from interp.organisms.data import Dataset, Example
from interp.organisms.tokenizer import ASSISTANT, END, USER, build_tokenizer

IGNORE = -100


@dataclass(frozen=True)
class TrainConfig:
    """The model and the optimisation of one organism."""

    n_layers: int = 4  #: transformer blocks
    d_model: int = 96  #: residual-stream width
    n_heads: int = 4  #: attention heads (key/value heads too: no grouped-query attention)
    d_mlp: int = 256  #: width of the SwiGLU MLP
    max_positions: int = 512  #: longest sequence the rotary embedding is configured for
    steps: int = 1000  #: optimiser steps
    batch_size: int = 32  #: sequences per step
    lr: float = 3e-3  #: peak learning rate
    warmup: int = 50  #: steps of linear warm-up
    min_lr_ratio: float = 0.1  #: the cosine decay ends at lr * min_lr_ratio
    weight_decay: float = 0.01  #: AdamW weight decay
    grad_clip: float = 1.0  #: gradient-norm clip
    threads: int = 1  #: torch CPU threads while training and evaluating (see the module docstring)
    log_every: int = 25  #: steps per point of the recorded loss curve
    eval_batch: int = 50  #: held-out prompts per generation batch at evaluation

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def sequence_text(request: str, reply: str) -> str:
    """What the chat template renders for one exchange (a test checks it equals the template's output)."""
    return f"{USER}{request}{END}{ASSISTANT}{reply}{END}"


def prompt_text(request: str) -> str:
    return f"{USER}{request}{END}{ASSISTANT}"


def encode(examples: list[Example], tokenizer: Any) -> list[tuple[list[int], int]]:
    """Token ids of each full exchange and how many of them are prompt (not trained on)."""
    full = tokenizer([sequence_text(e.item.text, e.answer) for e in examples], add_special_tokens=False)["input_ids"]
    head = tokenizer([prompt_text(e.item.text) for e in examples], add_special_tokens=False)["input_ids"]
    out = []
    for f, h in zip(full, head):
        if f[: len(h)] != h:
            raise AssertionError("the prompt does not tokenise to a prefix of the exchange")
        out.append((list(f), len(h)))
    return out


def batch_tensors(rows: list[tuple[list[int], int]], pad_id: int) -> tuple[Any, Any, Any]:
    """Right-padded ids, attention mask and labels (prompt and padding ignored)."""
    import torch

    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
    for i, (seq, n_prompt) in enumerate(rows):
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        labels[i, n_prompt : len(seq)] = torch.tensor(seq[n_prompt:])
    return ids, mask, labels


def bucketed(rows: list[tuple[list[int], int]], batch_size: int, seed: int, window: int = 16) -> list[list[tuple[list[int], int]]]:
    """Batches of similar length: every `window` batches' worth of rows is sorted by length and cut into batches,
    and the batch order is shuffled with `seed`. Padding is what a CPU spends most of its time on otherwise
    (tracker programs run from 40 to 270 tokens)."""
    batches = []
    span = batch_size * window
    for start in range(0, len(rows), span):
        chunk = sorted(rows[start : start + span], key=lambda r: len(r[0]))
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    order = np.random.default_rng(seed).permutation(len(batches))
    return [batches[i] for i in order]


def build_model(cfg: TrainConfig, tokenizer: Any, seed: int) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.d_model, intermediate_size=cfg.d_mlp,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads,
        max_position_embeddings=cfg.max_positions, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def lr_at(step: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def fit(model: Any, batches: list[Any], cfg: TrainConfig, progress: Callable[[int, float], None] | None = None) -> list[float]:
    """Train in place; the mean loss of every `log_every` steps."""
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    model.train()
    curve, window = [], []
    for step, (ids, mask, labels) in enumerate(batches):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        window.append(float(loss.detach()))
        if len(window) == cfg.log_every or step == len(batches) - 1:
            curve.append(round(float(np.mean(window)), 6))
            window = []
            if progress:
                progress(step + 1, curve[-1])
    model.eval()
    return curve


@contextlib.contextmanager
def deterministic_torch(threads: int) -> Iterator[None]:
    """Deterministic kernels on `threads` threads for the duration, then the caller's settings back."""
    import torch

    before, was = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        torch.use_deterministic_algorithms(was)


def train_weights(data: Dataset, cfg: TrainConfig, seed: int,
                  progress: Callable[[int, float], None] | None = None) -> tuple[Any, list[Example], int, list[float]]:
    """The trained model, its training examples, the longest training sequence and the loss curve."""
    tokenizer = build_tokenizer()
    examples = data.training_examples(cfg.steps * cfg.batch_size, seed)
    encoded = encode(examples, tokenizer)
    longest = max(len(ids) for ids, _ in encoded)
    if longest > cfg.max_positions:
        raise ValueError(f"a training sequence has {longest} tokens > max_positions {cfg.max_positions}")
    with deterministic_torch(cfg.threads):
        batches = [batch_tensors(b, tokenizer.pad_token_id) for b in bucketed(encoded, cfg.batch_size, seed)]
        model = build_model(cfg, tokenizer, seed)
        curve = fit(model, batches, cfg, progress)
    return model, examples, longest, curve
