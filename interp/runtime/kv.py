"""KV-cache surgery and prefix sharing, used by the generation loop and by capture.

- `growing_cache()`: a full `DynamicCache` (no sliding-window truncation) whose layers write each step into
  buffers with spare room instead of concatenating the whole cache every token;
- `shift_rows(cache, shift)`: a batch-1 prefix cache repeated for each row, row i moved right by shift[i] slots,
  the layout `continue_batch` uses (the runtime's module docstring says why padding never goes in the middle);
- `distinct_rows` / `repeat_rows`: a prompt given several times is computed once and its rows repeated;
- `common_prefix` / `prefix_groups`: which rows share a prefix long enough (`SHARED_PREFIX_MIN`) to compute once;
- `prefix_cache(rt, prefix)`: that prefix's KV cache, the last `Runtime.PREFIXES_KEPT` kept, computed in fixed
  `PREFIX_CHUNK`-token pieces whose boundary caches are kept too; `suffix_block`: the tokens and attention mask of
  the suffixes that follow it, and `length_groups`: suffixes of like length, to prefill in one block each;
- `share_prefix` / `shared_prefix_attention`: a continue_batch cache laid out with the prefix kept once, which a
  decode step attends once for all rows (float32, sdpa, no sliding window: `can_share_prefix`).
"""

from __future__ import annotations

import copy
import functools
import math
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
        #: a prefix every row attends before its own slots, kept once (`share_prefix`): (keys, values), batch 1
        _shared: tuple[torch.Tensor, torch.Tensor] | None = None

        def get_seq_length(self) -> int:
            own = super().get_seq_length()
            return own + self._shared[0].shape[-2] if self._shared is not None else own

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
            if self._shared is not None:  # the attention reads the shared prefix from the keys it is handed
                setattr(self.keys, SHARED, self._shared)
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


#: an unhooked prefix is computed in pieces that end at multiples of this many tokens (`prefix_cache`)
PREFIX_CHUNK = 256


def prefix_cache(rt: Runtime, prefix: Sequence[int], path: str, hooks: Hooks = ()) -> Cache:
    """A fresh KV cache of `prefix` (batch 1). Unhooked ones are computed on first use, then copied from the
    last `rt.PREFIXES_KEPT` prefixes (the same tensors as computing it again: the same call on the same weights);
    a hooked one is computed each time with its hooks and not kept.

    An unhooked prefix is computed in pieces ending at each multiple of `PREFIX_CHUNK` tokens, then the rest, and
    the cache at each such boundary is kept (the last `rt.CHUNKS_KEPT`): prefixes that begin alike (every cut of
    the intervention stage starts with the same worked examples and prompt) compute their common start once. The
    pieces are the same for a prefix whatever was computed before, so its cache does not depend on the order of
    the calls (a resumed stage computes what an unbroken one did; tested)."""
    import torch

    if hooks:
        pre_ids = torch.tensor([list(prefix)], dtype=torch.long, device=rt.device)
        with torch.inference_mode(), rt._attached(hooks, path):
            _, cache = rt._forward(pre_ids, torch.ones_like(pre_ids), rt._new_cache(), path)
        return cache
    key = (path, tuple(prefix))
    kept = rt._prefixes.pop(key, None)
    _keep(rt._prefixes, key, kept if kept is not None else _in_chunks(rt, list(prefix), path), rt.PREFIXES_KEPT)
    return copy.deepcopy(rt._prefixes[key])


