"""Generation and capture stages over a run directory (resumable, seeded).

`generate_stage` appends one line per attempt to `RUN/generations.jsonl`: per prompt one greedy
attempt (sample 0) and N sampled ones (samples 1..N). An attempt's seed is derived from the run seed
and its key (model, task, protocol, prompt id, sample) by sha256, recorded in its row, and is all
`regenerate` needs to reproduce that attempt alone. Attempts are cut into fixed batches over the full
ordered list, so a resumed run batches exactly like an uninterrupted one; each batch is written with
one `write` and flushed, a torn last line (a kill mid-write) is dropped on resume, and a batch is
redone whole if any of its attempts is missing. Rows are written with sorted keys and no timestamps.

`capture_stage` writes `RUN/activations/<model>.h5` (see `activations.store`) for the prompts'
three token positions, resumable by prompt id.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.canvas.extract import extract_code
from interp.prompts import POSITIONS, BuiltPrompt, PromptItem, Protocol, build

GENERATIONS = "generations.jsonl"
CONFIG = "config.json"
ENTROPY_DECIMALS = 5


class RunError(ValueError):
    """A run directory that cannot be continued with the settings given."""


def derive_seed(*key: Any) -> int:
    """A 60-bit seed from sha256 of the JSON of `key`: the same key, the same seed, on any machine."""
    return int(hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:15], 16)


def attempt_seed(run_seed: int, model: str, task: str, protocol: str, prompt_id: str, sample: int) -> int:
    return derive_seed(run_seed, model, task, protocol, prompt_id, sample)


@dataclass(frozen=True)
class GenerateSettings:
    samples: int = 10  #: sampled attempts per prompt, besides the greedy one
    temperature: float = 0.7
    seed: int = 0
    max_new_tokens: int = 384
    batch_size: int = 8
    protocol: str = "auto"
    shots: int = 2
    output: str = "canvas"  #: canvas code or raw SVG (the medium ablation)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def safe_name(model: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model.strip("/"))[-80:]


def answer_text(row: dict[str, Any]) -> str:
    """What the program extractor should read: the prompt's open fence (if any) plus the generated text."""
    return row.get("prefix", "") + row["text"]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn final line (no newline, not JSON) is cut off the file."""
    if not path.exists():
        return []
    data = path.read_bytes()
    good = data if data.endswith(b"\n") or not data else data[: data.rfind(b"\n") + 1]
    if len(good) != len(data):
        with open(path, "r+b") as f:
            f.truncate(len(good))
    rows = []
    for n, line in enumerate(good.decode("utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise RunError(f"{path}: line {n} is not JSON; the file was edited or corrupted") from None
    return rows


def append_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        return
    blob = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rows)
    with open(path, "a", encoding="utf-8") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())


def record_config(run: Path, section: str, settings: dict[str, Any]) -> None:
    """Record a stage's settings in RUN/config.json; refuse to continue a stage with other settings."""
    run.mkdir(parents=True, exist_ok=True)
    path = run / CONFIG
    config = json.loads(path.read_text()) if path.exists() else {}
    stages = config.setdefault("stages", {})
    old = stages.get(section)
    if old is not None and old != settings:
        changed = sorted(_diff(old, settings))
        raise RunError(f"{run} already has stage {section!r} with other settings ({', '.join(changed)}); "
                       "use another --out to change them")
    stages[section] = settings
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted names of the keys whose values differ between two nested dicts."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in set(a) | set(b):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


@dataclass(frozen=True)
class Attempt:
    item: PromptItem
    prompt: BuiltPrompt
    sample: int
    seed: int
    temperature: float

    def key(self, model: str) -> tuple[str, str, str, str, int]:
        return (model, self.item.task, self.prompt.protocol, self.item.id, self.sample)


def plan_attempts(runtime: Any, items: Sequence[PromptItem], s: GenerateSettings, model: str) -> list[Attempt]:
    protocol = Protocol(s.protocol, s.shots, output=s.output)
    out = []
    for item in items:
        built = build(item, protocol, runtime.tokenizer, chat=runtime.info.chat)
        for k in range(s.samples + 1):
            temp = 0.0 if k == 0 else s.temperature
            out.append(Attempt(item, built, k, attempt_seed(s.seed, model, item.task, built.protocol, item.id, k), temp))
    return out


def _row(model: str, a: Attempt, g: Any) -> dict[str, Any]:
    prefix = a.prompt.opener
    ent = [round(x, ENTROPY_DECIMALS) for x in g.entropy]
    return {
        "task": a.item.task, "prompt_id": a.item.id, "model": model, "protocol": a.prompt.protocol,
        "sample": a.sample, "seed": a.seed, "temperature": a.temperature, "prefix": prefix, "text": g.text,
        "code": extract_code(prefix + g.text) if not a.prompt.protocol.startswith("svg/") else None, "n_tokens": len(g.tokens), "stop": g.stop, "entropy": ent,
        "mean_entropy": round(sum(g.entropy) / len(g.entropy), ENTROPY_DECIMALS) if g.entropy else None,
    }


