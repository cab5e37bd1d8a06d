"""Steering hooks: add a fixed vector to an activation, at every position or only at chosen ones.

`add_direction(vector)` adds at every position, prompt and generated tokens alike (the stages' behaviour,
unchanged). `positions` restricts it, because a vector added to BOS and the whole prompt can degrade the text
before the quantity under study moves (issue 30):
- "prompt": the passes that read the prompt (more than one position: the prefill, a shared prefix and its
  suffixes); "generated": the decode steps (one position each). The runtime decodes one token per step with
  a KV cache, so this is what each pass holds (a one-token prompt counts as generated);
- a `slice` or a list of indices: those columns of the prompt pass only (never a decode step); non-negative
  indices count from the first column, negative ones from the prompt's last token, which is the same token
  in every left-padded row (use negative indices for a batch of prompts of different lengths).
A zero vector is an exact no-op in every mode (x + 0 == x), so a zero-strength arm changes nothing (tested).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

import numpy as np

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

Positions = Union[None, str, slice, Sequence[int]]
MODES = ("all", "prompt", "generated")


def _check(positions: Positions) -> None:
    if positions is None or isinstance(positions, slice):
        return
    if isinstance(positions, str):
        if positions not in MODES:
            raise ValueError(f"positions must be one of {MODES}, a slice or a list of token indices, not {positions!r}")
        return
    if not all(isinstance(p, (int, np.integer)) for p in positions):
        raise ValueError("positions: a list of token indices (ints), a slice, 'prompt', 'generated' or 'all'")


def add_direction(vector: Float[np.ndarray, " d_model"], positions: Positions = None) -> Callable[..., Any]:
    """A forward hook adding `vector` to the hooked activation ([batch, pos, d_model]) at `positions` (module doc).

    The vector is cast once per (device, dtype) to the activation's dtype; a zero vector leaves every
    value unchanged (x + 0 == x), so a zero-strength arm is an exact no-op (tested in bf16 and float32)."""
    _check(positions)
    cache: dict[tuple, Any] = {}
    mode = positions if isinstance(positions, str) else ("all" if positions is None else "columns")

    def hook(act: Float[torch.Tensor, "batch pos d_model"], hook: Any = None) -> Float[torch.Tensor, "batch pos d_model"]:
        import torch

        key = (act.device, act.dtype)
        if key not in cache:
            cache[key] = torch.as_tensor(vector, dtype=act.dtype, device=act.device)
        if mode == "all":
            return act + cache[key]
        seq = act.shape[1]
        if mode == "prompt":
            return act + cache[key] if seq > 1 else act
        if mode == "generated":
            return act + cache[key] if seq == 1 else act
        if seq == 1:
            return act  # a decode step: columns name prompt tokens only
        cols = list(range(seq)[positions]) if isinstance(positions, slice) else [int(p) + seq if p < 0 else int(p) for p in positions]
        if any(not 0 <= c < seq for c in cols):
            raise ValueError(f"steering positions {positions} out of range for a pass of {seq} positions")
        out = act.clone()
        out[:, cols] = act[:, cols] + cache[key]
        return out

    return hook
