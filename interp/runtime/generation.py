"""The generation loop: `generate` and `continue_batch` (the runtime's methods of those names call these).

A hand-written decode loop: left padding with an attention mask and explicit position ids, a full KV cache
(`kv.growing_cache`), finished rows dropped from the batch (and from the cache). Each row has its own seed:
greedy rows take the argmax; sampled rows draw one uniform number per step from their own `torch.Generator` and
invert the CDF of the temperature-scaled distribution, so a row's tokens do not depend on what else is in its
batch. `continue_batch` computes a shared prefix once (`kv.prefix_cache`) and lays the suffixes out with all
padding on the left (`kv.suffix_block`, `kv.shift_rows`); the runtime's module docstring says why.
"""

from __future__ import annotations

import copy

import math

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from interp.models import ModelError
from interp.runtime import kv
from interp.runtime.load import _is_oom

if TYPE_CHECKING:
    import torch
    from jaxtyping import Bool, Float, Int
    from transformers import Cache

    from interp.runtime import Hooks, Runtime

#: Extra end-of-turn tokens that stop generation when present in the vocabulary.
END_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", "<|end|>")
FENCE = "```"


@dataclass(frozen=True)
class Sampling:
    """How one attempt picks tokens: temperature 0 is greedy; the seed drives the row's own generator.

    Example::

        greedy, sampled = Sampling(), Sampling(temperature=0.8, seed=3)
    """

    temperature: float = 0.0  #: 0 = greedy (argmax); > 0 samples from softmax(logits / temperature)
    seed: int = 0  #: seed of the row's own torch.Generator

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"Sampling: temperature must be a finite number >= 0 (0 = greedy), not {t!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"Sampling: seed must be an int, not {self.seed!r}")


@dataclass(frozen=True)
class StopRule:
    """When a row stops generating."""

    max_new_tokens: int = 384  #: hard cap on generated tokens
    eos: bool = True  #: stop at EOS or an end-of-turn token
    fence: bool = True  #: stop at the ``` that closes the program's code block
    open_fence: bool = False  #: the prompt already opened the block, so the first ``` closes it
    strings: tuple[str, ...] = ()  #: custom stop strings (the text is cut after the first one found)

    def __post_init__(self) -> None:
        n = self.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"StopRule: max_new_tokens must be a positive integer, not {n!r}")
        if isinstance(self.strings, str) or not all(isinstance(x, str) and x for x in self.strings):
            raise TypeError(f"StopRule: strings must be a tuple of non-empty stop strings, not {self.strings!r}"[:200])

    @classmethod
    def free_text(cls, max_new_tokens: int = 256, strings: tuple[str, ...] = ()) -> "StopRule":
        """The preset for free text (a plain prompt, no program): EOS/end of turn, `strings` or the cap; no fence.

        Args:
            max_new_tokens: the cap on generated tokens (>= 1).
            strings: stop strings (the text is cut after the first one found).

        Example::

            stop = StopRule.free_text(32, strings=("END",))
        """
        return cls(max_new_tokens=max_new_tokens, eos=True, fence=False, strings=tuple(strings))


@dataclass
class Generation:
    tokens: list[int] = field(default_factory=list)  #: generated ids (a final EOS included)
    entropy: list[float] = field(default_factory=list)  #: nats, one per generated token
    text: str = ""  #: decoded text (no EOS; cut after a stop string or closing fence)
    stop: str = ""  #: eos | fence | string | max_tokens | context (the model's context reached)


def _samplings(sampling: Any, n: int, what: str) -> list[Sampling]:
    if isinstance(sampling, Sampling):
        sampling = [sampling]
    if isinstance(sampling, (str, bytes, dict)) or not hasattr(sampling, "__iter__"):
        raise TypeError(f"sampling must be a list of Sampling, one per {what}, not {type(sampling).__name__}")
    sampling = list(sampling)
    if len(sampling) != n:
        raise ValueError(f"one Sampling per {what}: {n} {what}{'es' if what == 'prefix' else 's'} and {len(sampling)} Sampling")
    if not all(isinstance(x, Sampling) for x in sampling):
        raise TypeError("sampling must hold Sampling(temperature=..., seed=...) objects")
    return sampling


