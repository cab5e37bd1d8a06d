"""Deterministic CPU training of one organism, its evaluation through the runtime, and the folder it writes.

`train_organism(spec, out, seed)` draws `steps x batch_size` training examples from the organism's data
set with a numpy generator seeded by `seed`, initialises a small Llama with `torch.manual_seed(seed)`,
and trains it with AdamW (linear warm-up, cosine decay) on the answer tokens only (the prompt is
context, not target). Everything random is seeded, batches are fixed before the first step, torch runs
with `use_deterministic_algorithms(True)` and a fixed thread count, so the same seed on the same torch
build and CPU gives the same weights, bit for bit (a test checks the weights hash on a fast config).

The folder is a standard Hugging Face model folder (config, `model.safetensors`, tokenizer with its chat
template) plus:
- `training.json`: name, seeds, configs, code version, data hash, weights sha256, the loss curve, the
  held-out loss, held-out accuracy (greedy, through `interp.runtime.Runtime` and the `zero-shot`
  protocol, so exactly the path the pipeline takes), time taken and the machine load while training;
- `prompts.jsonl`: the held-out prompts (`interp.prompts.load_prompts` format), for `ambench run`;
- `plans.jsonl`: the constructed plan of each held-out prompt (the known answer, per prompt);
- organism-specific files (the translator's `references.jsonl`).
It is written to `<out>.partial-<pid>` and renamed into place, so a killed build leaves no folder that
looks finished.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from interp.organisms.data import Dataset, Example, data_digest
from interp.organisms.tokenizer import ASSISTANT, END, USER, build_tokenizer

IGNORE = -100


@dataclass(frozen=True)
class TrainConfig:
    """The model and the optimisation of one organism (all defaults measured to train in minutes on 2 cores)."""

    n_layers: int = 4  #: transformer blocks
    d_model: int = 96  #: residual-stream width
    n_heads: int = 4  #: attention heads (key/value heads too: no grouped-query attention)
    d_mlp: int = 256  #: width of the SwiGLU MLP
    max_positions: int = 512  #: longest sequence the rotary embedding is configured for
    steps: int = 800  #: optimiser steps
    batch_size: int = 64  #: sequences per step
    lr: float = 3e-3  #: peak learning rate
    warmup: int = 50  #: steps of linear warm-up
    min_lr_ratio: float = 0.05  #: the cosine decay ends at lr * min_lr_ratio
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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def heldout_loss(model: Any, rows: list[tuple[list[int], int]], pad_id: int, batch: int = 64) -> float | None:
    """Mean per-token loss of the held-out answers (teacher-forced)."""
    import torch

    if not rows:
        return None
    total, count = 0.0, 0
    with torch.inference_mode():
        for i in range(0, len(rows), batch):
            ids, mask, labels = batch_tensors(rows[i : i + batch], pad_id)
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
            target = labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                     ignore_index=IGNORE, reduction="sum")
            total += float(loss)
            count += int((target != IGNORE).sum())
    return round(total / count, 6)


def evaluate(folder: Path, data: Dataset, batch: int = 50) -> dict[str, Any]:
    """Greedy answers to every held-out prompt through the runtime (zero-shot protocol), checked per prompt.
    Generation stops 16 tokens past the longest right answer: a longer one cannot be right."""
    from interp.prompts import Protocol, build
    from interp.runtime import Runtime, Sampling, StopRule

    rt = Runtime.from_folder(folder, name=folder.name)
    known = [e for e in data.heldout if e.program] or data.training_examples(64, 0)
    longest = max(len(rt.tokenizer(e.answer, add_special_tokens=False)["input_ids"]) for e in known)
    max_new_tokens = longest + 16
    proto = Protocol("zero-shot", 0)
    results = []
    for i in range(0, len(data.heldout), batch):
        chunk = data.heldout[i : i + batch]
        built = [build(ex.item, proto, rt.tokenizer) for ex in chunk]
        gens = rt.generate([b.tokens for b in built], [Sampling(0.0, 0)] * len(chunk), StopRule(max_new_tokens=max_new_tokens))
        for ex, g in zip(chunk, gens):
            results.append({"id": ex.item.id, "correct": g.stop == "fence" and data.check(ex, g.text), "text": g.text})
    correct = sum(r["correct"] for r in results)
    return {"heldout_prompts": len(results), "heldout_correct": correct,
            "heldout_accuracy": round(correct / max(1, len(results)), 6),
            "wrong": [{"id": r["id"], "text": r["text"]} for r in results if not r["correct"]][:10]}


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")


def train_organism(name: str, data: Dataset, cfg: TrainConfig, out: Path, seed: int, code_version: str,
                   progress: Callable[[int, float], None] | None = None, evaluate_heldout: bool = True) -> dict[str, Any]:
    """Train `name` and write its folder at `out` (atomically); returns the training record."""
    import torch

    from interp.prompts import write_prompts

    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose another --out or remove it")
    started, cpu0, load0 = time.time(), time.process_time(), os.getloadavg()
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tokenizer = build_tokenizer()
        examples = data.training_examples(cfg.steps * cfg.batch_size, seed)
        encoded = encode(examples, tokenizer)
        longest = max(len(ids) for ids, _ in encoded)
        if longest > cfg.max_positions:
            raise ValueError(f"{name}: a training sequence has {longest} tokens > max_positions {cfg.max_positions}")
        batches = [batch_tensors(b, tokenizer.pad_token_id) for b in bucketed(encoded, cfg.batch_size, seed)]
        model = build_model(cfg, tokenizer, seed)
        fit_started = time.time()
        curve = fit(model, batches, cfg, progress)
        fit_seconds = time.time() - fit_started
        held_rows = encode([e for e in data.heldout if e.program], tokenizer)
        held_loss = heldout_loss(model, held_rows, tokenizer.pad_token_id)
        tmp.mkdir(parents=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_prompts([e.item for e in data.heldout], tmp / "prompts.jsonl")
        write_rows(tmp / "plans.jsonl", [{"id": e.item.id, "answer": e.answer if e.program else None, **e.plan}
                                         for e in data.heldout])
        for fname, rows in data.extra.items():
            write_rows(tmp / fname, rows)
        record: dict[str, Any] = {
            "organism": name, "seed": seed, "code_version": code_version, "config": cfg.as_dict(),
            "model": {"architecture": "LlamaForCausalLM", "parameters": int(sum(p.numel() for p in model.parameters())),
                      "vocab_size": len(tokenizer)},
            "data": {"sha256": data_digest(examples, data.heldout), "training_examples": len(examples),
                     "training_prompts_available": data.train_prompts,
                     "distinct_training_prompts": len({e.item.text for e in examples}),
                     "heldout_prompts": len(data.heldout), "longest_sequence": longest},
            "loss_curve": curve, "final_train_loss": curve[-1], "heldout_loss": held_loss,
            "weights_sha256": sha256_file(tmp / "model.safetensors"),
            "seconds": {"fit": round(fit_seconds, 1), "total": None},
            "machine": {"torch": torch.__version__, "threads": cfg.threads, "cpus": os.cpu_count(),
                        "loadavg_start": [round(x, 2) for x in load0]},
        }
        if evaluate_heldout:
            record["eval"] = evaluate(tmp, data, cfg.eval_batch)
        record["seconds"]["total"] = round(time.time() - started, 1)
        record["machine"]["cpu_seconds"] = round(time.process_time() - cpu0, 1)
        record["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        (tmp / "training.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        tmp.replace(out)
        return record
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
