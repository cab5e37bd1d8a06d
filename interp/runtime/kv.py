"""KV-cache surgery and prefix sharing, used by the generation loop and by capture.

- `growing_cache()`: a full `DynamicCache` (no sliding-window truncation) whose layers write each step into
  buffers with spare room instead of concatenating the whole cache every token;
- `shift_rows(cache, shift)`: a batch-1 prefix cache repeated for each row, row i moved right by shift[i] slots,
  the layout `continue_batch` uses (the runtime's module docstring says why padding never goes in the middle);
- `distinct_rows` / `repeat_rows`: a prompt given several times is computed once and its rows repeated;
- `common_prefix` / `prefix_groups`: which rows share a prefix long enough (`SHARED_PREFIX_MIN`) to compute once;
- `prefix_cache(rt, prefix)`: that prefix's KV cache, the last `Runtime.PREFIXES_KEPT` kept; `suffix_block`: the
  tokens and attention mask of the suffixes that follow it.
"""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING, Any, Sequence

from interp.models import ModelError

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int
    from transformers import Cache

    from interp.runtime import Hooks, Runtime


#: generate() prefills a prefix shared by every row once when it is at least this long (shorter ones save little)
SHARED_PREFIX_MIN = 64


def common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """Tokens every prompt starts with, leaving each prompt at least one token of its own."""
    if len(prompts) < 2:
        return 0
    n = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for i in range(max(n, 0)):
        t = first[i]
        if any(p[i] != t for p in prompts):
            return i
    return max(n, 0)


def prefix_groups(prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]]) -> list[tuple[int, list[int]]]:
    """Rows of a capture batch grouped to share a prefix: [(common, rows)], each group's rows starting with the same
    `common` tokens, all of them before the group's first captured position (common 0: no sharing). The grouping
    computes the fewest tokens: prompts sorted, a run's common prefix is the smallest common prefix of neighbours,
    and a run is split at those neighbours when its parts, each with its own prefix, cost fewer tokens."""
    def shareable(r: int) -> int:  # never a captured position (nor the last token: a suffix has one at least)
        return min([len(prompts[r]) - 1, *positions[r]])

    alone = [r for r in range(len(prompts)) if shareable(r) < SHARED_PREFIX_MIN]
    order = sorted((r for r in range(len(prompts)) if shareable(r) >= SHARED_PREFIX_MIN), key=lambda r: tuple(prompts[r]))

    cap = [shareable(r) for r in order]
    # common_prefix keeps a token of each prompt back, which the caps (<= len - 1) already do
    near = [min(common_prefix([prompts[a], prompts[b]]), cap[i], cap[i + 1]) for i, (a, b) in enumerate(zip(order, order[1:]))]

    def best(lo: int, hi: int) -> tuple[int, list[tuple[int, list[int]]]]:  # rows order[lo:hi]
        rows = order[lo:hi]
        common = min(near[lo:hi - 1]) if hi - lo > 1 else 0
        common = common if common >= SHARED_PREFIX_MIN else 0
        whole = common + sum(len(prompts[r]) - common for r in rows)
        if hi - lo == 1 or min(near[lo:hi - 1]) == max(near[lo:hi - 1]):
            return whole, [(common, rows)]
        low = min(near[lo:hi - 1])
        cuts = [lo] + [i + 1 for i in range(lo, hi - 1) if near[i] == low] + [hi]
        split = [best(a, b) for a, b in zip(cuts, cuts[1:])]
        cost = sum(c for c, _ in split)
        if cost < whole:
            return cost, [g for _, gs in split for g in gs]
        return whole, [(common, rows)]

    return (best(0, len(order))[1] if order else []) + ([(0, alone)] if alone else [])


