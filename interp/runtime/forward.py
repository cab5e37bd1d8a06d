"""The forward pass from Python: logits with any hooks attached, and a cache of any hook names at chosen positions.

`Runtime.forward(inputs, hooks=[(name, fn), ...])` returns the logits of a teacher-forced pass and
`Runtime.run_with_cache(inputs, names=..., positions=...)` returns them with the activations of any hook
names, in TransformerLens's idiom (`fn(tensor, hook)`, a cache keyed by hook name). The promises:

- **One path per call, the same numbers either way.** Residual-stream names (`blocks.{L}.hook_resid_pre/post`,
  `hook_in/out`, `ln_final.hook_out`) run as forward hooks on the model's own blocks; any other name (`hook_z`,
  `hook_mlp_out`, `attn.hook_pattern`, ...) runs through the TransformerBridge over the same weights. Where both
  apply the results are equal (tests/interp/test_forward.py: bit for bit when the model runs eager attention).
  Without this a user's numbers would depend on which names they happened to ask for in the same call.
- **Inputs as a user has them.** A text, a list of texts, a token list or a list of token lists; rows of
  different lengths are left-padded with an attention mask and explicit position ids, so a row's logits are
  the ones it gets alone (up to float rounding). Positions are indices into each row's own tokens (a negative
  index counts from its end), never padded columns: the bug this prevents is a cache read at a pad token.
- **Only what is asked is kept.** A cached activation is sliced to the requested positions inside the hook
  (the query axis of an attention pattern), so a cache of every layer at three positions holds
  [batch, 3, ...] per name, never [batch, seq, ...].
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch
    from jaxtyping import Float, Int

Hooks = Sequence[tuple[str, Callable[..., Any]]]
#: hook names whose position axis is 2 (the query axis of [batch, head, query, key]); every other hook is [batch, pos, ...]
QUERY_AXIS_SUFFIXES = ("hook_pattern", "hook_attn_scores")


def position_axis(name: str) -> int:
    """The axis of a hook's tensor that indexes token positions: 2 for attention patterns/scores, else 1."""
    return 2 if name.endswith(QUERY_AXIS_SUFFIXES) else 1


def _is_id(t: Any) -> bool:
    return isinstance(t, int) and not isinstance(t, bool)


def as_rows(tokenizer: Any, inputs: Any, limit: int | None = None) -> list[list[int]]:
    """Token rows from a text, a list of texts, a token list, a list of token lists, or a 1-D/2-D tensor; `limit`:
    a row of token ids longer than it is refused by its length, before its ids are read."""
    if isinstance(inputs, str):
        inputs = [inputs]
    if hasattr(inputs, "tolist") and not isinstance(inputs, (list, tuple)):
        inputs = inputs.tolist()
    if inputs is None or isinstance(inputs, (bytes, dict, set)) or not hasattr(inputs, "__iter__"):
        raise TypeError("inputs must be a text, a list of texts, token ids (a list of ints) or a list of token-id lists, "
                        f"not {type(inputs).__name__}")
    inputs = list(inputs)
    if not inputs:
        raise ValueError("no input: give a text, a list of texts, or token ids")
    if limit is not None and len(inputs) > limit and all(_is_id(x) for x in inputs[:64]):
        raise ValueError(f"inputs is {len(inputs):,} tokens; the model's context is {limit:,} tokens: shorten it")
    if all(_is_id(x) for x in inputs):
        inputs = [inputs]
    rows = []
    for i, x in enumerate(inputs):
        if limit is not None and not isinstance(x, str) and hasattr(x, "__len__") and len(x) > limit:
            raise ValueError(f"inputs[{i}] is {len(x):,} tokens; the model's context is {limit:,} tokens: shorten it")
        if isinstance(x, str):
            rows.append(list(tokenizer(x, add_special_tokens=True)["input_ids"]))
        elif hasattr(x, "__len__") and not isinstance(x, (bytes, dict)) and all(_is_id(t) for t in x):
            rows.append([int(t) for t in x])
        else:
            raise TypeError("each input must be a text or a list of token ids (ints)")
    if any(len(r) == 0 for r in rows):
        raise ValueError("every input needs at least one token")
    return rows


