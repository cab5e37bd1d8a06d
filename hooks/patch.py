"""Activation patching hooks: replace the activation at chosen token positions with a donor's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float


def replace_last(donor: Float[torch.Tensor, "span d_model"]) -> Callable[..., Any]:
    """A forward hook that writes `donor` over the last `span` positions of every row ([batch, pos, d_model]).

    Used while a statement's tokens are processed (`Runtime.continue_batch(prefill_hooks=...)`): the
    statement block sits at the end of each row, so its positions are the last `span`. Writing the
    activation's own values back is an exact no-op (an identity patch changes no token, tested)."""
    span = donor.shape[0]

    def hook(act: Float[torch.Tensor, "batch pos d_model"], hook: Any = None) -> Float[torch.Tensor, "batch pos d_model"]:
        act[:, -span:, :] = donor.to(act.device, act.dtype)
        return act

    return hook
