"""Residual-stream hook points on any Hugging Face causal LM, through PyTorch forward hooks.

The stages need only a handful of residual-stream sites: the input of each decoder block
(`blocks.{L}.hook_resid_pre`), the output of each block (`blocks.{L}.hook_resid_post`, the last one
being the residual stream before the final norm) and the output of the final norm
(`ln_final.hook_out`, what the unembedding reads). `ResidualSites` finds the decoder blocks and the
final norm of a loaded model and attaches TransformerLens-style hook functions, `fn(tensor, hook=point)`
returning the replacement tensor (or None to keep it), as forward pre-hooks / forward hooks of those
modules. The names are the `TransformerBridge` names (aliases `blocks.{L}.hook_in` / `hook_out`
included), so a hook list runs unchanged on either.

Why not always the bridge: it wraps every submodule in ~1,700 hook points and forces eager attention,
so one hook slowed generation to 0.58-0.69x of Hugging Face (issue 15); and it has no adapter for
remote-code or new architectures. These hooks sit on the very module tree that unhooked generation
runs, so a hook that returns its input is an exact no-op in every dtype (tested), and they work on any
model whose decoder blocks form one `ModuleList`.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

#: Attribute names of the final norm next to the decoder blocks, across the architectures we load
#: (Llama/Qwen/Gemma/Mistral/Phi3/OLMo-2/Glm: `norm`; GPT-2: `ln_f`; GPT-NeoX: `final_layer_norm`;
#: ChatGLM: `final_layernorm`).
FINAL_NORMS = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "norm_f", "final_norm", "ln_final")

_BLOCK = re.compile(r"^blocks\.(\d+)\.hook_(resid_pre|in|resid_post|out)$")
FINAL_NORM_SITE = "ln_final.hook_out"


class SiteError(ValueError):
    """A hook name or a model the residual hooks cannot serve."""


@dataclass(frozen=True)
class HookPoint:
    """What a hook function receives as `hook=`: its canonical name, like a TransformerLens HookPoint."""

    name: str  #: canonical name (`blocks.{L}.hook_in`, `blocks.{L}.hook_out` or `ln_final.hook_out`)


def _n_layers(config: Any) -> int | None:
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def find_blocks(model: Any) -> tuple[str, Any]:
    """The decoder blocks: the `ModuleList` of one repeated module class with n_layers entries.

    When several lists qualify (a vision tower beside the text decoder), the one holding the most
    parameters wins. Returns (qualified name, ModuleList)."""
    import torch

    want = _n_layers(getattr(model, "config", None))
    best: tuple[int, str, Any] | None = None
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.ModuleList) or len(mod) == 0:
            continue
        if want is not None and len(mod) != want:
            continue
        if len({type(m) for m in mod}) != 1:
            continue
        size = sum(p.numel() for p in mod.parameters())
        if best is None or size > best[0]:
            best = (size, name, mod)
    if best is None:
        raise SiteError(f"cannot find the decoder blocks of {type(model).__name__}: no ModuleList of "
                        f"{want if want is not None else 'repeated'} blocks")
    return best[1], best[2]


def find_final_norm(model: Any, blocks_name: str) -> tuple[str, Any] | None:
    """The final norm: a sibling of the block list with one of the usual names, else None."""
    parent_name = blocks_name.rsplit(".", 1)[0] if "." in blocks_name else ""
    parent = model.get_submodule(parent_name) if parent_name else model
    for attr in FINAL_NORMS:
        mod = getattr(parent, attr, None)
        if mod is not None and hasattr(mod, "forward") and not isinstance(mod, type):
            return (f"{parent_name}.{attr}" if parent_name else attr), mod
    return None


class ResidualSites:
    """The residual-stream hook points of one loaded model, attached as PyTorch forward hooks."""

    def __init__(self, model: Any) -> None:
        self.blocks_name, self.blocks = find_blocks(model)
        found = find_final_norm(model, self.blocks_name)
        self.norm_name, self.norm = found if found else ("", None)
        self.n_layers = len(self.blocks)

    def resolve(self, name: str) -> tuple[str, int] | None:
        """('pre', L), ('post', L) or ('norm', -1) for a name these hooks serve, else None."""
        m = _BLOCK.match(name)
        if m:
            layer = int(m.group(1))
            if layer >= self.n_layers:
                return None
            return ("pre" if m.group(2) in ("resid_pre", "in") else "post"), layer
        if name == FINAL_NORM_SITE and self.norm is not None:
            return "norm", -1
        return None

    def serves(self, names: Sequence[str]) -> bool:
        return all(self.resolve(n) is not None for n in names)

    def canonical(self, name: str) -> str:
        site = self.resolve(name)
        if site is None:
            raise SiteError(f"no residual hook point {name!r} (blocks 0..{self.n_layers - 1}"
                            f"{', ' + FINAL_NORM_SITE if self.norm is not None else ''})")
        kind, layer = site
        return FINAL_NORM_SITE if kind == "norm" else f"blocks.{layer}.hook_{'in' if kind == 'pre' else 'out'}"

    @contextlib.contextmanager
    def attached(self, hooks: Sequence[tuple[str, Callable[..., Any]]]) -> Iterator[None]:
        """Attach `(name, fn)` hooks for the duration of the block; on one point they run in list order."""
        handles = []
        try:
            for name, fn in hooks:
                kind, layer = self.resolve(name) or (None, 0)
                point = HookPoint(self.canonical(name))
                if kind == "pre":
                    handles.append(self.blocks[layer].register_forward_pre_hook(_pre_hook(fn, point), with_kwargs=True))
                elif kind == "post":
                    handles.append(self.blocks[layer].register_forward_hook(_post_hook(fn, point)))
                else:
                    handles.append(self.norm.register_forward_hook(_post_hook(fn, point)))
            yield
        finally:
            for h in handles:
                h.remove()


def _pre_hook(fn: Callable[..., Any], point: HookPoint) -> Callable[..., Any]:
    """A forward pre-hook on a block: the residual stream is its first argument (`hidden_states`)."""

    def pre(module: Any, args: tuple, kwargs: dict) -> Any:
        if args:
            x = args[0]
        elif "hidden_states" in kwargs:
            x = kwargs["hidden_states"]
        else:
            raise SiteError(f"{type(module).__name__} was called without hidden_states: cannot hook {point.name}")
        y = fn(x, hook=point)
        if y is None or y is x:
            return None
        if args:
            return (y, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": y}

    return pre


def _post_hook(fn: Callable[..., Any], point: HookPoint) -> Callable[..., Any]:
    """A forward hook on a block or the final norm: the residual stream is the output (or its first item)."""

    def post(module: Any, args: tuple, output: Any) -> Any:
        x = output[0] if isinstance(output, (tuple, list)) else output
        y = fn(x, hook=point)
        if y is None or y is x:
            return None
        return (y, *output[1:]) if isinstance(output, (tuple, list)) else y

    return post


__all__ = ["FINAL_NORM_SITE", "HookPoint", "ResidualSites", "SiteError", "find_blocks", "find_final_norm"]
