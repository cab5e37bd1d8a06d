"""The runtime: one object owns a model, and generation and capture are calls on it.

`Runtime.load(name)` boots a TransformerLens `TransformerBridge` around a Hugging Face causal LM (an
embedded model from `interp.models`, a local folder, or a hub name already in the local cache). All
hooked work (capture, patching, steering) runs through the bridge's hook points.

Two forward paths over the same weight tensors:
- the **hooked path** is the bridge (eager attention, which the bridge forces): every call that
  passes hooks goes through it;
- the **plain path** is a second module tree that shares the bridge's parameter tensors (no copy)
  without its hook points, with Hugging Face's default attention kernel (`sdpa`). Generation with no
  hooks attached uses it. Measured on SmolLM2 on 2 CPU cores (perf/bench_generation.py): the hook
  points cost ~15-25% of a decode step, and eager attention halves throughput at batch 8 with
  800-token prompts; neither buys anything when no hook is attached. The two paths agree to float
  rounding (~3e-5 in the logits, tested); `plain_attention="eager"` makes them bit-identical (tested).
  In compatibility mode the bridge processes its weights, so the plain path is switched off.

Generation (`generate`) is a hand-written decode loop over either path: left padding with an
attention mask and explicit position ids, the KV cache on, finished rows dropped from the batch (and
from the cache). Each row has its own seed: greedy rows take the argmax; sampled rows draw one
uniform number per step from their own `torch.Generator` and invert the CDF of the temperature-scaled
distribution, so a row's tokens do not depend on what else is in its batch (up to float rounding of
the logits, which a test bounds: batched greedy equals one-at-a-time greedy token for token). The
entropy of the model's next-token distribution (temperature 1, nats) is logged at every step.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from interp.models import ModelError, ensure_folder, resolve

#: Extra end-of-turn tokens that stop generation when present in the vocabulary.
END_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", "<|end|>")
FENCE = "```"


@dataclass(frozen=True)
class ModelInfo:
    """What was loaded, recorded with every output."""

    name: str
    source: str  #: embedded | organism | folder | hub
    path: str
    weights_digest: str
    architecture: str
    dtype: str
    device: str
    compat: bool
    n_layers: int
    d_model: int
    chat: bool
    plain_attention: str = "none"  #: attention kernel of the hook-free path (sdpa, eager, or none)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Sampling:
    """How one attempt picks tokens: temperature 0 is greedy; the seed drives the row's own generator."""

    temperature: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class StopRule:
    max_new_tokens: int = 384
    eos: bool = True  #: stop at EOS or an end-of-turn token
    fence: bool = True  #: stop at the ``` that closes the program's code block
    open_fence: bool = False  #: the prompt already opened the block, so the first ``` closes it
    strings: tuple[str, ...] = ()


@dataclass
class Generation:
    tokens: list[int] = field(default_factory=list)  #: generated ids (a final EOS included)
    entropy: list[float] = field(default_factory=list)  #: nats, one per generated token
    text: str = ""  #: decoded text (no EOS; cut after a stop string or closing fence)
    stop: str = ""  #: eos | fence | string | max_tokens


def weights_digest(folder: Path) -> str:
    """sha256 over the weight files' names, sizes, first and last MiB: cheap for 30 GB checkpoints."""
    h = hashlib.sha256()
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt") and p.is_file())
    for p in files:
        size = p.stat().st_size
        h.update(f"{p.name}:{size}".encode())
        with open(p, "rb") as f:
            h.update(f.read(1 << 20))
            if size > 2 << 20:
                f.seek(size - (1 << 20))
                h.update(f.read())
    return h.hexdigest()[:16]


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _dtype(name: str | None, device: str) -> Any:
    import torch

    if name is None:
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if name not in table:
        raise ModelError(f"unknown dtype {name!r}: use float32, bfloat16 or float16")
    return table[name]


def _is_oom(e: BaseException) -> bool:
    import torch

    return isinstance(e, (MemoryError, torch.OutOfMemoryError)) or "out of memory" in str(e).lower()