@dataclass
class Batch:
    """Left-padded rows: ids and mask [batch, width], position ids, and each row's offset (its pad count)."""

    ids: Int[torch.Tensor, "batch seq"]
    mask: Int[torch.Tensor, "batch seq"]
    pos: Int[torch.Tensor, "batch seq"]
    offsets: list[int]
    lengths: list[int]

    def columns(self, positions: Sequence[int] | Sequence[Sequence[int]] | None) -> Int[torch.Tensor, "batch n"] | None:
        """Padded column of each requested position per row ([batch, n]); None keeps every column.

        `positions` is one list for every row or one list per row; indices into the row's own tokens,
        negative ones counted from its end."""
        import torch

        if positions is None:
            return None
        positions = list(positions)
        per_row = [list(p) for p in positions] if positions and hasattr(positions[0], "__len__") else [positions] * len(self.offsets)
        if len(per_row) != len(self.offsets):
            raise ValueError(f"positions: one list for every row or one per row ({len(self.offsets)} rows)")
        if len({len(p) for p in per_row}) != 1:
            raise ValueError("every row needs the same number of positions")
        cols = []
        for off, n, pos in zip(self.offsets, self.lengths, per_row):
            row = []
            for p in pos:
                if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
                    raise TypeError(f"positions must be token indices (ints), not {p!r}")
                p = int(p)
                q = p + n if p < 0 else p
                if not 0 <= q < n:
                    raise ValueError(f"position {p} out of range for a row of {n} tokens")
                row.append(off + q)
            cols.append(row)
        return torch.tensor(cols, dtype=torch.long)


#: bytes of text per token of context the tokenizer is given at most (a token is a few bytes; 64 bounds any text
#: whose tokens could fit the context, and keeps a 10 MB prompt away from the tokenizer and the model)
BYTES_PER_TOKEN = 64


def context_length(rt: Any) -> int | None:
    """The model's context in tokens (its config's max_position_embeddings or equivalent), None when it states none."""
    return context_of(getattr(rt.model, "config", None))


def context_of(cfg: Any) -> int | None:
    """The context a model config states (a transformers config, or its config.json as a dict), None when none."""
    def get(c: Any, key: str) -> Any:
        return c.get(key) if isinstance(c, dict) else getattr(c, key, None)

    for c in (cfg, get(cfg, "text_config") if cfg is not None else None):
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx"):
            v = get(c, key) if c is not None else None
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
    return None


def check_length(rt: Any, n_tokens: int, what: str) -> None:
    """One sentence when a prompt of n_tokens exceeds the model's context, before any forward."""
    ctx = context_length(rt)
    if ctx is not None and n_tokens > ctx:
        raise ValueError(f"{what} is {n_tokens:,} tokens; {rt.info.name}'s context is {ctx:,} tokens: shorten it")


def check_text(rt: Any, text: str, what: str) -> None:
    """One sentence when a text is too long for the tokenizer to be given (BYTES_PER_TOKEN x the context)."""
    ctx = context_length(rt)
    cap = BYTES_PER_TOKEN * (ctx or 8192)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > cap:
        raise ValueError(f"{what} is {size:,} bytes of text; {rt.info.name} reads at most {ctx or 8192:,} tokens, so at "
                         f"most {cap:,} bytes are tokenised: shorten it")


def bounded_rows(rt: Any, given: Any, what: str) -> list[list[int]]:
    """`given` (a text, texts, token ids or lists of them) as token rows, each checked against the model's context
    before anything else is built: texts by their bytes before the tokenizer, rows by their length before their ids
    are read (the patching scans' prompt check, issue 42)."""
    items = [given] if isinstance(given, str) else (given if isinstance(given, (list, tuple)) else [])
    for i, t in enumerate(items):
        if isinstance(t, str):
            check_text(rt, t, f"{what}[{i}]")
    rows = as_rows(rt.tokenizer, given, context_length(rt))
    for i, r in enumerate(rows):
        check_length(rt, len(r), f"{what}[{i}]")
    return rows


