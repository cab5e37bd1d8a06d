"""Steering hooks: add a fixed vector to an activation at every position (prompt and generated tokens)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def add_direction(vector: np.ndarray) -> Callable[..., Any]:
    """A forward hook adding `vector` ([d_model]) to the hooked activation ([batch, pos, d_model])."""
    cache: dict[tuple, Any] = {}

    def hook(act: Any, hook: Any = None) -> Any:
        import torch

        key = (act.device, act.dtype)
        if key not in cache:
            cache[key] = torch.as_tensor(vector, dtype=act.dtype, device=act.device)
        return act + cache[key]

    return hook
