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

import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

import numpy as np

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

Positions = Union[None, str, slice, Sequence[int]]
#: the hooks `add_direction` made that act alike everywhere (`is_uniform`)
UNIFORM: "weakref.WeakSet[Callable[..., Any]]" = weakref.WeakSet()
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
    value unchanged (x + 0 == x), so a zero-strength arm is an exact no-op (tested in bf16 and float32).

    Args:
        vector: d_model finite numbers (numpy, torch or a list).
        positions: None (every position), "prompt", "generated", a slice or token indices of the prompt pass
            (negative from the prompt's last token; first-column indices on rows of different lengths are refused
            by the runtime's calls, they would steer padding).

    Example::

        hook = add_direction(2.0 * v, positions=[-1])
        steered = rt.forward(tokens, hooks=[("blocks.2.hook_resid_pre", hook)])
    """
    _check(positions)
    size = _vector(vector).shape[0]  # checked here; the vector itself is cast as given (no extra rounding step)
    cache: dict[tuple, Any] = {}
    mode = positions if isinstance(positions, str) else ("all" if positions is None else "columns")

    def hook(act: Float[torch.Tensor, "batch pos d_model"], hook: Any = None) -> Float[torch.Tensor, "batch pos d_model"]:
        import torch

        key = (act.device, act.dtype)
        if act.shape[-1] != size:
            raise ValueError(f"the steering vector has {size} entries and the hooked activation's last axis "
                             f"{act.shape[-1]}: give a vector of the model's d_model at this hook")
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

    hook.from_first_column = _from_first_column(positions)  # type: ignore[attr-defined]
    # the same function at every position of every row and pass: a prefix shared by the rows may be computed once
    # with it (Runtime.generate); "prompt" and "generated" depend on a pass's length, columns on its layout. Kept in a
    # registry, not an attribute: functools.wraps copies attributes onto a wrapper that may act otherwise
    if mode == "all":
        UNIFORM.add(hook)
    return hook


def is_uniform(fn: Any) -> bool:
    """Whether `fn` is a hook made by `add_direction(v)` with no positions: the same vector added at every position
    of every row and pass (Runtime.generate may then compute a shared prefix once with it)."""
    try:
        return fn in UNIFORM
    except TypeError:  # not weak-referenceable, so not one of ours
        return False


def _vector(vector: Any) -> np.ndarray:
    """The steering vector as a finite 1-D float array, or one sentence."""
    if isinstance(vector, (str, bytes)) or vector is None:
        raise TypeError(f"the steering vector must be numbers (a 1-D array of d_model), not {type(vector).__name__}")
    try:
        arr = np.asarray(vector.detach().float().cpu() if hasattr(vector, "detach") else vector, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(f"the steering vector must be numbers (a 1-D array of d_model), not {type(vector).__name__}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"the steering vector must be 1-D (d_model entries), not shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("the steering vector holds NaN or inf: every entry must be a finite number")
    return arr


def _from_first_column(positions: Positions) -> bool:
    """Whether `positions` names columns counted from the first one (non-negative indices, a slice from the start):
    in a left-padded batch of prompts of different lengths those are padding in the shorter rows."""
    if isinstance(positions, slice):
        return positions.start is None or positions.start >= 0
    if positions is None or isinstance(positions, str):
        return False
    return any(int(p) >= 0 for p in positions)


def check_padding(hooks: Any, lengths: Sequence[int]) -> None:
    """One sentence when a steering hook names columns from the first one and the rows differ in length (their
    first columns are padding in the shorter rows: steering them would be silent and wrong)."""
    if len(set(lengths)) <= 1:
        return
    for name, fn in hooks:
        if getattr(fn, "from_first_column", False) or getattr(getattr(fn, "__wrapped__", None), "from_first_column", False):
            raise ValueError(f"the steering hook on {name!r} names positions counted from the first column, which is "
                             f"padding in the shorter of these rows ({min(lengths)}..{max(lengths)} tokens): use negative "
                             "indices (from each prompt's last token), or prompts of one length")