def generate(rt: Runtime, prompts: Sequence[Sequence[int]], sampling: Sequence[Sampling], stop: StopRule = StopRule(),
             hooks: Hooks = (), on_token: Callable[[int], None] | None = None) -> list[Generation]:
    """`Runtime.generate`: one continuation per prompt row."""
    import torch

    from hooks.steer import check_padding
    from interp.runtime.forward import checked_hooks, token_rows

    prompts = token_rows(rt, prompts)
    sampling = _samplings(sampling, len(prompts), "prompt")
    hooks = checked_hooks(hooks)
    rt.check_names([n for n, _ in hooks])
    check_padding(hooks, [len(p) for p in prompts])
    # hooks that act alike at every position of every row (`hooks.steer.is_uniform`: a steering vector added
    # everywhere) give the shared prefix what they give each row's copy of it, so it is computed once with them too;
    # in float32 only (in bfloat16 the other sums moved a steered row's token at step 6 in an outside check)
    uniform = not hooks or (_uniform(hooks) and kv.is_float32(rt))
    common = kv.common_prefix(prompts) if rt.share_prefill and uniform else 0
    if common >= kv.SHARED_PREFIX_MIN:
        # every row starts with the same tokens (a few-shot protocol's examples): prefill them once, as
        # continue_batch does; each row then generates what it would alone (tested like continue_batch)
        return continue_batch(rt, list(prompts[0][:common]), [list(p[common:]) for p in prompts], sampling, stop,
                              hooks=hooks, on_token=on_token)
    ids, mask, _ = rt.pad(prompts)
    path = rt._path(hooks)
    # a prompt given several times (its greedy and sampled attempts) is prefilled once and its cache row
    # repeated: prefilling long (few-shot) prompts is most of generation's cost, and the repeated rows are
    # the same computation. Hooks may act per row, so a hooked call prefills every row.
    unique, expand = kv.distinct_rows(prompts)
    share = rt.share_prefill and not hooks and len(unique) < len(prompts)
    try:
        with torch.inference_mode(), rt._attached(hooks, path):
            if share:
                logits, cache = rt._forward(ids[unique], mask[unique], rt._new_cache(), path)
                logits = kv.repeat_rows(logits, cache, expand)
            else:
                logits, cache = rt._forward(ids, mask, rt._new_cache(), path)
            return decode(rt, logits, cache, mask, sampling, stop, path, on_token, _room(rt, [len(p) for p in prompts]))
    except Exception as e:  # noqa: BLE001
        if _is_oom(e):
            raise ModelError(f"out of memory generating a batch of {len(prompts)} on {rt.device}: "
                             "lower --batch-size or --max-new-tokens") from None
        raise


