"""The capture stage: the residual stream at three token positions, every layer, per prompt, into
`RUN/activations/<model>/` (see `activations.store`).

Work units are fixed batches of prompts in the given order (resumable and shardable like the generate
stage). A stored prompt carries `input`, a hash of its tokens and positions and the model's weights
digest: a prompt whose text changed is captured again and its new row supersedes the old one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from experiments.rundir import RunDir, content_hash, writing
from interp.prompts import POSITIONS, PromptItem, Protocol, build


@dataclass(frozen=True)
class CaptureSettings:
    """How the residual stream is captured (the paper: every layer, three positions, one forward pass per prompt)."""

    protocol: str = "auto"  #: the protocol the generations used (positions follow it)
    shots: int = 2  #: worked examples of few-shot and completion protocols
    store_dtype: str = "float32"  #: float32 or float16 on disk
    batch_size: int = 8  #: prompts per forward pass (and per resumable work unit)
    final_site: str = "pre-norm"  #: the last site: the last block's output (pre-norm) or the final norm's output

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


POSITION_DEFINITIONS = {
    "subject": "last token starting before the end of the subject span",
    "turn": "last token starting before the end of the user's request",
    "last": "final prompt token (generation starts after it)",
}


def capture_stage(runtime: Any, items: Sequence[PromptItem], run: Any, s: CaptureSettings = CaptureSettings(),
                  model: str | None = None, progress: Callable[[int], None] | None = None,
                  shard: tuple[int, int] | None = None, say: Callable[[str], None] | None = None) -> Path:
    """Residual stream at the three positions, every layer, for every prompt; returns the store's folder."""
    import numpy as np

    from activations.store import ActivationWriter

    model = model or runtime.info.name
    protocol = Protocol(s.protocol, s.shots)
    built = [(it.task, build(it, protocol, runtime.tokenizer, chat=runtime.info.chat)) for it in items]
    names = runtime.hook_names(final=s.final_site)
    meta = {
        "name": model, "model": runtime.info.as_dict(), "hook_names": names, "final_site": s.final_site,
        "canonical_hooks": list(runtime.canonical_hooks(names)), "positions": list(POSITIONS),
        "protocol": built[0][1].protocol if built else protocol.label,
        "medium": built[0][1].medium if built else protocol.medium_name, "position_definitions": POSITION_DEFINITIONS,
    }
    digest = runtime.info.weights_digest
    inputs = {(t, b.item_id): content_hash(list(b.tokens), [b.positions[k] for k in POSITIONS], digest) for t, b in built}
    with writing(run) as rd:
        rd.record_prompts(items)
        folder = rd.activations(model)
        with ActivationWriter(folder, len(names), len(POSITIONS), runtime.info.d_model, meta, s.store_dtype, say) as w:
            done = w.done
            stale = sum(1 for k, v in done.items() if k in inputs and inputs[k] != v)
            if stale and say:
                say(f"{stale} prompts of {model} changed since their capture: capturing them again")
            for bi, i in enumerate(range(0, len(built), s.batch_size)):
                batch = [(t, b) for t, b in built[i: i + s.batch_size] if done.get((t, b.item_id)) != inputs[(t, b.item_id)]]
                if (shard is not None and bi % shard[1] != shard[0]) or not batch:
                    if progress:
                        progress(len(built[i: i + s.batch_size]))
                    continue
                pos = [[b.positions[k] for k in POSITIONS] for _, b in batch]
                acts = runtime.capture([b.tokens for _, b in batch], pos, final=s.final_site)
                # the request's tokens (the item's own text, not the protocol's shots or template): a lexical baseline
                means = np.stack([runtime.input_embeddings(b.tokens)[b.tokens_in([b.request]) or slice(None)].mean(axis=0)
                                  for _, b in batch])
                w.append([b.item_id for _, b in batch], acts.numpy(), np.asarray(pos), [t for t, _ in batch],
                         [inputs[(t, b.item_id)] for t, b in batch], embed_mean=means)
                if progress:
                    progress(len(batch))
    return folder


__all__ = ["CaptureSettings", "capture_stage", "POSITION_DEFINITIONS", "RunDir"]