def vocab_size(rt: Any) -> int | None:
    """Rows of the model's input embedding (the token ids it can read), None when it cannot be told."""
    try:
        return int(rt.model.get_input_embeddings().num_embeddings)
    except Exception:  # noqa: BLE001 - a model without the standard accessor: the forward pass itself decides
        return None


def token_rows(rt: Any, prompts: Any, what: str = "prompts") -> list[list[int]]:
    """`prompts` as token-id lists the model can read (a list of lists of ints, ids in its vocabulary), or one
    sentence naming the argument: the generation and capture calls take token ids, not texts."""
    if isinstance(prompts, str) or (hasattr(prompts, "__iter__") and not isinstance(prompts, (bytes, dict))
                                    and any(isinstance(p, str) for p in list(prompts))):
        raise TypeError(f"{what} must be token-id lists, not texts: tokenise them first (rt.tokenizer(text)"
                        "['input_ids'], plain_prompt(rt.tokenizer, text).tokens or interp.prompts.build)")
    if prompts is None or isinstance(prompts, (bytes, dict)) or not hasattr(prompts, "__iter__"):
        raise TypeError(f"{what} must be a list of token-id lists, not {type(prompts).__name__}")
    rows = []
    vocab, ctx = vocab_size(rt), context_length(rt)
    for i, p in enumerate(list(prompts)):
        if ctx is not None and hasattr(p, "__len__") and not isinstance(p, (str, bytes, dict)) and len(p) > ctx:
            raise ValueError(f"{what}[{i}] is {len(p):,} tokens; {rt.info.name}'s context is {ctx:,} tokens: shorten it")
        if hasattr(p, "tolist") and not isinstance(p, (list, tuple)):
            p = p.tolist()
        if isinstance(p, (str, bytes, dict)) or not hasattr(p, "__iter__") or not all(_is_id(t) or isinstance(t, np.integer) for t in p):
            raise TypeError(f"{what}[{i}] must be a list of token ids (ints), not {str(p)[:60]!r}")
        row = [int(t) for t in p]
        check_length(rt, len(row), f"{what}[{i}]")
        bad = [t for t in row if t < 0 or (vocab is not None and t >= vocab)]
        if bad:
            raise ValueError(f"{what}[{i}] holds token id {bad[0]}, outside the model's vocabulary 0..{vocab - 1}"
                             if vocab is not None else f"{what}[{i}] holds the negative token id {bad[0]}")
        rows.append(row)
    return rows


def batch_of(rt: Any, inputs: Any) -> Batch:
    texts = [inputs] if isinstance(inputs, str) else (list(inputs) if isinstance(inputs, (list, tuple)) else [])
    for i, t in enumerate(texts):
        if isinstance(t, str):
            check_text(rt, t, f"inputs[{i}]")
    rows = as_rows(rt.tokenizer, inputs, context_length(rt))
    vocab = vocab_size(rt)
    for i, r in enumerate(rows):
        check_length(rt, len(r), f"inputs[{i}]")
        bad = [t for t in r if t < 0 or (vocab is not None and t >= vocab)]
        if bad:
            raise ValueError(f"inputs: row {i} holds token id {bad[0]}, outside the model's vocabulary 0..{vocab - 1}"
                             if vocab is not None else f"inputs: row {i} holds the negative token id {bad[0]}")
    ids, mask, offsets = rt.pad(rows)
    pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
    return Batch(ids, mask, pos, offsets, [len(r) for r in rows])


