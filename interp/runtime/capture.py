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

from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class PlainPrompt:
    """A text as the model reads it: its tokens, named positions (token indices) and each token's character span."""

    text: str  #: the text tokenised (the chat template applied when chat=True)
    tokens: tuple[int, ...]
    positions: dict[str, int] = field(default_factory=dict)
    offsets: tuple[tuple[int, int], ...] = ()  #: (start, end) character span of each token in `text`


def _last_token_before(offsets: tuple[tuple[int, int], ...], end: int) -> int:
    best = -1
    for i, (a, b) in enumerate(offsets):
        if a < end and b > a:
            best = i
    return best


def plain_prompt(tokenizer: Any, text: str, positions: Mapping[str, str | int] | None = None, chat: bool = False,
                 system: str | None = None) -> PlainPrompt:
    """Tokenise `text` (wrapped in the chat template with `chat`, with an optional `system` message) and locate
    `positions` (name -> substring of `text` or token index); "last" (the final token) is always there."""
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
    for name, where in {**(positions or {}), "last": (positions or {}).get("last", -1)}.items():
        if isinstance(where, bool) or not isinstance(where, (int, str)):
            raise ValueError(f"position {name!r}: a substring of the prompt or a token index, not {where!r}")
        if isinstance(where, int):
            index = where + len(ids) if where < 0 else where
            if not 0 <= index < len(ids):
                raise ValueError(f"position {name!r}: token index {where} out of range for {len(ids)} tokens")
            found[name] = index
            continue
        at = text.find(where) if where else -1
        if at < 0:
            raise ValueError(f"position {name!r}: {where!r} is not in the prompt")
        index = _last_token_before(offsets, start + at + len(where))
        if index < 0:
            raise ValueError(f"position {name!r}: no token covers {where!r}")
        found[name] = index
    return PlainPrompt(full, ids, found, offsets)


__all__ = ["PlainPrompt", "plain_prompt"]