def run_attempts(runtime: Any, attempts: Sequence[Attempt], s: GenerateSettings, model: str,
                 on_token: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    from interp.runtime import Sampling, StopRule

    open_fence = {a.prompt.open_fence for a in attempts}
    rows = []
    # rows of one batch share a stop rule; prompts with and without an open fence never mix in practice
    for flag in sorted(open_fence):
        part = [a for a in attempts if a.prompt.open_fence == flag]
        gens = runtime.generate([a.prompt.tokens for a in part], [Sampling(a.temperature, a.seed) for a in part],
                                StopRule(max_new_tokens=s.max_new_tokens, open_fence=flag), on_token=on_token)
        rows += [(a, _row(model, a, g)) for a, g in zip(part, gens)]
    order = {id(a): i for i, a in enumerate(attempts)}
    return [r for _, r in sorted(rows, key=lambda ar: order[id(ar[0])])]


def generate_stage(runtime: Any, items: Sequence[PromptItem], run: Path, s: GenerateSettings, model: str | None = None,
                   progress: Callable[[int, int], None] | None = None,
                   on_token: Callable[[int], None] | None = None,
                   shard: tuple[int, int] | None = None) -> dict[str, int]:
    """Generate every missing attempt into RUN/generations.jsonl; returns counts.

    `shard=(i, n)` generates only the batches whose index is i modulo n (the batches are the same as
    an unsharded run's, so merged shards hold the very same rows)."""
    model = model or runtime.info.name
    if s.samples < 0 or s.batch_size < 1 or s.max_new_tokens < 1:
        raise RunError("samples must be >= 0, batch size and max new tokens >= 1")
    attempts = plan_attempts(runtime, items, s, model)
    tasks = sorted({i.task for i in items})
    section = f"generate/{model}/{'+'.join(tasks)}/{attempts[0].prompt.protocol if attempts else s.protocol}"
    record_config(run, section, {"settings": s.as_dict(), "model": runtime.info.as_dict(),
                                 "prompts": [i.id for i in items]})
    path = run / GENERATIONS
    done = {(r["model"], r["task"], r["protocol"], r["prompt_id"], r["sample"]) for r in read_rows(path)}
    batches = [attempts[i: i + s.batch_size] for i in range(0, len(attempts), s.batch_size)]
    written = skipped = 0
    for bi, batch in enumerate(batches):
        if shard is not None and bi % shard[1] != shard[0]:
            continue
        missing = [a for a in batch if a.key(model) not in done]
        if not missing:
            skipped += len(batch)
            if progress:
                progress(len(batch), 0)
            continue
        rows = run_attempts(runtime, batch, s, model, on_token)  # the whole batch: same batching as an unbroken run
        new = [r for a, r in zip(batch, rows) if a.key(model) not in done]
        append_rows(path, new)
        done |= {a.key(model) for a in missing}
        written += len(new)
        if progress:
            progress(len(batch), sum(r["n_tokens"] for r in new))
    return {"attempts": len(attempts), "written": written, "skipped": skipped}


def regenerate(runtime: Any, item: PromptItem, row: dict[str, Any], s: GenerateSettings) -> dict[str, Any]:
    """Redo one recorded attempt alone, from its row (seed, temperature, protocol)."""
    protocol = Protocol(s.protocol, s.shots, output=s.output)
    built = build(item, protocol, runtime.tokenizer, chat=runtime.info.chat)
    if built.protocol != row["protocol"]:
        raise RunError(f"the row was made with protocol {row['protocol']}, these settings give {built.protocol}")
    a = Attempt(item, built, int(row["sample"]), int(row["seed"]), float(row["temperature"]))
    return run_attempts(runtime, [a], s, row["model"])[0]


# --------------------------------------------------------------------------- capture


def capture_stage(runtime: Any, items: Sequence[PromptItem], run: Path, protocol: Protocol, dtype: str = "float32",
                  batch_size: int = 8, model: str | None = None,
                  progress: Callable[[int], None] | None = None, shard: tuple[int, int] | None = None,
                  final: str = "pre-norm") -> Path:
    """Residual stream at the three positions, every layer, for every prompt, into RUN/activations/.

    The last site is the residual before the final norm, or its output with final="post-norm"."""
    import numpy as np

    from activations.store import ActivationWriter

    model = model or runtime.info.name
    built = [build(it, protocol, runtime.tokenizer, chat=runtime.info.chat) for it in items]
    names = runtime.hook_names(final=final)
    meta = {
        "model": runtime.info.as_dict(), "hook_names": names, "canonical_hooks": list(runtime.canonical_hooks(names)),
        "final_site": final, "positions": list(POSITIONS), "protocol": built[0].protocol if built else protocol.name,
        "position_definitions": {
            "subject": "last token starting before the end of the subject span",
            "turn": "last token starting before the end of the user's request",
            "last": "final prompt token (generation starts after it)",
        },
    }
    path = run / "activations" / f"{safe_name(model)}.h5"
    with ActivationWriter(path, len(names), len(POSITIONS), runtime.info.d_model, meta, dtype) as w:
        done = w.done
        # fixed batches over every prompt (as an unsharded, uninterrupted run makes them)
        for bi, i in enumerate(range(0, len(built), batch_size)):
            batch = [b for b in built[i: i + batch_size] if b.item_id not in done]
            if (shard is not None and bi % shard[1] != shard[0]) or not batch:
                if progress:
                    progress(len(built[i: i + batch_size]))
                continue
            pos = [[b.positions[k] for k in POSITIONS] for b in batch]
            acts = runtime.capture([b.tokens for b in batch], pos, final=final)
            w.append([b.item_id for b in batch], acts.numpy(), np.asarray(pos))
            if progress:
                progress(len(batch))
    return path