class Runtime:
    """A loaded model: the bridge, its tokenizer, the plain twin, and what was loaded (`info`)."""

    def __init__(self, bridge: Any, tokenizer: Any, info: ModelInfo, plain: Any | None) -> None:
        self.bridge = bridge
        self.tokenizer = tokenizer
        self.info = info
        self.plain = plain
        self.device = info.device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.pad_id is None:
            self.pad_id = 0
        vocab = tokenizer.get_vocab()
        stops = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        stops |= {vocab[t] for t in END_TOKENS if t in vocab}
        self.stop_ids = frozenset(stops)

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(cls, model: str, device: str | None = None, dtype: str | None = None, compat: bool = False,
             plain_path: bool = True, plain_attention: str = "sdpa") -> "Runtime":
        """Boot `model` (registry name, local HF folder, or a hub name in the local cache)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub at run time
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        kind, folder = resolve(model)
        if kind in ("embedded", "organism"):
            folder = ensure_folder(model)
        elif kind == "hub":
            try:
                from huggingface_hub import snapshot_download

                folder = Path(snapshot_download(model, local_files_only=True))
            except Exception as e:  # noqa: BLE001 - any failure here means "not cached"
                raise ModelError(f"{model!r} is not in the local Hugging Face cache and nothing is downloaded "
                                 f"at run time; download it first or pass a local folder ({type(e).__name__})") from None
        assert folder is not None
        device = device or _default_device()
        torch_dtype = _dtype(dtype, device)
        return cls.from_folder(folder, name=model, source=kind, device=device, dtype=torch_dtype, compat=compat,
                               plain_path=plain_path, plain_attention=plain_attention)

    @classmethod
    def from_folder(cls, folder: Path, name: str | None = None, source: str = "folder", device: str = "cpu",
                    dtype: Any = None, compat: bool = False, plain_path: bool = True,
                    plain_attention: str = "sdpa") -> "Runtime":
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        dtype = dtype or torch.float32
        folder = Path(folder)
        try:
            config = AutoConfig.from_pretrained(folder)
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"{folder}: cannot read the model config ({e})") from None
        arch = (getattr(config, "architectures", None) or [type(config).__name__])[0]
        from transformer_lens.model_bridge import TransformerBridge

        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
            use_plain = plain_path and not compat
            hf = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype,
                                                      attn_implementation=plain_attention if use_plain else "eager")
            hf.to(device)
            hf.eval()
            if use_plain:
                # the twin shares every parameter and buffer tensor with `hf` (its config is its own);
                # the bridge rewires the twin and runs it with eager attention
                memo: dict[int, Any] = {id(p): p for p in hf.parameters()}
                memo.update({id(b): b for b in hf.buffers()})
                twin = copy.deepcopy(hf, memo)
                twin.set_attn_implementation("eager")
            else:
                twin = hf
            bridge = TransformerBridge.boot_transformers(str(folder), hf_model=twin, tokenizer=tokenizer,
                                                         device=device, dtype=dtype)
            if compat:
                bridge.enable_compatibility_mode(disable_warnings=True)
        except ModelError:
            raise
        except Exception as e:  # noqa: BLE001
            if _is_oom(e):
                raise ModelError(f"out of memory loading {name or folder} on {device} as {dtype}: try --dtype bfloat16, "
                                 "a smaller model, or another device") from None
            if isinstance(e, (ValueError, NotImplementedError, KeyError)) and "architecture" in str(e).lower():
                raise ModelError(f"architecture {arch} is not supported by TransformerBridge: {e}") from None
            raise
        bridge.eval()
        info = ModelInfo(
            name=name or folder.name, source=source, path=str(folder), weights_digest=weights_digest(folder),
            architecture=arch, dtype=str(dtype).replace("torch.", ""), device=str(device), compat=compat,
            n_layers=int(bridge.cfg.n_layers), d_model=int(bridge.cfg.d_model),
            chat=bool(getattr(tokenizer, "chat_template", None)), plain_attention=plain_attention if use_plain else "none",
        )
        return cls(bridge, tokenizer, info, hf if use_plain else None)

    # ------------------------------------------------------------------ forward passes

    def hook_names(self, layers: Sequence[int] | None = None) -> list[str]:
        """resid_pre of each block then the final resid_post: n_layers + 1 residual-stream sites."""
        n = self.info.n_layers
        layers = range(n + 1) if layers is None else layers
        names = []
        for layer in layers:
            if not 0 <= layer <= n:
                raise ValueError(f"layer {layer} out of range 0..{n}")
            names.append(f"blocks.{layer}.hook_resid_pre" if layer < n else f"blocks.{n - 1}.hook_resid_post")
        return names

    def canonical_hooks(self, names: Sequence[str]) -> dict[str, list[str]]:
        """Group hook names by the hook point they resolve to (aliases share one), keyed by canonical name."""
        by_point: dict[int, list[str]] = {}
        canon: dict[int, str] = {}
        hook_dict = self.bridge.hook_dict
        for name in names:
            point = hook_dict.get(name)
            if point is None:
                raise KeyError(f"no hook point {name!r} in {self.info.name}")
            by_point.setdefault(id(point), []).append(name)
            canon.setdefault(id(point), getattr(point, "name", None) or name)
        return {canon[k]: v for k, v in by_point.items()}

    def _forward(self, ids: Any, mask: Any, cache: Any, hooked: bool) -> tuple[Any, Any]:
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1]:]
        if hooked or self.plain is None:
            logits, cache = self.bridge(ids, return_type="logits_and_cache", attention_mask=mask, past_key_values=cache,
                                        use_cache=True, position_ids=pos, logits_to_keep=1)
            return logits[:, -1, :], cache
        out = self.plain(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True, position_ids=pos,
                         logits_to_keep=1)
        return out.logits[:, -1, :], out.past_key_values

    def pad(self, prompts: Sequence[Sequence[int]]) -> tuple[Any, Any, list[int]]:
        """Left-pad token lists: ids [b, T], mask [b, T], and each row's offset."""
        import torch

        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        offsets = []
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
            offsets.append(width - len(p))
        return ids.to(self.device), mask.to(self.device), offsets

    # ------------------------------------------------------------------ generation

    def generate(self, prompts: Sequence[Sequence[int]], sampling: Sequence[Sampling], stop: StopRule = StopRule(),
                 hooks: Sequence[tuple[str, Callable[..., Any]]] = (),
                 on_token: Callable[[int], None] | None = None) -> list[Generation]:
        """Generate one continuation per prompt row; `sampling[i]` decides row i's tokens."""
        import torch

        if len(prompts) != len(sampling):
            raise ValueError("one Sampling per prompt")
        ids, mask, _ = self.pad(prompts)
        hooked = bool(hooks)
        ctx = self.bridge.hooks(fwd_hooks=list(hooks)) if hooked else contextlib.nullcontext()
        try:
            with torch.inference_mode(), ctx:
                logits, cache = self._forward(ids, mask, None, hooked)
                return self._decode(logits, cache, mask, sampling, stop, hooked, on_token)
        except Exception as e:  # noqa: BLE001
            if _is_oom(e):
                raise ModelError(f"out of memory generating a batch of {len(prompts)} on {self.device}: "
                                 "lower --batch-size or --max-new-tokens") from None
            raise

    def continue_batch(self, prefix: Sequence[int], suffixes: Sequence[Sequence[int]], sampling: Sequence[Sampling],
                       stop: StopRule = StopRule(), hooks: Sequence[tuple[str, Callable[..., Any]]] = (),
                       prefill_hooks: Sequence[tuple[str, Callable[..., Any]]] = ()) -> list[Generation]:
        """Continue `prefix + suffixes[i]` for every row, computing the shared prefix once.

        The prefix is run once (batch 1); its KV cache is repeated for every row; the suffixes (each
        at least one token) are left-padded into one block after it, with the padding masked out and
        position ids counted over real tokens only, so row i sees exactly prefix + suffixes[i].
        `prefill_hooks` are active while the suffix block is processed (activation patching at the
        cut); `hooks` during every decoding step (steering)."""
        import torch

        if len(suffixes) != len(sampling):
            raise ValueError("one Sampling per suffix")
        if not prefix or any(len(x) == 0 for x in suffixes):
            raise ValueError("the prefix and every suffix need at least one token")
        b = len(suffixes)
        hooked = bool(hooks) or bool(prefill_hooks)
        pre_ids = torch.tensor([list(prefix)], dtype=torch.long, device=self.device)
        pre_mask = torch.ones_like(pre_ids)
        sfx_ids, sfx_mask, _ = self.pad(suffixes)
        try:
            with torch.inference_mode():
                with (self.bridge.hooks(fwd_hooks=list(hooks)) if hooks else contextlib.nullcontext()):
                    _, cache = self._forward(pre_ids, pre_mask, None, hooked)
                cache.batch_repeat_interleave(b)
                mask = torch.cat([pre_mask.expand(b, -1), sfx_mask], dim=1)
                with (self.bridge.hooks(fwd_hooks=list(hooks) + list(prefill_hooks)) if hooked else contextlib.nullcontext()):
                    logits, cache = self._forward(sfx_ids, mask, cache, hooked)
                with (self.bridge.hooks(fwd_hooks=list(hooks)) if hooks else contextlib.nullcontext()):
                    return self._decode(logits, cache, mask, sampling, stop, bool(hooks) or (hooked and self.plain is None))
        except Exception as e:  # noqa: BLE001
            if _is_oom(e):
                raise ModelError(f"out of memory continuing {b} rows on {self.device}: use fewer continuations") from None
            raise

    def _decode(self, logits: Any, cache: Any, mask: Any, sampling: Sequence[Sampling], stop: StopRule, hooked: bool,
                on_token: Callable[[int], None] | None = None) -> list[Generation]:
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
                tok = self._pick(last[j], sampling[row], rngs[row])
                g = gens[row]
                g.tokens.append(tok)
                g.entropy.append(float(entropy[j]))
                if on_token:
                    on_token(1)
                if not self._check_stop(g, tok, stop):
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
            logits, cache = self._forward(nxt, mask, cache, hooked)
        return gens

    @staticmethod
    def _pick(logits: Any, s: Sampling, rng: Any) -> int:
        import torch

        if s.temperature <= 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.double() / s.temperature, dim=-1)
        cdf = torch.cumsum(probs, dim=-1)
        u = torch.rand((), generator=rng, dtype=torch.float64) * cdf[-1]
        return int(min(torch.searchsorted(cdf, u, right=True).item(), cdf.numel() - 1))

    def _check_stop(self, g: Generation, tok: int, stop: StopRule) -> bool:
        """Update g.text and g.stop; True when the row is finished."""
        if stop.eos and tok in self.stop_ids:
            g.text = self.tokenizer.decode(g.tokens[:-1], skip_special_tokens=False)
            g.stop = "eos"
            return True
        g.text = self.tokenizer.decode(g.tokens, skip_special_tokens=False)
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

    # ------------------------------------------------------------------ capture

    def capture(self, prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]],
                layers: Sequence[int] | None = None) -> Any:
        """Residual stream at `positions` (per prompt, indices into its own tokens) for every layer.

        Returns a float32 tensor [batch, n_sites, n_positions, d_model] where the sites are resid_pre of
        each block and the final resid_post. Hooks slice the positions out as the forward pass runs,
        so only [batch, positions, d_model] per site is ever kept.
        """
        import torch

        from hooks.capture import PositionCapture

        ids, mask, offsets = self.pad(prompts)
        n_pos = {len(p) for p in positions}
        if len(n_pos) != 1:
            raise ValueError("every prompt needs the same number of positions")
        index = torch.tensor([[off + p for p in pos] for off, pos in zip(offsets, positions)], dtype=torch.long)
        for (off, pos), prompt in zip(zip(offsets, positions), prompts):
            if any(not 0 <= p < len(prompt) for p in pos):
                raise ValueError(f"position out of range 0..{len(prompt) - 1}: {list(pos)}")
        names = self.hook_names(layers)
        grouped = self.canonical_hooks(names)
        cap = PositionCapture(index.to(ids.device), len(names))
        site_of = {n: i for i, n in enumerate(names)}
        fwd_hooks = []
        for canon, aliases in grouped.items():
            fwd_hooks.append((canon, cap.hook([site_of[a] for a in aliases])))
        pos_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
        try:
            with torch.inference_mode():
                self.bridge.run_with_hooks(ids, fwd_hooks=fwd_hooks, attention_mask=mask, position_ids=pos_ids,
                                           return_type=None, logits_to_keep=1)
        except Exception as e:  # noqa: BLE001
            if _is_oom(e):
                raise ModelError(f"out of memory capturing a batch of {len(prompts)}: lower --batch-size") from None
            raise
        return cap.result()


def describe(rt: Runtime) -> str:
    i = rt.info
    return f"{i.name} ({i.architecture}, {i.n_layers} layers, d_model {i.d_model}, {i.dtype} on {i.device}{', compat' if i.compat else ''})"


__all__ = ["Generation", "ModelInfo", "Runtime", "Sampling", "StopRule", "describe"]
