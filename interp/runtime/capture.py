"""Positions in a researcher's own prompt: any text, positions named by a substring or a token index.

`interp.prompts.build` renders the study's canvas prompts (system prompt, protocols, three fixed positions).
`plain_prompt(tokenizer, text, positions={"city": "Paris", "last": -1})` takes any text as it is (or wrapped in
the model's chat template with `chat=True`) and names positions the way the study does, on character offsets,
so a name means the same token for every tokenizer: a substring's position is the last token that starts
before the end of its first occurrence (in the user's text, never in the template around it); an int is a
token index (negative from the end). The promise: a position is found or refused in one sentence (a substring
that is not in the text, an index out of range), never silently a neighbouring token. `FREE_TEXT` is the stop
rule for free text: end of turn/EOS or the token cap, no code fence.
"""

from __future__ import annotations

import numpy as np

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from interp.models import ModelError
from interp.runtime import kv
from interp.runtime.load import _is_oom

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float

    from interp.runtime import Runtime


@dataclass(frozen=True)
class PlainPrompt:
    """A text as the model reads it: its tokens, named positions (token indices) and each token's character span."""

    text: str  #: the text tokenised (the chat template applied when chat=True)
    tokens: tuple[int, ...]
    positions: dict[str, int] = field(default_factory=dict)
    offsets: tuple[tuple[int, int], ...] = ()  #: (start, end) character span of each token in `text`
    #: every named position's whole span: for a substring, each token whose characters overlap it, in order (its last
    #: is `positions[name]`; "21" that a tokenizer splits into "2" and "1" names both); for an index, that token alone
    spans: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _last_token_before(offsets: tuple[tuple[int, int], ...], end: int) -> int:
    best = -1
    for i, (a, b) in enumerate(offsets):
        if a < end and b > a:
            best = i
    return best


def _tokens_over(offsets: tuple[tuple[int, int], ...], start: int, end: int) -> tuple[int, ...]:
    """The tokens whose characters overlap [start, end), in order."""
    return tuple(i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start)


def plain_prompt(tokenizer: Any, text: str, positions: Mapping[str, str | int] | None = None, chat: bool = False,
                 system: str | None = None) -> PlainPrompt:
    """Tokenise `text` (wrapped in the chat template with `chat`, with an optional `system` message) and locate
    `positions` (name -> substring of `text` or token index); "last" (the final token) is always there.
    `.positions[name]` is one token (a substring's last), `.spans[name]` every token of it.

    Args:
        tokenizer: the model's tokenizer (`rt.tokenizer`).
        text: the prompt, tokenised as it is.
        positions: name -> a substring (its first occurrence) or a token index (negative from the end).
        chat: wrap the text in the tokenizer's chat template (a user turn and the generation prompt).
        system: a system message before it (with `chat`).

    Example::

        p = plain_prompt(rt.tokenizer, "A red ball at row 21.", {"row": "21"})
        p.positions["row"]    # the token where "21" ends (the ones digit if the tokenizer splits numbers)
        p.spans["row"]        # every token of "21", e.g. (6, 7)
    """
    if not isinstance(text, str) or not text:
        raise ValueError("the prompt must be a non-empty text")
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("this tokenizer has no chat template: use chat=False")
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        full = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        start = full.rfind(text)
        if start < 0:
            raise ValueError("the chat template changed the text; cannot place positions in it")
        special = False  # the template writes its own special tokens
    else:
        full, start, special = text, 0, True
    enc = tokenizer(full, add_special_tokens=special, return_offsets_mapping=True)
    ids, offsets = tuple(enc["input_ids"]), tuple(tuple(o) for o in enc["offset_mapping"])
    if not ids:
        raise ValueError("the prompt has no tokens")
    found: dict[str, int] = {}
    spans: dict[str, tuple[int, ...]] = {}
    for name, where in {**(positions or {}), "last": (positions or {}).get("last", -1)}.items():
        if isinstance(where, bool) or not isinstance(where, (int, str)):
            raise ValueError(f"position {name!r}: a substring of the prompt or a token index, not {where!r}")
        if isinstance(where, int):
            index = where + len(ids) if where < 0 else where
            if not 0 <= index < len(ids):
                raise ValueError(f"position {name!r}: token index {where} out of range for {len(ids)} tokens")
            found[name] = index
            spans[name] = (index,)
            continue
        at = text.find(where) if where else -1
        if at < 0:
            raise ValueError(f"position {name!r}: {where!r} is not in the prompt")
        index = _last_token_before(offsets, start + at + len(where))
        if index < 0:
            raise ValueError(f"position {name!r}: no token covers {where!r}")
        found[name] = index
        spans[name] = tuple(i for i in _tokens_over(offsets, start + at, start + at + len(where)) if i <= index)
    return PlainPrompt(full, ids, found, offsets, spans)


__all__ = ["PlainPrompt", "plain_prompt"]


# ------------------------------------------------------------------ residual capture (Runtime.capture)