def logits_of(rt: Any, batch: Batch, hooks: Hooks, path: str, grad: bool = False) -> Float[torch.Tensor, "batch seq vocab"]:
    """One teacher-forced pass of `batch` on `path` ('hf' or 'bridge') with `hooks` attached; logits for every column."""
    import torch

    ctx = torch.enable_grad() if grad else torch.inference_mode()
    with ctx, rt._attached(list(hooks), path):
        if path == "bridge":
            return rt.bridge(batch.ids, return_type="logits", attention_mask=batch.mask, position_ids=batch.pos)
        return rt.model(input_ids=batch.ids, attention_mask=batch.mask, position_ids=batch.pos, use_cache=False).logits


def checked_hooks(hooks: Any) -> list[tuple[str, Callable[..., Any]]]:
    """The caller's hooks as (name, fn) pairs, each fn wrapped so that a return of the wrong shape is one sentence
    naming the hook (issue 40: a hook that was not callable, or returned the wrong shape, gave torch's own error)."""
    if hooks is None or isinstance(hooks, (str, bytes)) or not hasattr(hooks, "__iter__"):
        raise TypeError(f"hooks must be a list of (hook name, function) pairs, not {type(hooks).__name__}")
    out = []
    for h in hooks:
        if not (isinstance(h, (tuple, list)) and len(h) == 2 and isinstance(h[0], str)):
            raise TypeError(f"each hook must be a (hook name, function) pair, not {h!r}"[:200])
        name, fn = h
        if not callable(fn):
            raise TypeError(f"the hook on {name!r} is not callable ({type(fn).__name__}): give fn(tensor, hook)")
        out.append((name, _shape_checked(name, fn)))
    return out