def continue_batch(rt: Runtime, prefix: Sequence[int], suffixes: Sequence[Sequence[int]], sampling: Sequence[Sampling],
                   stop: StopRule = StopRule(), hooks: Hooks = (), prefill_hooks: Hooks = (),
                   on_token: Callable[[int], None] | None = None) -> list[Generation]:
    """`Runtime.continue_batch` (its docstring says what a row generates and where the hooks act)."""
    import torch

    from interp.runtime.forward import checked_hooks, token_rows

    if prefix is None or isinstance(prefix, (str, bytes)) or not hasattr(prefix, "__iter__"):
        raise TypeError(f"prefix must be a list of token ids, not {type(prefix).__name__}")
    prefix = token_rows(rt, [prefix], "prefix")[0] if len(list(prefix)) else []
    suffixes = token_rows(rt, suffixes, "suffixes")
    from interp.runtime.forward import check_length

    for i, x in enumerate(suffixes):  # the prefix and each suffix together are the row's prompt (issue 42's attack)
        check_length(rt, len(prefix) + len(x), f"the prefix + suffixes[{i}]")
    sampling = _samplings(sampling, len(suffixes), "suffix")
    hooks, prefill_hooks = checked_hooks(hooks), checked_hooks(prefill_hooks)
    rt.check_names([n for n, _ in list(hooks) + list(prefill_hooks)])
    if not prefix or any(len(x) == 0 for x in suffixes):
        raise ValueError("the prefix and every suffix need at least one token")
    b = len(suffixes)
    # a suffix given several times (a prompt's greedy and sampled attempts, an arm's continuations) is
    # prefilled once and its rows repeated, as in generate(); hooks may act per row, so not when hooked
    unique, expand = kv.distinct_rows(suffixes)
    share = rt.share_prefill and not hooks and not prefill_hooks and len(unique) < b
    block_rows = [suffixes[u] for u in unique] if share else list(suffixes)
    path = rt._path(list(hooks) + list(prefill_hooks))
    # a hook on chosen positions acts on the prefix pass and on each row's block as laid out (a padded row's block
    # recomputes the prefix's tail): it keeps the layout it was given, a copy of the prefix per row
    shared = rt.share_decode and kv.can_share_prefix(rt, path) and _uniform(hooks)
    # suffixes of unlike lengths are prefilled in groups of like length (kv.length_groups) when the decode keeps the
    # prefix once (its layout joins blocks of any width); prefill hooks are masked to one block's layout
    groups = [list(range(len(block_rows)))]
    if shared and not prefill_hooks:  # prefill hooks are masked to one block's layout
        groups = kv.length_groups([len(x) for x in block_rows])
    try:
        with torch.inference_mode():
            base = kv.prefix_cache(rt, prefix, path, hooks)  # steering hooks act on the prefix too
            pre = None
            if shared:  # the prefix's own layers, before shift_rows replaces their tensors
                pre = copy.copy(base)
                pre.layers = [copy.copy(layer) for layer in base.layers]
            parts = []
            for gi, rows in enumerate(groups):
                block, mask, shift = kv.suffix_block(rt, prefix, [block_rows[r] for r in rows])
                patch = list(prefill_hooks)
                if prefill_hooks and any(shift):
                    width = block.shape[1]
                    in_suffix = torch.zeros((b, width), dtype=torch.bool)
                    for i, x in enumerate(suffixes):
                        in_suffix[i, width - len(x):] = True
                    patch = [(name, only_where(fn, in_suffix)) for name, fn in prefill_hooks]
                cache = base if gi == len(groups) - 1 else copy.deepcopy(base)
                kv.shift_rows(cache, shift)
                with rt._attached(list(hooks) + patch, path):
                    logits, cache = rt._forward(block, mask, cache, path)
                parts.append((cache, rows, logits, mask))
            laid = None
            if shared:  # the groups' rows in one cache that keeps the prefix once, then the repeated rows
                logits = parts[0][2]
                if len(parts) > 1:
                    logits = logits.new_empty((len(block_rows), logits.shape[-1]))
                    for _, rows, lg, _ in parts:
                        logits[torch.tensor(rows, device=logits.device)] = lg
                laid = kv.share_prefix(pre, [(c, rows) for c, rows, _, _ in parts], [len(x) for x in block_rows], len(prefix))
                if laid is None and len(parts) > 1:
                    raise ModelError("the prefilled groups could not be joined into one cache")  # not reached: checked
            if laid is not None:
                cache, mask = laid
                kv.install_shared_prefix_attention()
            else:
                cache, _, logits, mask = parts[0]
            if share:
                logits, mask = kv.repeat_rows(logits, cache, expand), mask[expand]
            with rt._attached(hooks, path):
                return decode(rt, logits, cache, mask, sampling, stop, path, on_token,
                              _room(rt, [len(prefix) + len(x) for x in suffixes]))
    except Exception as e:  # noqa: BLE001
        if _is_oom(e):
            raise ModelError(f"out of memory continuing {b} rows on {rt.device}: use fewer continuations") from None
        raise


def _uniform(hooks: Hooks) -> bool:
    """Every hook acts alike at every position of every row and pass (`hooks.steer.is_uniform`); True for none."""
    from hooks.steer import is_uniform
    from interp.runtime.forward import unchecked

    return all(is_uniform(unchecked(fn)) for _, fn in hooks)


def _room(rt: Runtime, lengths: Sequence[int]) -> list[int] | None:
    """Tokens each row may generate before a token would be fed at a position past the model's context (the k-th
    new token is computed from positions < length + k - 1); None when the model states no context."""
    from interp.runtime.forward import context_length

    ctx = context_length(rt)
    return None if ctx is None else [max(1, ctx - n + 1) for n in lengths]