def capture(rt: Runtime, prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]],
            layers: Sequence[int] | None = None, final: str = "pre-norm") -> Float[torch.Tensor, "batch site pos d_model"]:
    """`Runtime.capture` (its docstring says what comes back): groups rows that share a long prefix
    (`kv.prefix_groups`) and runs each group whole (`capture_whole`) or after its prefix (`capture_after`)."""
    import torch

    from interp.runtime.forward import token_rows

    prompts = token_rows(rt, prompts)
    if positions is None or isinstance(positions, (str, bytes)) or not hasattr(positions, "__iter__"):
        raise TypeError(f"positions must be one list of token indices per prompt, not {type(positions).__name__}")
    positions = [list(p) if hasattr(p, "__iter__") and not isinstance(p, (str, bytes)) else p for p in positions]
    if len(positions) != len(prompts) or not all(isinstance(p, list) for p in positions):
        raise ValueError(f"positions: one list of token indices per prompt ({len(prompts)} prompts, "
                         f"{len(positions)} entries)")
    if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) for p in positions for x in p):
        raise TypeError("positions must be token indices (ints)")
    positions = [[int(x) for x in p] for p in positions]
    n_pos = {len(p) for p in positions}
    if len(n_pos) != 1:
        raise ValueError("every prompt needs the same number of positions")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    for pos, prompt in zip(positions, prompts):
        if any(not 0 <= p < len(prompt) for p in pos):
            raise ValueError(f"position out of range 0..{len(prompt) - 1}: {list(pos)}")
    groups = kv.prefix_groups(prompts, positions) if rt.share_prefill else [(0, list(range(len(prompts))))]
    parts = []
    try:
        for common, rows in groups:
            if common >= kv.SHARED_PREFIX_MIN:
                # suffixes of unlike lengths in groups of like length, each a block as wide as its longest
                for sub in kv.length_groups([len(prompts[r]) - common for r in rows]):
                    these = [rows[i] for i in sub]
                    part = capture_after(rt, list(prompts[these[0]][:common]), [list(prompts[r][common:]) for r in these],
                                         [[p - common for p in positions[r]] for r in these], layers, final)
                    parts.append((these, part))
            else:
                part = capture_whole(rt, [prompts[r] for r in rows], [positions[r] for r in rows], layers, final)
                parts.append((rows, part))
    except Exception as e:  # noqa: BLE001
        if _is_oom(e):
            raise ModelError(f"out of memory capturing a batch of {len(prompts)}: lower --batch-size") from None
        raise
    if len(parts) == 1 and parts[0][0] == list(range(len(prompts))):
        return parts[0][1]
    out = torch.empty((len(prompts), *parts[0][1].shape[1:]), dtype=parts[0][1].dtype)
    for rows, part in parts:
        out[rows] = part
    return out


def capture_whole(rt: Runtime, prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]],
                   layers: Sequence[int] | None, final: str) -> Float[torch.Tensor, "batch site pos d_model"]:
    """`capture` with one forward pass over the left-padded prompts."""
    import torch

    from hooks.capture import PositionCapture

    ids, mask, offsets = rt.pad(prompts)
    index = torch.tensor([[off + p for p in pos] for off, pos in zip(offsets, positions)], dtype=torch.long)
    names = rt.hook_names(layers, final)
    cap = PositionCapture(index.to(ids.device), len(names))
    fwd_hooks = capture_hooks(rt, cap, names)
    pos_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
    path = rt._path(fwd_hooks)
    with torch.inference_mode():
        if path == "bridge":
            rt.bridge.run_with_hooks(ids, fwd_hooks=fwd_hooks, attention_mask=mask, position_ids=pos_ids,
                                       return_type=None, logits_to_keep=1)
        else:
            extra = {"logits_to_keep": 1} if rt._logits_to_keep else {}
            with rt.sites.attached(fwd_hooks):
                rt.model(input_ids=ids, attention_mask=mask, position_ids=pos_ids, use_cache=False, **extra)
    return cap.result()


def capture_after(rt: Runtime, prefix: Sequence[int], suffixes: Sequence[Sequence[int]], positions: Sequence[Sequence[int]],
                   layers: Sequence[int] | None, final: str) -> Float[torch.Tensor, "batch site pos d_model"]:
    """`capture` of `prefix + suffixes[i]` at `positions[i]` (indices into the suffix): the shared prefix is
    computed once into a KV cache, unhooked (no captured position lies in it), and the suffixes run on it with
    the capture hooks, laid out as `continue_batch` lays them out. The same activations as one pass per prompt
    up to float rounding (tests/interp/test_runtime.py bounds it on every architecture)."""
    import torch

    from hooks.capture import PositionCapture

    block, mask, shift = kv.suffix_block(rt, prefix, suffixes)
    index = torch.tensor([[p + s for p in pos] for pos, s in zip(positions, shift)], dtype=torch.long)
    names = rt.hook_names(layers, final)
    cap = PositionCapture(index.to(block.device), len(names))
    fwd_hooks = capture_hooks(rt, cap, names)
    path = rt._path(fwd_hooks)
    with torch.inference_mode():
        cache = kv.prefix_cache(rt, prefix, path)
        kv.shift_rows(cache, shift)
        with rt._attached(fwd_hooks, path):
            rt._forward(block, mask, cache, path)
    return cap.result()


def capture_hooks(rt: Runtime, cap: Any, names: Sequence[str]) -> list[tuple[str, Callable[..., Any]]]:
    grouped = rt.canonical_hooks(names)
    site_of = {n: i for i, n in enumerate(names)}
    return [(canon, cap.hook([site_of[a] for a in aliases])) for canon, aliases in grouped.items()]

# ------------------------------------------------------------------ forward, cache, patching (forward.py, patching.py)