def distinct_rows(rows: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """The first index of each distinct row, in order, and for every row the position of its first copy among
    them: `rows[i] == rows[unique[expand[i]]]` (a prompt or suffix given several times is computed once)."""
    first: dict[tuple[int, ...], int] = {}
    expand = [first.setdefault(tuple(r), len(first)) for r in rows]
    unique: list[int] = []
    for i, k in enumerate(expand):
        if k == len(unique):  # a row's first copy: the copies are numbered in the order they first appear
            unique.append(i)
    return unique, expand


def repeat_rows(logits: Float[torch.Tensor, "distinct vocab"], cache: Cache, expand: list[int]
                 ) -> Float[torch.Tensor, "batch vocab"]:
    """Logits and cache rows of the distinct rows repeated back to every row (`distinct_rows`)."""
    import torch

    index = torch.tensor(expand, device=logits.device)
    cache.batch_select_indices(index)
    return logits[index]


def growing_cache() -> Cache:
    return growing_cache_class()()


@functools.cache
def growing_cache_class() -> type:
    """The class of `growing_cache`: a DynamicCache whose layers append each step's keys and values into buffers with spare room.

    DynamicLayer concatenates the whole cache with each new token: on a CPU that copy was 57% of a decode step
    (torch.profiler, SmolLM2, 8 rows, ~1,000 tokens of context, 40 steps: 34.8 s, then 17.8 s with this cache).
    Here a layer writes the new states
    into its buffer and hands attention a view of the filled part: the same keys and values, so the same
    logits. Whoever replaces `keys`/`values` (batch_select_indices, `shift_rows`, a deepcopy) leaves a tensor
    that is no longer a view of the buffer; the next update notices and copies it into a new buffer."""
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import Cache as BaseCache, DynamicLayer

    class GrowingLayer(DynamicLayer):
        _kbuf: torch.Tensor | None = None
        _vbuf: torch.Tensor | None = None

        def _is_view(self) -> bool:
            k, buf = self.keys, self._kbuf
            return (buf is not None and k is not None and k.numel() > 0 and k.data_ptr() == buf.data_ptr()
                    and k.shape[:2] == buf.shape[:2] and k.shape[-1] == buf.shape[-1] and k.stride() == buf.stride()
                    and self.values.data_ptr() == self._vbuf.data_ptr() and self.values.shape == k.shape)

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
                   ) -> tuple[torch.Tensor, torch.Tensor]:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n_old = self.keys.shape[-2] if self.keys.numel() else 0
            n_new = n_old + key_states.shape[-2]
            if not self._is_view() or self._kbuf.shape[-2] < n_new:
                cap = n_new + max(64, n_new // 2)  # room for the next tokens: a copy every ~n/2 steps, not every one
                b, h, _, d = key_states.shape
                kbuf = key_states.new_empty((b, h, cap, d))
                vbuf = value_states.new_empty((b, h, cap, value_states.shape[-1]))
                if n_old:
                    kbuf[:, :, :n_old] = self.keys
                    vbuf[:, :, :n_old] = self.values
                self._kbuf, self._vbuf = kbuf, vbuf
            self._kbuf[:, :, n_old:n_new] = key_states
            self._vbuf[:, :, n_old:n_new] = value_states
            self.keys, self.values = self._kbuf[:, :, :n_new], self._vbuf[:, :, :n_new]
            return self.keys, self.values

    class GrowingCache(DynamicCache):
        def __init__(self) -> None:
            BaseCache.__init__(self, layer_class_to_replicate=GrowingLayer)

    return GrowingCache


def shift_rows(cache: Cache, shift: Sequence[int]) -> None:
    """Repeat a batch-1 prefix cache for len(shift) rows, row i moved right by shift[i] slots (zeros on the left)."""
    b = len(shift)
    layers = getattr(cache, "layers", None)
    if layers is None:
        if any(shift):
            raise ModelError(f"cannot lay out suffixes of different lengths in a {type(cache).__name__}")
        cache.batch_repeat_interleave(b)
        return
    for layer in layers:
        if "Sliding" in type(layer).__name__:
            raise ModelError("a sliding-window cache layer cannot be shifted; the runtime passes a full DynamicCache")
        if getattr(layer, "keys", None) is None or not getattr(layer, "is_initialized", True):
            continue
        for attr in ("keys", "values"):
            t = getattr(layer, attr)  # [1, heads, prefix, head_dim]
            n = t.shape[-2]
            out = t.new_zeros((b, *t.shape[1:]))
            for i, p in enumerate(shift):
                if p < n:
                    out[i, :, p:, :] = t[0, :, : n - p, :]
            setattr(layer, attr, out)


def prefix_cache(rt: Runtime, prefix: Sequence[int], path: str, hooks: Hooks = ()) -> Cache:
    """A fresh KV cache of `prefix` (batch 1). Unhooked ones are computed on first use, then copied from the
    last `rt.PREFIXES_KEPT` prefixes (the same tensors as computing it again: the same call on the same weights);
    a hooked one is computed each time with its hooks and not kept."""
    import torch

    key = (path, tuple(prefix))
    kept = None if hooks else rt._prefixes.pop(key, None)
    if kept is None:
        pre_ids = torch.tensor([list(prefix)], dtype=torch.long, device=rt.device)
        with torch.inference_mode(), rt._attached(hooks, path):
            _, kept = rt._forward(pre_ids, torch.ones_like(pre_ids), rt._new_cache(), path)
        if hooks:
            return kept
    rt._prefixes[key] = kept  # most recently used last
    while len(rt._prefixes) > rt.PREFIXES_KEPT:
        rt._prefixes.pop(next(iter(rt._prefixes)))
    return copy.deepcopy(kept)


def suffix_block(rt: Runtime, prefix: Sequence[int], suffixes: Sequence[Sequence[int]]
                 ) -> tuple[Int[torch.Tensor, "batch width"], Int[torch.Tensor, "batch total"], list[int]]:
    """The layout of `continue_batch` (module docstring): the block of tokens that follows a batch-1 prefix
    cache shifted by `shift[i]` slots per row, and the attention mask over prefix and block. Prompt position
    a >= len(prefix) of row i sits in block column a + shift[i] - len(prefix)."""
    import torch

    b, n_pre = len(suffixes), len(prefix)
    width = max(len(s) for s in suffixes)
    shift = [width - len(s) for s in suffixes]  # row i's padding, all of it on the left
    rows = []
    for s, p in zip(suffixes, shift):
        full = list(prefix) + list(s)
        rows.append([rt.pad_id] * max(p - n_pre, 0) + full[max(n_pre - p, 0):])
    block = torch.tensor(rows, dtype=torch.long, device=rt.device)
    mask = torch.ones((b, n_pre + width), dtype=torch.long, device=rt.device)
    for i, p in enumerate(shift):
        mask[i, :p] = 0
    return block, mask, shift
