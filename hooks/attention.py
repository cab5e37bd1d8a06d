"""Attention-pattern hooks that keep, per layer, only the attention mass from chosen queries onto key groups.

`KeyGroupMass(queries, groups, n_layers)` owns the output. `hook(i)` returns a hook for
`blocks.{L}.attn.hook_pattern` (shape [batch, heads, query, key], batch 1) that averages the pattern
over heads at the chosen query positions and sums it over each group of key positions, and counts the
keys of each group the query can see (a non-zero weight in some head). Only [queries, groups, 2] per
layer is kept; the full [heads, seq, seq] pattern is never copied.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int


class KeyGroupMass:
    """Per-layer attention mass from chosen queries onto groups of keys (see the module docstring)."""

    def __init__(self, queries: Int[torch.Tensor, "query"], groups: Float[torch.Tensor, "group key"], n_layers: int) -> None:
        self.queries = queries  #: absolute positions of the query tokens
        self.groups = groups  #: 0/1 membership of each key position in each group
        self.n_layers = n_layers
        self.out: dict[int, Any] = {}

    def hook(self, layer: int) -> Callable[..., Any]:
        def fn(pattern: Float[torch.Tensor, "batch head query key"], hook: Any = None) -> Float[torch.Tensor, "batch head query key"]:
            rows = pattern[0][:, self.queries.to(pattern.device), :].float()  # [heads, q, k]
            groups = self.groups.to(rows.device)
            mass = rows.mean(dim=0) @ groups.T  # [q, groups]
            visible = (rows > 0).any(dim=0).float() @ groups.T
            import torch

            self.out[layer] = torch.stack([mass, visible], dim=-1).cpu()
            return pattern

        return fn

    def result(self) -> Float[torch.Tensor, "layer query group 2"]:
        import torch

        missing = [i for i in range(self.n_layers) if i not in self.out]
        if missing:
            raise RuntimeError(f"attention-pattern hooks did not fire for layers {missing}")
        return torch.stack([self.out[i] for i in range(self.n_layers)])
