"""Capture hooks that keep only chosen token positions of an activation.

`PositionCapture(index, n_sites)` owns the output buffer. `hook(sites)` returns a forward hook for one
hook point; it gathers `act[b, index[b, p]]` (shape [batch, positions, d_model]) and stores a float32
copy for each site that resolves to that hook point (aliases of one point are registered once, see
`Runtime.canonical_hooks`). The full [batch, seq, d_model] activation is never copied or kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int


class PositionCapture:
    def __init__(self, index: Int[torch.Tensor, "batch pos"], n_sites: int) -> None:
        self.index = index  # absolute (padded) token indices
        self.n_sites = n_sites
        self.slices: dict[int, Any] = {}

    def hook(self, sites: Sequence[int]) -> Callable[..., Any]:
        def fn(act: Float[torch.Tensor, "batch seq d_model"], hook: Any = None) -> Float[torch.Tensor, "batch seq d_model"]:
            import torch

            rows = torch.arange(act.shape[0], device=act.device)[:, None]
            picked = act[rows, self.index.to(act.device)].detach().float().cpu()
            for s in sites:
                self.slices[s] = picked
            return act

        return fn

    def result(self) -> Float[torch.Tensor, "batch site pos d_model"]:
        import torch

        missing = [s for s in range(self.n_sites) if s not in self.slices]
        if missing:
            raise RuntimeError(f"capture hooks did not fire for sites {missing}")
        return torch.stack([self.slices[s] for s in range(self.n_sites)], dim=1)