def _keep(store: dict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """Put `value` last in the least-recently-used `store` (a dict in use order), dropping the oldest past `limit`."""
    store.pop(key, None)
    store[key] = value
    while len(store) > limit:
        store.pop(next(iter(store)))


def _in_chunks(rt: Runtime, prefix: list[int], path: str) -> Cache:
    """The cache of `prefix`, computed from the longest kept boundary cache that it starts with (`prefix_cache`)."""
    import torch

    n = len(prefix)
    bounds = list(range(PREFIX_CHUNK, n, PREFIX_CHUNK))
    start, cache = 0, None
    for b in reversed(bounds):
        got = rt._chunks.get((path, tuple(prefix[:b])))
        if got is not None:
            _keep(rt._chunks, (path, tuple(prefix[:b])), got, rt.CHUNKS_KEPT)  # most recently used last
            start, cache = b, copy.deepcopy(got)
            break
    if cache is None:
        cache = rt._new_cache()
    with torch.inference_mode():
        for end in [b for b in bounds if b > start] + [n]:
            ids = torch.tensor([prefix[start:end]], dtype=torch.long, device=rt.device)
            _, cache = rt._forward(ids, torch.ones((1, end), dtype=torch.long, device=rt.device), cache, path)
            if end < n:
                _keep(rt._chunks, (path, tuple(prefix[:end])), copy.deepcopy(cache), rt.CHUNKS_KEPT)
            start = end
    return cache


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


# ------------------------------------------------------------------ a shared prefix attended once per step

#: the attribute of a layer's keys that carries the batch-1 prefix keys and values every row attends first
SHARED = "_ambench_shared_prefix"


#: the architectures whose attention goes through transformers' attention functions with the standard arguments, each
#: checked by tests/interp/archs.py (continue == generate alone). Others keep a copy per row: Falcon calls sdpa
#: itself (the shared layout's keys then missed the prefix: a crash), DeepSeek V2/V3's latent attention decoded
#: other tokens (entropies off by 0.035): both found by an outside check; remote code is not known at all
SHARED_DECODE_TYPES = frozenset({"llama", "qwen2", "qwen3", "glm", "glm4", "mistral", "phi3", "olmo2", "gpt_neox", "gpt2"})


def is_float32(rt: Runtime) -> bool:
    import torch

    return getattr(rt.model, "dtype", None) == torch.float32


def can_share_prefix(rt: Runtime, path: str) -> bool:
    """Whether decoding may keep a shared prefix once (`share_prefix`): the model's own blocks ('hf' path) of an
    architecture in `SHARED_DECODE_TYPES`, in float32, with sdpa attention and no sliding-window layer (there a
    token's window is counted in cache slots, which the shared layout moves for padded rows). In bfloat16 the scores'
    products would round to 2^-8 where sdpa's kernel sums in float32, and greedy tokens then differ from generating
    alone (a tiny llama did); upcasting every cached key each step would cost more than it saves."""
    cfg = getattr(rt.model, "config", None)
    if path != "hf" or cfg is None or getattr(cfg, "_attn_implementation", None) != "sdpa":
        return False
    if getattr(cfg, "model_type", None) not in SHARED_DECODE_TYPES or getattr(rt.info, "trust_remote_code", False):
        return False
    if not is_float32(rt):
        return False
    types = getattr(cfg, "layer_types", None) or ()
    return not getattr(cfg, "sliding_window", None) and all(t == "full_attention" for t in types)


def share_prefix(prefix: Cache, parts: Sequence[tuple[Cache, Sequence[int]]], lengths: Sequence[int], n_pre: int
                 ) -> tuple[Cache, Int[torch.Tensor, "batch total"]] | None:
    """Lay out `continue_batch` caches so that decoding reads the common prefix once per step, not once per row.

    Each cache of `parts` holds its rows (indices into `lengths`, each row's suffix length) laid out by
    `suffix_block`: the prefix shifted right by the row's padding, then the row's block (a padded row's block starts
    with the prefix's last tokens), the block as wide as the part's longest suffix; `prefix` is the batch-1 cache of
    the prefix itself. The result keeps, in each layer, the prefix's keys and values once (batch 1, slots
    0..n_pre-1 of every row) and, per row, only the slots after the prefix: the row's suffix at the right of the
    widest part's block (the columns before it masked), then what decoding appends. A step's attention
    (`shared_prefix_attention`) scores every row's query against the prefix in one product and against the row's
    own slots, and takes one softmax over both. The same keys and values are attended with the same mask, so the
    same attention up to float rounding; on a CPU a decode step reads the cache once per row, and the prefix is most
    of it (SmolLM2's two worked examples: 807 of ~1,100 tokens a row). Returns the cache (the first part's, rows in
    the order of `lengths`) and the mask of the new layout ([rows, n_pre + widest block]), or None when a cache is
    not one this can lay out (then nothing is changed)."""
    import torch

    cls = growing_cache_class()
    pre_layers = getattr(prefix, "layers", None)
    if pre_layers is None or not parts:
        return None
    if any(getattr(p, "keys", None) is None or p.keys.shape[0] != 1 or p.keys.shape[-2] != n_pre for p in pre_layers):
        return None
    widths = []
    for cache, rows in parts:
        layers = getattr(cache, "layers", None)
        if not isinstance(cache, cls) or layers is None or len(layers) != len(pre_layers) or layers[0].keys.shape[0] != len(rows):
            return None
        widths.append(layers[0].keys.shape[-2] - n_pre)
        if any(not 0 < lengths[r] <= widths[-1] for r in rows):
            return None
    if sorted(r for _, rows in parts for r in rows) != list(range(len(lengths))):
        return None
    width = max(widths)
    first = parts[0][0]
    alone = len(parts) == 1 and list(parts[0][1]) == list(range(len(lengths)))
    for li, pre in enumerate(pre_layers):
        for attr in ("keys", "values"):
            if alone:  # [rows, heads, n_pre + width, head_dim]: the row's slots after the prefix's
                out = getattr(first.layers[li], attr)[:, :, n_pre:].contiguous()
            else:
                t0 = getattr(first.layers[li], attr)
                out = t0.new_zeros((len(lengths), t0.shape[1], width, t0.shape[-1]))
                for (cache, rows), w in zip(parts, widths):  # each part's block, right-aligned
                    index = torch.tensor(list(rows), device=t0.device)
                    out[index, :, width - w:] = getattr(cache.layers[li], attr)[:, :, n_pre:]
            setattr(first.layers[li], attr, out)
        first.layers[li]._shared = (pre.keys, pre.values)  # [1, heads, n_pre, head_dim]
    return first, shared_mask(lengths, n_pre, width, first.layers[0].keys.device)


def shared_mask(lengths: Sequence[int], n_pre: int, width: int, device: Any = None) -> Int[torch.Tensor, "batch total"]:
    """The attention mask of `share_prefix`'s layout: the prefix, then in the block only each row's suffix."""
    import torch

    mask = torch.ones((len(lengths), n_pre + width), dtype=torch.long, device=device)
    for i, n in enumerate(lengths):  # the block's columns before the suffix: padding or the prefix's tail again
        mask[i, n_pre: n_pre + width - n] = 0
    return mask


#: a group of `length_groups` costs this many token slots besides its rows' (one more forward pass)
GROUP_COST = 64


def length_groups(lengths: Sequence[int]) -> list[list[int]]:
    """Rows (indices) in groups of similar length, each group prefilled as one block as wide as its longest row:
    the split (of the rows sorted by length) with the fewest computed slots, `GROUP_COST` per group after the first.
    A batch's block otherwise computes every row as wide as the longest (SmolLM2's 20 translation prompts: 71 to
    311 tokens after the examples, 6,220 slots for 3,677 tokens)."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    size = [lengths[i] for i in order]
    n = len(order)
    best, cut = [0] + [math.inf] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            c = best[i] + (j - i) * size[j - 1] + (GROUP_COST if i else 0)
            if c < best[j]:
                best[j], cut[j] = c, i
    groups, j = [], n
    while j > 0:
        groups.append(sorted(order[cut[j]:j]))
        j = cut[j]
    return groups[::-1]


def shared_prefix_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, except for keys that carry a shared prefix (`share_prefix`): there, one softmax
    over the prefix's slots (scored for all rows in one product) and the row's own slots. Every other call goes to
    sdpa unchanged (`install_shared_prefix_attention`)."""
    import torch

    shared = getattr(key, SHARED, None)
    if shared is None:
        return _SDPA[0](module, query, key, value, attention_mask, *args, **kwargs)
    pk, pv = shared
    b, h, q, d = query.shape
    kvh, n_pre = key.shape[1], pk.shape[-2]
    g = h // kvh
    scaling = kwargs.get("scaling")
    scaling = d ** -0.5 if scaling is None else scaling
    odd = kwargs.get("softcap") is not None or kwargs.get("s_aux") is not None or kwargs.get("position_bias") is not None
    if odd or kvh * g != h or (attention_mask is None and q > 1):  # anything else: the full keys, through sdpa
        full_k = torch.cat([pk.expand(b, -1, -1, -1), key], dim=2)
        full_v = torch.cat([pv.expand(b, -1, -1, -1), value], dim=2)
        return _SDPA[0](module, query, full_k, full_v, attention_mask, *args, **kwargs)
    qg = query.reshape(b, kvh, g * q, d)  # query head j reads key head j // g (transformers' repeat_kv)
    s_pre = torch.matmul(qg.transpose(0, 1).reshape(kvh, b * g * q, d), pk[0].transpose(-1, -2))  # [kvh, b*g*q, n_pre]
    s_pre = s_pre.reshape(kvh, b, g * q, n_pre).transpose(0, 1)
    s_own = torch.matmul(qg, key.transpose(-1, -2))  # [b, kvh, g*q, own]
    scores = torch.cat([s_pre, s_own], dim=-1) * scaling
    if attention_mask is not None:  # [b, 1, q, n_pre + own]: bool (True attends) or additive
        m = attention_mask[..., -scores.shape[-1]:]
        m = m.unsqueeze(2).expand(b, m.shape[1], g, q, m.shape[-1]).reshape(b, m.shape[1], g * q, m.shape[-1])
        scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    p_pre, p_own = probs[..., :n_pre], probs[..., n_pre:]
    out = torch.matmul(p_pre.transpose(0, 1).reshape(kvh, b * g * q, n_pre), pv[0]).reshape(kvh, b, g * q, d)
    out = out.transpose(0, 1) + torch.matmul(p_own, value)  # [b, kvh, g*q, d]
    return out.reshape(b, h, q, d).transpose(1, 2).contiguous(), None


_SDPA: list[Any] = []


def install_shared_prefix_attention() -> None:
    """Put `shared_prefix_attention` in transformers' "sdpa" slot once (it hands every call without a shared prefix
    to the sdpa it replaced, so those are computed exactly as before)."""
    from transformers.modeling_utils import AttentionInterface

    if not _SDPA:
        _SDPA.append(AttentionInterface._global_mapping["sdpa"])
        AttentionInterface._global_mapping["sdpa"] = shared_prefix_attention