def decode(rt: Runtime, logits: Float[torch.Tensor, "batch vocab"], cache: Cache, mask: Int[torch.Tensor, "batch total"],
            sampling: Sequence[Sampling], stop: StopRule, path: str,
            on_token: Callable[[int], None] | None = None, room: Sequence[int] | None = None) -> list[Generation]:
    """Decode until every row stops (`check_stop`), or reaches the model's context (`room`: stop "context", issue
    42's attack: a 2,040-token prompt with 200 new tokens decoded to 2,240 positions of a 2,048 context)."""
    import torch

    gens = [Generation() for _ in sampling]
    rngs = [torch.Generator().manual_seed(int(s.seed)) for s in sampling]
    active = list(range(len(sampling)))
    while True:
        last = logits.float().cpu()
        logp = torch.log_softmax(last, dim=-1)
        entropy = -(logp.exp() * logp).nan_to_num().sum(-1)
        keep: list[int] = []
        for j, row in enumerate(active):
            tok = pick(last[j], sampling[row], rngs[row])
            g = gens[row]
            g.tokens.append(tok)
            g.entropy.append(float(entropy[j]))
            if on_token:
                on_token(1)
            if not check_stop(rt, g, tok, stop):
                if room is not None and len(g.tokens) >= room[row]:
                    g.stop = "context"
                else:
                    keep.append(j)
        if not keep:
            break
        if len(keep) < len(active):
            index = torch.tensor(keep, device=mask.device)
            cache.batch_select_indices(index)
            mask = mask[index]
            active = [active[j] for j in keep]
        nxt = torch.tensor([[gens[row].tokens[-1]] for row in active], dtype=torch.long, device=mask.device)
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=mask.dtype, device=mask.device)], dim=1)
        logits, cache = rt._forward(nxt, mask, cache, path)
    return gens


def pick(logits: Float[torch.Tensor, " vocab"], s: Sampling, rng: torch.Generator | None) -> int:
    import torch

    if s.temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits.double() / s.temperature, dim=-1)
    cdf = torch.cumsum(probs, dim=-1)
    u = torch.rand((), generator=rng, dtype=torch.float64) * cdf[-1]
    return int(min(torch.searchsorted(cdf, u, right=True).item(), cdf.numel() - 1))


def check_stop(rt: Runtime, g: Generation, tok: int, stop: StopRule) -> bool:
    """Update g.text and g.stop; True when the row is finished."""
    if stop.eos and tok in rt.stop_ids:
        g.text = rt.tokenizer.decode(g.tokens[:-1], skip_special_tokens=False)
        g.stop = "eos"
        return True
    g.text = rt.tokenizer.decode(g.tokens, skip_special_tokens=False)
    if stop.fence:
        first = g.text.find(FENCE)
        close = first if stop.open_fence else (g.text.find(FENCE, first + len(FENCE)) if first >= 0 else -1)
        if close >= 0:
            g.text = g.text[: close + len(FENCE)]
            g.stop = "fence"
            return True
    for s in stop.strings:
        at = g.text.find(s)
        if at >= 0:
            g.text = g.text[: at + len(s)]
            g.stop = "string"
            return True
    if len(g.tokens) >= stop.max_new_tokens:
        g.stop = "max_tokens"
        return True
    return False


def only_where(fn: Callable[..., Any], where: Bool[torch.Tensor, "rows seq"]) -> Callable[..., Any]:
    """Wrap a prefill hook so that it changes only the positions where `where` ([rows, S]) is True."""

    def hook(act: torch.Tensor, hook: object = None) -> torch.Tensor:
        import torch

        if act.dim() < 2 or tuple(act.shape[:2]) != tuple(where.shape):
            return fn(act, hook=hook)  # not a [rows, S, ...] tensor: nothing to restrict by position
        before = act.clone()
        out = fn(act, hook=hook)
        out = act if out is None else out
        keep = where.to(out.device).reshape(tuple(where.shape) + (1,) * (out.dim() - 2))
        return torch.where(keep, out, before)

    return hook


#: the stop rule for free text: EOS or end of turn, or 256 tokens; never a code fence
FREE_TEXT = StopRule.free_text()
