"""Capture hooks that keep only chosen token positions of an activation.

`PositionCapture(index, n_sites)` owns the output buffer. `hook(sites)` returns a forward hook for one
hook point; it gathers `act[b, index[b, p]]` (shape [batch, positions, d_model]) and stores a float32
copy for each site that resolves to that hook point (aliases of one point are registered once, see
`Runtime.canonical_hooks`). The full [batch, seq, d_model] activation is never copied or kept.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence


class PositionCapture:
    def __init__(self, index: Any, n_sites: int) -> None:
        self.index = index  # [batch, positions] absolute (padded) token indices
        self.n_sites = n_sites
        self.slices: dict[int, Any] = {}

    def hook(self, sites: Sequence[int]) -> Callable[..., Any]:
        def fn(act: Any, hook: Any = None) -> Any:
            import torch

            rows = torch.arange(act.shape[0], device=act.device)[:, None]
            picked = act[rows, self.index.to(act.device)].detach().float().cpu()
            for s in sites:
                self.slices[s] = picked
            return act

        return fn

    def result(self) -> Any:
        import torch

        missing = [s for s in range(self.n_sites) if s not in self.slices]
        if missing:
            raise RuntimeError(f"capture hooks did not fire for sites {missing}")
        return torch.stack([self.slices[s] for s in range(self.n_sites)], dim=1)
