"""Build one organism's folder: train its weights, evaluate it through the runtime, write everything atomically.

The folder is a standard Hugging Face model folder (config, `model.safetensors`, tokenizer with its chat
template) plus:
- `training.json`: name, seed, configs, code version, data hash, weights sha256, the loss curve, the
  held-out loss, held-out accuracy (greedy, through the runtime and the `zero-shot` protocol, so exactly
  the path the pipeline takes: `evaluate`, handed in by the caller, `interp.runtime.evaluate_organism`;
  this module never imports the runtime, see interp/organisms/__init__.py), time taken and the machine
  load while training;
- `prompts.jsonl`: the held-out prompts (`interp.prompts.load_prompts` format), for `ambench run`;
- `plans.jsonl`: the constructed plan of each held-out prompt (the known answer, per prompt);
- organism-specific files (the translator's `references.jsonl`).
It is written to `<out>.partial-<pid>` and renamed into place, so a killed build leaves no folder that
looks finished.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from interp.organisms.data import Dataset, data_digest
from interp.organisms.tokenizer import build_tokenizer
from interp.organisms.train import IGNORE, TrainConfig, batch_tensors, deterministic_torch, encode, train_weights


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")


def train_organism(name: str, data: Dataset, cfg: TrainConfig, out: Path, seed: int, code_version: str,
                   progress: Callable[[int, float], None] | None = None, evaluate_heldout: bool = True,
                   known_answer: dict[str, Any] | None = None,
                   evaluate: Callable[[Path, Dataset, int], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train `name` and write its folder at `out` (atomically); returns the training record. `known_answer`
    ({"kind": one of experiments.organisms.KINDS, "statement": ...}) is what the organism constructs: recorded in
    training.json, it gives the folder a known-answer verdict in any run (`experiments.organisms.verdicts`)."""
    import torch

    from interp.prompts import write_prompts

    out = Path(out)
    if out.exists():
        raise FileExistsError(f"{out} already exists; choose another --out or remove it")
    started, cpu0, load0 = time.time(), time.process_time(), os.getloadavg()
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model, examples, longest, curve = train_weights(data, cfg, seed, progress)
        fit_seconds, fit_cpu = time.time() - started, time.process_time() - cpu0
        tokenizer = build_tokenizer()
        known = [e for e in data.heldout if e.program]  # the random planner has no one right program per prompt
        with deterministic_torch(cfg.threads):
            held_loss = heldout_loss(model, encode(known, tokenizer), tokenizer.pad_token_id) if known else None
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
            "loss_curve": curve, "final_train_loss": curve[-1], "heldout_loss": held_loss, "known_answer": known_answer,
            "weights_sha256": sha256_file(tmp / "model.safetensors"),
            "seconds": {"train": round(fit_seconds, 1), "train_cpu": round(fit_cpu, 1), "total": None},
            "machine": {"torch": torch.__version__, "threads": cfg.threads, "cpus": os.cpu_count(),
                        "loadavg_start": [round(x, 2) for x in load0]},
        }
        if evaluate_heldout and evaluate is not None:  # without an evaluator the record has no "eval"
            with deterministic_torch(cfg.threads):
                record["eval"] = evaluate(tmp, data, cfg.eval_batch)
        record["seconds"]["total"] = round(time.time() - started, 1)
        record["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
        (tmp / "training.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        tmp.replace(out)
        return record
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