def _shape_checked(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def hook(act: Any, hook: Any = None) -> Any:
        import torch

        got = fn(act, hook)
        if got is not None and (not isinstance(got, torch.Tensor) or got.shape != act.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            raise ValueError(f"the hook on {name!r} returned {shape} for an activation of shape {tuple(act.shape)}: "
                             "return a tensor of the same shape, or None to leave it")
        return got

    hook.__wrapped__ = fn  # type: ignore[attr-defined]
    hook._ambench_checked = True  # type: ignore[attr-defined]  # ours: `unchecked` looks through it
    return hook


def unchecked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The caller's hook inside `checked_hooks`' wrappers (a hook checked twice is wrapped twice)."""
    while getattr(fn, "_ambench_checked", False):
        fn = fn.__wrapped__  # type: ignore[attr-defined]
    return fn


def forward(rt: Any, inputs: Any, hooks: Hooks = (), grad: bool = False) -> Float[torch.Tensor, "batch seq vocab"]:
    """Logits [batch, seq, vocab] of a teacher-forced pass with `hooks` attached (see `Runtime.forward`)."""
    from hooks.steer import check_padding

    if not isinstance(grad, bool):
        raise TypeError(f"grad must be True or False, not {grad!r}"[:200])
    hooks = checked_hooks(hooks)
    rt.check_names([n for n, _ in hooks])
    batch = batch_of(rt, inputs)
    check_padding(hooks, batch.lengths)
    check_logits_size(rt, batch)
    return logits_of(rt, batch, hooks, rt._path(list(hooks)), grad)


#: the most float32 logits one call returns ([rows, width, vocab]); a call past it is refused before its forward
MAX_LOGITS_BYTES = 4 << 30


def check_logits_size(rt: Any, batch: Batch) -> None:
    """One sentence when the logits of a call would pass MAX_LOGITS_BYTES (issue 42's attack: 20,000 prompts in one
    forward; on a real vocabulary that is tens of GB)."""
    vocab = vocab_size(rt) or 0
    size = len(batch.lengths) * int(batch.ids.shape[1]) * vocab * 4
    if size > MAX_LOGITS_BYTES:
        raise ValueError(f"the logits of this call would take {size / 2 ** 30:.1f} GiB ({len(batch.lengths)} rows x "
                         f"{int(batch.ids.shape[1])} positions x {vocab:,} vocabulary, float32): pass fewer or shorter "
                         "prompts per call (at most 4 GiB)")


class Recorder:
    """Hooks that keep each hook point's tensor at chosen columns; aliases of one point are recorded once."""

    def __init__(self, rt: Any, names: Sequence[str], columns: Int[torch.Tensor, "batch n"] | None, keep_graph: bool = False,
                 device: str | None = "cpu") -> None:
        self.names = list(dict.fromkeys(names))
        self.columns = columns
        self.keep_graph = keep_graph  # attribution patching differentiates through what it recorded
        self.device = device
        self.out: dict[str, Any] = {}
        self.grouped = rt.canonical_hooks(self.names)

    def hooks(self) -> list[tuple[str, Callable[..., Any]]]:
        return [(canon, self._hook(aliases)) for canon, aliases in self.grouped.items()]

    def _hook(self, aliases: Sequence[str]) -> Callable[..., Any]:
        axis = position_axis(aliases[0])

        def fn(act: torch.Tensor, hook: Any = None) -> None:
            import torch

            kept = act
            if self.columns is not None:
                cols = self.columns.to(act.device)
                if axis == 1:
                    kept = act[torch.arange(act.shape[0], device=act.device)[:, None], cols]
                else:  # [batch, head, query, key]: the queries at the chosen columns -> [batch, head, n, key]
                    rows = torch.arange(act.shape[0], device=act.device)[:, None]
                    kept = act.transpose(1, 2)[rows, cols].transpose(1, 2)
            if not self.keep_graph:
                if kept is act:
                    kept = act.detach().clone()  # a later in-place hook must not change what was cached
                kept = kept.detach().float()
                kept = kept.to(self.device) if self.device else kept
            for a in aliases:
                self.out[a] = kept
            # returned, the tensor is the one the rest of the pass reads: the bridge hands a head-split view of
            # hook_z / hook_v to hooks and, when a hook returns nothing, goes on from the unsplit tensor, which
            # would leave a recorded view outside the graph (its gradient None)
            return act if self.keep_graph else None

        return fn

    def result(self) -> dict[str, Any]:
        missing = [n for n in self.names if n not in self.out]
        if missing:
            raise RuntimeError(f"hooks did not fire for {missing}")
        return {n: self.out[n] for n in self.names}


def run_with_cache(rt: Any, inputs: Any, names: Sequence[str] | str | None = None,
                   positions: Sequence[int] | Sequence[Sequence[int]] | None = None, hooks: Hooks = (),
                   device: str | None = "cpu") -> tuple[Float[torch.Tensor, "batch seq vocab"], dict[str, torch.Tensor]]:
    """(logits, cache) with the activations of `names` at `positions` (see `Runtime.run_with_cache`)."""
    from hooks.steer import check_padding

    hooks = checked_hooks(hooks)
    batch = batch_of(rt, inputs)
    check_padding(hooks, batch.lengths)
    if names is None:
        names = rt.hook_names()
    if isinstance(names, (bytes, dict)) or not (isinstance(names, str) or hasattr(names, "__iter__")):
        raise TypeError(f"names must be a hook name or a list of hook names, not {type(names).__name__}")
    names = [names] if isinstance(names, str) else list(names)
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names must be a non-empty list of hook names (strings), not {names!r}"[:200])
    rt.check_names(names + [n for n, _ in hooks])
    check_logits_size(rt, batch)
    rec = Recorder(rt, names, batch.columns(positions), device=device)
    # the cache records what flows after the caller's hooks (a patched run caches the patched values)
    all_hooks = list(hooks) + rec.hooks()
    logits = logits_of(rt, batch, all_hooks, rt._path(all_hooks))
    return logits, rec.result()


@contextlib.contextmanager
def hooks_attached(rt: Any, hooks: Hooks) -> Iterator[str]:
    """Attach `hooks` on the path they need for the duration of the block; yields the path."""
    path = rt._path(list(hooks))
    with rt._attached(list(hooks), path):
        yield path


__all__ = ["Batch", "Recorder", "as_rows", "batch_of", "checked_hooks", "token_rows", "forward", "logits_of", "position_axis", "run_with_cache"]
