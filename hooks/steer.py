"""Steering hooks: add a fixed vector to an activation at every position (prompt and generated tokens)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float


def add_direction(vector: Float[np.ndarray, " d_model"]) -> Callable[..., Any]:
    """A forward hook adding `vector` to the hooked activation ([batch, pos, d_model]).

    The vector is cast once per (device, dtype) to the activation's dtype; a zero vector leaves every
    value unchanged (x + 0 == x), so a zero-strength arm is an exact no-op (tested in bf16 and float32)."""
    cache: dict[tuple, Any] = {}

    def hook(act: Float[torch.Tensor, "batch pos d_model"], hook: Any = None) -> Float[torch.Tensor, "batch pos d_model"]:
        import torch

        key = (act.device, act.dtype)
        if key not in cache:
            cache[key] = torch.as_tensor(vector, dtype=act.dtype, device=act.device)
        return act + cache[key]

    return hook
