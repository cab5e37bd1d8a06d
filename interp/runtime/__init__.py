"""The runtime: one object owns a model, and generation, capture, patching and steering are calls on it.

The package's rooms: `forward.py` (logits with any hooks, a cache of any hook names at chosen positions),
`patching.py` (batched activation-patching scans, attribution patching), `steering.py` (dose-response
tables and plots), `capture.py` (plain prompts: positions named by substring or index); this facade holds
loading, the decode loop, KV-cache surgery and residual capture, and every call of the rooms as a method.

`Runtime.load(name)` loads a Hugging Face causal LM (an embedded model from `interp.models`, a local
folder, or a hub name already in the local cache) straight onto its device (`device_map`, so a 34B
checkpoint never sits in host RAM first), with the fastest attention kernel the architecture has
(`sdpa`, else `eager`, recorded in `ModelInfo`).

**Hooks.** Every hook function is TransformerLens-style (`fn(tensor, hook=point)`, names such as
`blocks.{L}.hook_resid_pre`). Two mechanisms serve them, and one call always runs one of them end to
end (prefill and every decode step), so one call never mixes attention kernels:
- residual-stream names (`blocks.{L}.hook_resid_pre/post`, aliases `hook_in/out`, `ln_final.hook_out`),
  which are all the stages use, run as PyTorch forward hooks on the model's own decoder blocks
  (`interp.residual`). A hooked call is the unhooked call plus the hooks: an identity patch or a zero
  steering vector is an exact no-op in every dtype, and one steering hook costs ~nothing
  (perf/bench_generation.py, SmolLM2, b=1: 1.01x of Hugging Face with one steering hook this way vs
  0.64x through the bridge, side by side on a loaded machine; the issue measured 0.69x/0.58x at
  b=1/8 through the bridge on an idle one).
  It works on any architecture whose blocks form one `ModuleList`, remote-code ones included.
- any other hook name goes through a TransformerLens `TransformerBridge`, booted on first use around
  a second module tree that shares every weight tensor (no copy) and runs eager attention (the
  bridge forces it). The two mechanisms give the same tensors (tested per architecture: bit-identical
  when the model itself runs eager). `compat=True` boots the bridge at load in TransformerLens
  compatibility mode, which processes the weights, so then every call goes through it.

Generation (`generate`) is a hand-written decode loop: left padding with an attention mask and
explicit position ids, a full KV cache (`DynamicCache`), finished rows dropped from the batch (and
from the cache). Each row has its own seed: greedy rows take the argmax; sampled rows draw one
uniform number per step from their own `torch.Generator` and invert the CDF of the temperature-scaled
distribution, so a row's tokens do not depend on what else is in its batch (up to float rounding of
the logits, which a test bounds: batched greedy equals one-at-a-time greedy token for token). The
entropy of the model's next-token distribution (temperature 1, nats) is logged at every step.

`continue_batch` computes a shared prefix once and continues several suffixes from it. Its rows are
laid out with all padding on the left (never between prefix and suffix): a sliding-window layer
counts cache slots, so padding in the middle would shrink a padded row's window (issue 15: logits off
by up to 2.9 on tiny Gemma 3 / Mistral). Row i, whose suffix is p_i tokens shorter than the longest,
takes the prefix cache shifted right by p_i slots and recomputes the last p_i prefix tokens with its
suffix, which keeps every row's real tokens contiguous: exact for every attention pattern.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import inspect
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from interp.models import ModelError, ensure_folder, resolve
from interp.residual import FINAL_NORM_SITE, ResidualSites, SiteError
from interp.runtime import forward as _fw
from interp.runtime.capture import PlainPrompt, plain_prompt
from interp.runtime import patching as _patching

if TYPE_CHECKING:
    import numpy as np
    import torch
    from jaxtyping import Bool, Float, Int
    from transformers import BitsAndBytesConfig, Cache, PreTrainedModel, PreTrainedTokenizerBase
    from transformer_lens.model_bridge import TransformerBridge

#: Extra end-of-turn tokens that stop generation when present in the vocabulary.
END_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", "<|end|>")
FENCE = "```"
#: The last capture site: the residual stream leaving the last block (before the final norm), or the
#: final norm's output (what the unembedding reads; Hugging Face's last `hidden_states` in transformers 5).
FINAL_SITES = ("pre-norm", "post-norm")
QUANTIZE = ("8bit", "4bit")

Hooks = Sequence[tuple[str, Callable[..., Any]]]


@dataclass(frozen=True)
class ModelInfo:
    """What was loaded, recorded with every output (config.json, HDF5 metadata)."""

    name: str  #: registry name, folder or hub name as given
    source: str  #: embedded | organism | folder | hub
    path: str  #: the Hugging Face folder the weights came from
    weights_digest: str  #: `weights_digest(path)`: changes with any re-release of the weights
    architecture: str  #: `config.architectures[0]`, e.g. Gemma2ForCausalLM
    dtype: str  #: parameter dtype (float32, bfloat16, float16)
    device: str  #: where inputs go (the input embeddings' device)
    compat: bool  #: TransformerLens compatibility mode (processed weights; every call through the bridge)
    n_layers: int  #: decoder blocks; capture has n_layers + 1 sites
    d_model: int  #: residual-stream width
    chat: bool  #: the tokenizer has a chat template
    attention: str = "sdpa"  #: attention kernel every call runs (sdpa, eager, ...)
    attention_note: str = ""  #: why the kernel differs from the one asked for ("" when it does not)
    hooks: str = "forward"  #: forward (residual hooks on the HF blocks; bridge for other names) | bridge (compat)
    device_map: dict[str, str] = field(default_factory=dict)  #: module -> device as loaded ({"": device} unless split)
    quantization: str = "none"  #: none | 8bit | 4bit (bitsandbytes)
    trust_remote_code: bool = False  #: the model's own modeling code was allowed to run

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Sampling:
    """How one attempt picks tokens: temperature 0 is greedy; the seed drives the row's own generator."""

    temperature: float = 0.0  #: 0 = greedy (argmax); > 0 samples from softmax(logits / temperature)
    seed: int = 0  #: seed of the row's own torch.Generator


@dataclass(frozen=True)
class StopRule:
    """When a row stops generating."""

    max_new_tokens: int = 384  #: hard cap on generated tokens
    eos: bool = True  #: stop at EOS or an end-of-turn token
    fence: bool = True  #: stop at the ``` that closes the program's code block
    open_fence: bool = False  #: the prompt already opened the block, so the first ``` closes it
    strings: tuple[str, ...] = ()  #: custom stop strings (the text is cut after the first one found)

    @classmethod
    def free_text(cls, max_new_tokens: int = 256, strings: tuple[str, ...] = ()) -> "StopRule":
        """The preset for free text (a plain prompt, no program): EOS/end of turn, `strings` or the cap; no fence."""
        return cls(max_new_tokens=max_new_tokens, eos=True, fence=False, strings=tuple(strings))


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


def _dtype(name: str | None, device: str) -> torch.dtype:
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


def remote_code(folder: Path) -> str | None:
    """The class a folder's `auto_map` asks to run from its own files when transformers has no native one."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    try:
        raw = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"{folder}: cannot read the model config ({e})") from None
    ref = (raw.get("auto_map") or {}).get("AutoModelForCausalLM") if isinstance(raw, dict) else None
    if not ref or raw.get("model_type") in CONFIG_MAPPING_NAMES:
        return None  # transformers has the class itself: it never runs the folder's code
    return ref if isinstance(ref, str) else str(ref[0])


def _quantization_config(quantize: str | None, dtype: torch.dtype) -> BitsAndBytesConfig | None:
    if quantize is None:
        return None
    if quantize not in QUANTIZE:
        raise ModelError(f"unknown quantization {quantize!r}: use 8bit or 4bit")
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModelError(f"{quantize} loading needs bitsandbytes: `pip install bitsandbytes` (a CUDA GPU for most kernels)")
    from transformers import BitsAndBytesConfig

    if quantize == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=dtype)


class Runtime:
    """A loaded model: the Hugging Face model, its tokenizer, its residual hook points, and `info`."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, info: ModelInfo, sites: ResidualSites,
                 bridge: TransformerBridge | None = None,
                 bridge_factory: Callable[[], TransformerBridge] | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.sites = sites
        self.device = info.device
        self._bridge = bridge
        self._bridge_factory = bridge_factory
        self._force_bridge = info.compat
        #: prefill a prompt given several times in one generate() call once (see generate); off only to compare
        self.share_prefill = True
        #: the KV caches of the last shared prefixes computed without hooks (`_prefix_cache`): a few-shot protocol's
        #: examples are the same in every batch of a stage, so each is computed once per stage, not once per batch
        self._prefixes: dict[tuple[str, tuple[int, ...]], Cache] = {}
        params = inspect.signature(model.forward).parameters
        self._logits_to_keep = "logits_to_keep" in params
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
             attention: str | None = None, trust_remote_code: bool = False, device_map: str | dict | None = None,
             quantize: str | None = None) -> "Runtime":
        """Boot `model` (registry name, local HF folder, or a hub name in the local cache)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub at run time
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        kind, folder = resolve(model)
        if kind in ("embedded", "organism"):
            folder = ensure_folder(model, evaluate=evaluate_organism)  # an organism trained now is scored by this runtime
        elif kind == "hub":
            try:
                from huggingface_hub import snapshot_download

                folder = Path(snapshot_download(model, local_files_only=True))
            except Exception as e:  # noqa: BLE001 - any failure here means "not cached"
                raise ModelError(f"{model!r} is not in the local Hugging Face cache and nothing is downloaded "
                                 f"at run time; download it first or pass a local folder ({type(e).__name__})") from None
        assert folder is not None
        device = device or _default_device()
        return cls.from_folder(folder, name=model, source=kind, device=device, dtype=_dtype(dtype, device), compat=compat,
                               attention=attention, trust_remote_code=trust_remote_code, device_map=device_map,
                               quantize=quantize)

    @classmethod
    def from_folder(cls, folder: Path, name: str | None = None, source: str = "folder", device: str = "cpu",
                    dtype: str | torch.dtype | None = None, compat: bool = False, attention: str | None = None,
                    trust_remote_code: bool = False, device_map: str | dict | None = None,
                    quantize: str | None = None) -> "Runtime":
        """Load a Hugging Face folder. `attention=None` takes the fastest kernel the architecture has (sdpa,
        else eager); `device_map` "auto" spreads the blocks over the visible GPUs (default: all on `device`);
        `quantize` 8bit/4bit loads bitsandbytes weights; `trust_remote_code` lets a folder's own modeling
        code run (never implied)."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        dtype = dtype or torch.float32
        folder = Path(folder)
        label = name or str(folder)
        ref = remote_code(folder)
        if ref and not trust_remote_code:
            raise ModelError(f"{label} needs its own modeling code ({ref}, from the model folder) and code is run only "
                             "when asked: pass --trust-remote-code if you trust it")
        try:
            config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
        except Exception as e:  # noqa: BLE001
            raise ModelError(f"{label}: cannot read the model config ({e})") from None
        arch = (getattr(config, "architectures", None) or [type(config).__name__])[0]
        if compat:
            attention = "eager"  # the bridge forces eager; compat runs everything through it
        quant = _quantization_config(quantize, dtype)
        placement = device_map if device_map is not None else {"": device}
        kwargs: dict[str, Any] = {"dtype": dtype, "device_map": placement, "trust_remote_code": trust_remote_code}
        if attention is not None:
            kwargs["attn_implementation"] = attention
        if quant is not None:
            kwargs["quantization_config"] = quant
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
            hf = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        except Exception as e:  # noqa: BLE001
            if _is_oom(e):
                raise ModelError(f"out of memory loading {label} on {device} as {dtype}: try --dtype bfloat16, "
                                 "--device-map auto, --quantize 8bit, a smaller model, or another device") from None
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise ModelError(f"cannot load {label} ({arch}): {type(e).__name__}: {first}") from e
        hf.eval()
        used = getattr(hf.config, "_attn_implementation", None) or "eager"
        note = ""
        if attention is None and used != "sdpa":
            import transformers

            note = f"{arch} has no sdpa kernel (transformers {transformers.__version__}); runs {used}"
        try:
            sites = ResidualSites(hf)
        except SiteError as e:
            raise ModelError(f"{label} ({arch}): {e}") from None
        embed = hf.get_input_embeddings()
        in_device = str(embed.weight.device) if embed is not None else str(device)
        d_model = int(embed.embedding_dim) if embed is not None else int(config.hidden_size)
        dev_map = {str(k): str(v) for k, v in (getattr(hf, "hf_device_map", None) or {"": in_device}).items()}
        info = ModelInfo(
            name=name or folder.name, source=source, path=str(folder), weights_digest=weights_digest(folder),
            architecture=arch, dtype=str(dtype).replace("torch.", ""), device=in_device, compat=compat,
            n_layers=sites.n_layers, d_model=d_model, chat=bool(getattr(tokenizer, "chat_template", None)),
            attention=used, attention_note=note, hooks="bridge" if compat else "forward", device_map=dev_map,
            quantization=quantize or "none", trust_remote_code=trust_remote_code,
        )

        def boot(twin_of: PreTrainedModel = hf) -> TransformerBridge:
            from transformer_lens.model_bridge import TransformerBridge

            if compat:
                twin = twin_of
            else:
                # the twin shares every parameter and buffer tensor with `hf` (its config is its own);
                # the bridge rewires the twin's modules and runs them with eager attention
                memo: dict[int, torch.Tensor] = {id(p): p for p in twin_of.parameters()}
                memo.update({id(b): b for b in twin_of.buffers()})
                twin = copy.deepcopy(twin_of, memo)
                twin.set_attn_implementation("eager")
            try:
                # booted lazily, possibly inside a generate call: never make its tensors inference-only
                with torch.inference_mode(False):
                    bridge = TransformerBridge.boot_transformers(str(folder), hf_model=twin, tokenizer=tokenizer,
                                                                 device=in_device, dtype=dtype)
            except Exception as e:  # noqa: BLE001
                raise ModelError(f"TransformerBridge cannot adapt {arch} ({type(e).__name__}: {e}); on this model only "
                                 f"residual-stream hooks run (blocks.L.hook_resid_pre/post, {FINAL_NORM_SITE})") from None
            if compat:
                bridge.enable_compatibility_mode(disable_warnings=True)
            bridge.eval()
            return bridge

        bridge = boot() if compat else None
        return cls(hf, tokenizer, info, sites, bridge=bridge, bridge_factory=None if compat else boot)

    @property
    def bridge(self) -> TransformerBridge:
        """The TransformerBridge over the same weights, booted on first use (ModelError when it has no adapter)."""
        if self._bridge is None:
            if self._bridge_factory is None:
                raise ModelError(f"{self.info.name}: no TransformerBridge was booted for this runtime")
            self._bridge = self._bridge_factory()
        return self._bridge

    @contextlib.contextmanager
    def via_bridge(self) -> Iterator[None]:
        """Run every call inside the block through the bridge (eager attention): a reference to test against."""
        before = self._force_bridge
        self.bridge  # noqa: B018 - boot it now, so an unsupported architecture fails here
        self._force_bridge = True
        try:
            yield
        finally:
            self._force_bridge = before

    # ------------------------------------------------------------------ hook points

    def hook_names(self, layers: Sequence[int] | None = None, final: str = "pre-norm") -> list[str]:
        """Residual-stream sites: resid_pre of block L for L < n_layers; L = n_layers is the final site,
        the last block's resid_post (before the final norm) or, with final="post-norm", `ln_final.hook_out`."""
        if final not in FINAL_SITES:
            raise ValueError(f"final site must be one of {FINAL_SITES}, not {final!r}")
        n = self.info.n_layers
        layers = range(n + 1) if layers is None else layers
        names = []
        for layer in layers:
            if not 0 <= layer <= n:
                raise ValueError(f"layer {layer} out of range 0..{n}")
            if layer < n:
                names.append(f"blocks.{layer}.hook_resid_pre")
            elif final == "post-norm":
                if self.sites.norm is None:
                    raise ModelError(f"{self.info.name}: no final norm found next to the decoder blocks; "
                                     "only the pre-norm final site is available")
                names.append(FINAL_NORM_SITE)
            else:
                names.append(f"blocks.{n - 1}.hook_resid_post")
        return names

    def canonical_hooks(self, names: Sequence[str]) -> dict[str, list[str]]:
        """Group hook names by the hook point they resolve to (aliases share one), keyed by canonical name."""
        out: dict[str, list[str]] = {}
        if self.sites.serves(names):
            for name in names:
                out.setdefault(self.sites.canonical(name), []).append(name)
            return out
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

    def _path(self, hooks: Hooks) -> str:
        """'hf' (forward hooks on the model's own blocks) or 'bridge': one per call, prefill and decode alike."""
        if self._force_bridge or not self.sites.serves([name for name, _ in hooks]):
            return "bridge"
        return "hf"

    def _attached(self, hooks: Hooks, path: str) -> contextlib.AbstractContextManager[object]:
        if not hooks:
            return contextlib.nullcontext()
        if path == "bridge":
            return self.bridge.hooks(fwd_hooks=list(hooks))
        return self.sites.attached(hooks)

    # ------------------------------------------------------------------ forward passes

    def _forward(self, ids: Int[torch.Tensor, "batch seq"], mask: Int[torch.Tensor, "batch total"], cache: Cache,
                 path: str) -> tuple[Float[torch.Tensor, "batch vocab"], Cache]:
        pos = (mask.long().cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1]:]
        if path == "bridge":
            logits, cache = self.bridge(ids, return_type="logits_and_cache", attention_mask=mask, past_key_values=cache,
                                        use_cache=True, position_ids=pos, logits_to_keep=1)
            return logits[:, -1, :], cache
        extra = {"logits_to_keep": 1} if self._logits_to_keep else {}
        out = self.model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True, position_ids=pos, **extra)
        cache = out.past_key_values
        if not hasattr(cache, "batch_select_indices"):
            raise ModelError(f"{self.info.name} returned a legacy KV cache ({type(cache).__name__}); the runtime needs a "
                             "transformers Cache (a checkpoint in a native transformers format)")
        return out.logits[:, -1, :], cache

    @staticmethod
    def _new_cache() -> Cache:
        # a full cache on every layer: sliding-window layers are masked by position instead of being
        # truncated, which continue_batch needs to shift a row's cache (see the module docstring)
        return _growing_cache()

    def pad(self, prompts: Sequence[Sequence[int]]) -> tuple[Int[torch.Tensor, "batch seq"], Int[torch.Tensor, "batch seq"], list[int]]:
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
                 hooks: Hooks = (), on_token: Callable[[int], None] | None = None) -> list[Generation]:
        """Generate one continuation per prompt row; `sampling[i]` decides row i's tokens; `hooks` run at every step."""
        import torch

        if len(prompts) != len(sampling):
            raise ValueError("one Sampling per prompt")
        common = _common_prefix(prompts) if self.share_prefill and not hooks else 0
        if common >= SHARED_PREFIX_MIN:
            # every row starts with the same tokens (a few-shot protocol's examples): prefill them once, as
            # continue_batch does; each row then generates what it would alone (tested like continue_batch)
            return self.continue_batch(list(prompts[0][:common]), [list(p[common:]) for p in prompts], sampling, stop,
                                       on_token=on_token)
        ids, mask, _ = self.pad(prompts)
        path = self._path(hooks)
        # a prompt given several times (its greedy and sampled attempts) is prefilled once and its cache row
        # repeated: prefilling long (few-shot) prompts is most of generation's cost, and the repeated rows are
        # the same computation. Hooks may act per row, so a hooked call prefills every row.
        unique, expand = _distinct_rows(prompts)
        share = self.share_prefill and not hooks and len(unique) < len(prompts)
        try:
            with torch.inference_mode(), self._attached(hooks, path):
                if share:
                    logits, cache = self._forward(ids[unique], mask[unique], self._new_cache(), path)
                    logits = _repeat_rows(logits, cache, expand)
                else:
                    logits, cache = self._forward(ids, mask, self._new_cache(), path)
                return self._decode(logits, cache, mask, sampling, stop, path, on_token)
        except Exception as e:  # noqa: BLE001
            if _is_oom(e):
                raise ModelError(f"out of memory generating a batch of {len(prompts)} on {self.device}: "
                                 "lower --batch-size or --max-new-tokens") from None
            raise

    def continue_batch(self, prefix: Sequence[int], suffixes: Sequence[Sequence[int]], sampling: Sequence[Sampling],
                       stop: StopRule = StopRule(), hooks: Hooks = (), prefill_hooks: Hooks = (),
                       on_token: Callable[[int], None] | None = None) -> list[Generation]:
        """Continue `prefix + suffixes[i]` for every row, computing the shared prefix once.

        Row i generates exactly what `generate([prefix + suffixes[i]])` would (tested on every
        architecture, sliding windows included). `hooks` run at every step (steering), on the prefix
        too; `prefill_hooks` run while the suffixes are processed (activation patching at the cut).
        Their tensor is [rows, S, d_model] with row i's suffix in its last len(suffixes[i]) positions;
        what a prefill hook writes anywhere else is discarded."""
        import torch

        if len(suffixes) != len(sampling):
            raise ValueError("one Sampling per suffix")
        if not prefix or any(len(x) == 0 for x in suffixes):
            raise ValueError("the prefix and every suffix need at least one token")
        b = len(suffixes)
        # a suffix given several times (a prompt's greedy and sampled attempts, an arm's continuations) is
        # prefilled once and its rows repeated, as in generate(); hooks may act per row, so not when hooked
        unique, expand = _distinct_rows(suffixes)
        share = self.share_prefill and not hooks and not prefill_hooks and len(unique) < b
        block_rows = [suffixes[u] for u in unique] if share else list(suffixes)
        block, mask, shift = self._suffix_block(prefix, block_rows)
        width = block.shape[1]
        path = self._path(list(hooks) + list(prefill_hooks))
        in_suffix = torch.zeros((b, width), dtype=torch.bool)
        for i, s in enumerate(suffixes):
            in_suffix[i, width - len(s):] = True
        patch = [(name, _only_where(fn, in_suffix)) for name, fn in prefill_hooks] if any(shift) else list(prefill_hooks)
        try:
            with torch.inference_mode():
                cache = self._prefix_cache(prefix, path, hooks)  # steering hooks act on the prefix too
                _shift_rows(cache, shift)
                with self._attached(list(hooks) + patch, path):
                    logits, cache = self._forward(block, mask, cache, path)
                if share:
                    logits, mask = _repeat_rows(logits, cache, expand), mask[expand]
                with self._attached(hooks, path):
                    return self._decode(logits, cache, mask, sampling, stop, path, on_token)
        except Exception as e:  # noqa: BLE001
            if _is_oom(e):
                raise ModelError(f"out of memory continuing {b} rows on {self.device}: use fewer continuations") from None
            raise

    #: shared prefixes whose KV caches `_prefix_cache` keeps (a study's stage alternates at most between its tasks')
    PREFIXES_KEPT = 2

    def _prefix_cache(self, prefix: Sequence[int], path: str, hooks: Hooks = ()) -> Cache:
        """A fresh KV cache of `prefix` (batch 1). Unhooked ones are computed on first use, then copied from the
        last PREFIXES_KEPT prefixes (the same tensors as computing it again: the same call on the same weights);
        a hooked one is computed each time with its hooks and not kept."""
        import torch

        key = (path, tuple(prefix))
        kept = None if hooks else self._prefixes.pop(key, None)
        if kept is None:
            pre_ids = torch.tensor([list(prefix)], dtype=torch.long, device=self.device)
            with torch.inference_mode(), self._attached(hooks, path):
                _, kept = self._forward(pre_ids, torch.ones_like(pre_ids), self._new_cache(), path)
            if hooks:
                return kept
        self._prefixes[key] = kept  # most recently used last
        while len(self._prefixes) > self.PREFIXES_KEPT:
            self._prefixes.pop(next(iter(self._prefixes)))
        return copy.deepcopy(kept)

    def _suffix_block(self, prefix: Sequence[int], suffixes: Sequence[Sequence[int]]
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
            rows.append([self.pad_id] * max(p - n_pre, 0) + full[max(n_pre - p, 0):])
        block = torch.tensor(rows, dtype=torch.long, device=self.device)
        mask = torch.ones((b, n_pre + width), dtype=torch.long, device=self.device)
        for i, p in enumerate(shift):
            mask[i, :p] = 0
        return block, mask, shift

    def _decode(self, logits: Float[torch.Tensor, "batch vocab"], cache: Cache, mask: Int[torch.Tensor, "batch total"],
                sampling: Sequence[Sampling], stop: StopRule, path: str,
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
            logits, cache = self._forward(nxt, mask, cache, path)
        return gens

    @staticmethod
    def _pick(logits: Float[torch.Tensor, " vocab"], s: Sampling, rng: torch.Generator | None) -> int:
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

    def input_embeddings(self, tokens: Sequence[int]) -> Float[np.ndarray, "tokens d_model"]:
        """The model's own input embeddings of these tokens (its embedding module, scaling included where the
        module scales), float32 on the CPU; a lexical baseline of the probe stage reads their mean."""
        import torch

        emb = self.model.get_input_embeddings()
        with torch.inference_mode():
            ids = torch.tensor([list(tokens)], dtype=torch.long, device=emb.weight.device)
            return emb(ids)[0].float().cpu().numpy()

    def capture(self, prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]],
                layers: Sequence[int] | None = None, final: str = "pre-norm") -> Float[torch.Tensor, "batch site pos d_model"]:
        """Residual stream at `positions` (per prompt, indices into its own tokens) at every site of `hook_names`.

        Returns float32 [batch, n_sites, n_positions, d_model]: resid_pre of each block in `layers`, and for
        layer n_layers the final site (`final`: pre-norm, the last block's output; post-norm, the final
        norm's output). Hooks slice the positions out as the forward pass runs, so only
        [batch, positions, d_model] per site is ever kept. Rows that share a long prefix (a few-shot
        protocol's examples) compute it once (`_prefix_groups`, `_capture_after`): the same activations up to
        float rounding; `share_prefill = False` runs one whole pass per prompt.
        """
        import torch

        n_pos = {len(p) for p in positions}
        if len(n_pos) != 1:
            raise ValueError("every prompt needs the same number of positions")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        for pos, prompt in zip(positions, prompts):
            if any(not 0 <= p < len(prompt) for p in pos):
                raise ValueError(f"position out of range 0..{len(prompt) - 1}: {list(pos)}")
        groups = _prefix_groups(prompts, positions) if self.share_prefill else [(0, list(range(len(prompts))))]
        parts = []
        try:
            for common, rows in groups:
                if common >= SHARED_PREFIX_MIN:
                    part = self._capture_after(list(prompts[rows[0]][:common]), [list(prompts[r][common:]) for r in rows],
                                               [[p - common for p in positions[r]] for r in rows], layers, final)
                else:
                    part = self._capture_whole([prompts[r] for r in rows], [positions[r] for r in rows], layers, final)
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

    def _capture_whole(self, prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]],
                       layers: Sequence[int] | None, final: str) -> Float[torch.Tensor, "batch site pos d_model"]:
        """`capture` with one forward pass over the left-padded prompts."""
        import torch

        from hooks.capture import PositionCapture

        ids, mask, offsets = self.pad(prompts)
        index = torch.tensor([[off + p for p in pos] for off, pos in zip(offsets, positions)], dtype=torch.long)
        names = self.hook_names(layers, final)
        cap = PositionCapture(index.to(ids.device), len(names))
        fwd_hooks = self._capture_hooks(cap, names)
        pos_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
        path = self._path(fwd_hooks)
        with torch.inference_mode():
            if path == "bridge":
                self.bridge.run_with_hooks(ids, fwd_hooks=fwd_hooks, attention_mask=mask, position_ids=pos_ids,
                                           return_type=None, logits_to_keep=1)
            else:
                extra = {"logits_to_keep": 1} if self._logits_to_keep else {}
                with self.sites.attached(fwd_hooks):
                    self.model(input_ids=ids, attention_mask=mask, position_ids=pos_ids, use_cache=False, **extra)
        return cap.result()

    def _capture_after(self, prefix: Sequence[int], suffixes: Sequence[Sequence[int]], positions: Sequence[Sequence[int]],
                       layers: Sequence[int] | None, final: str) -> Float[torch.Tensor, "batch site pos d_model"]:
        """`capture` of `prefix + suffixes[i]` at `positions[i]` (indices into the suffix): the shared prefix is
        computed once into a KV cache, unhooked (no captured position lies in it), and the suffixes run on it with
        the capture hooks, laid out as `continue_batch` lays them out. The same activations as one pass per prompt
        up to float rounding (tests/interp/test_runtime.py bounds it on every architecture)."""
        import torch

        from hooks.capture import PositionCapture

        block, mask, shift = self._suffix_block(prefix, suffixes)
        index = torch.tensor([[p + s for p in pos] for pos, s in zip(positions, shift)], dtype=torch.long)
        names = self.hook_names(layers, final)
        cap = PositionCapture(index.to(block.device), len(names))
        fwd_hooks = self._capture_hooks(cap, names)
        path = self._path(fwd_hooks)
        with torch.inference_mode():
            cache = self._prefix_cache(prefix, path)
            _shift_rows(cache, shift)
            with self._attached(fwd_hooks, path):
                self._forward(block, mask, cache, path)
        return cap.result()

    def _capture_hooks(self, cap: Any, names: Sequence[str]) -> list[tuple[str, Callable[..., Any]]]:
        grouped = self.canonical_hooks(names)
        site_of = {n: i for i, n in enumerate(names)}
        return [(canon, cap.hook([site_of[a] for a in aliases])) for canon, aliases in grouped.items()]

    # ------------------------------------------------------------------ forward, cache, patching (forward.py, patching.py)

    def forward(self, inputs: Any, hooks: Hooks = (), grad: bool = False) -> Float[torch.Tensor, "batch seq vocab"]:
        """Logits [batch, seq, vocab] of one teacher-forced pass with `hooks` ([(name, fn(tensor, hook))]) attached.

        `inputs`: a text, a list of texts, token ids or a list of token-id lists (rows of different lengths are
        left-padded, with a mask and position ids: row i's token j is column `offset_i + j`). Residual-stream
        names run on the model's own blocks, any other name through the bridge (interp/runtime/forward.py).
        `grad=True` keeps the autograd graph (attribution patching); otherwise it runs in inference mode.

            logits = rt.forward("Draw the flag of Germany.")
            zeroed = rt.forward(text, hooks=[("blocks.3.attn.hook_z", lambda z, hook: z * 0)])"""
        return _fw.forward(self, inputs, hooks, grad)

    def run_with_cache(self, inputs: Any, names: Sequence[str] | str | None = None,
                       positions: Sequence[int] | Sequence[Sequence[int]] | None = None, hooks: Hooks = (),
                       device: str | None = "cpu") -> tuple[Float[torch.Tensor, "batch seq vocab"], dict[str, torch.Tensor]]:
        """(logits, cache): `cache[name]` is the activation of each hook name (default: every residual site of
        `hook_names()`), float32 on `device` (None: where the model runs), sliced to `positions` (indices into
        each row's tokens, one list for all rows or one per row; negative from the end; the query axis of an
        attention pattern). `hooks` run first, so a patched run caches its patched values.

            logits, cache = rt.run_with_cache(text, names=["blocks.2.hook_resid_post", "blocks.2.attn.hook_z"],
                                              positions=[-1])
            cache["blocks.2.attn.hook_z"].shape   # [1, 1, n_heads, d_head]"""
        return _fw.run_with_cache(self, inputs, names, positions, hooks, device)

    def patch_scan(self, corrupt: Any, clean: Any, metric: Callable[..., Any], names: str | Sequence[str],
                   positions: Sequence[int] | None = None, heads: Sequence[int] | str | None = None,
                   layers: Sequence[int] | None = None, batch_size: int = 64) -> _patching.Scan:
        """Exact activation patching of `clean` into `corrupt` at every (name, position[, head]), many patched runs
        per forward (interp/runtime/patching.py). `names`: a template such as "blocks.{L}.attn.hook_z" (over
        `layers`, default all) or a list; `metric(logits)` returns one value per row.

            scan = rt.patch_scan(corrupt, clean, logit_diff, "blocks.{L}.attn.hook_z", heads="all")
            scan.normalized()   # [layer, pos, head]: 0 = corrupt, 1 = clean"""
        return _patching.patch_scan(self, corrupt, clean, metric, names, positions, heads, layers, batch_size)

    def attribution_scan(self, corrupt: Any, clean: Any, metric: Callable[..., Any], names: str | Sequence[str],
                         positions: Sequence[int] | None = None, heads: Sequence[int] | str | None = None,
                         layers: Sequence[int] | None = None) -> _patching.Scan:
        """Attribution patching (one forward, one backward): every site's effect estimated as grad . (clean -
        corrupt); the same `Scan` as `patch_scan`, exact where the metric is linear in the site."""
        return _patching.attribution_scan(self, corrupt, clean, metric, names, positions, heads, layers)

    def dose_response(self, inputs: Any, name: str, direction: Any, alphas: Sequence[float], metric: Callable[..., Any],
                      positions: Any = None, level: float = 0.95) -> Any:
        """A pandas table (alpha, metric, low, high, n, level, note) of `metric(logits)` (one value per prompt) with
        `alpha * direction` added at hook `name` at `positions` ("prompt", "generated", a slice or token indices;
        hooks.steer.add_direction); plot it with `interp.runtime.steering.plot_dose_response`.

            table = rt.dose_response(texts, "blocks.6.hook_resid_pre", v, [0, 1, 2, 4], logit_diff, positions=[-1])"""
        from interp.runtime.steering import logit_dose_response

        return logit_dose_response(self, inputs, name, direction, alphas, metric, positions, level)

    # ------------------------------------------------------------------ attention

    def attention_mass(self, tokens: Sequence[int], queries: Sequence[int], groups: Sequence[Sequence[int]],
                       layers: Sequence[int] | None = None) -> Float[torch.Tensor, "layer query group 2"]:
        """Attention from `queries` onto groups of key positions, per layer, in one teacher-forced pass.

        Returns float32 [layers, queries, groups, 2]: [..., 0] the attention weight summed over the group's
        keys, averaged over heads; [..., 1] how many of the group's keys the query sees (a non-zero weight
        in some head: the causal mask, and a sliding window where the layer has one). Reads
        `blocks.{L}.attn.hook_pattern`, a TransformerBridge hook (eager attention, booted on first use; an
        architecture without a bridge adapter is one sentence). Only that reduction is kept per layer."""
        import torch

        from hooks.attention import KeyGroupMass

        n = self.info.n_layers
        layers = list(range(n)) if layers is None else list(layers)
        if any(not 0 <= layer < n for layer in layers):
            raise ValueError(f"layers must be in 0..{n - 1}")
        size = len(tokens)
        if not size or any(not 0 <= q < size for q in queries) or any(not 0 <= k < size for g in groups for k in g):
            raise ValueError(f"query and key positions must lie in 0..{size - 1}")
        member = torch.zeros((len(groups), size), dtype=torch.float32)
        for gi, keys in enumerate(groups):
            member[gi, list(keys)] = 1.0
        cap = KeyGroupMass(torch.tensor(list(queries), dtype=torch.long), member, len(layers))
        hooks = [(f"blocks.{layer}.attn.hook_pattern", cap.hook(i)) for i, layer in enumerate(layers)]
        ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)
        mask = torch.ones_like(ids)
        try:
            with torch.inference_mode():
                self.bridge.run_with_hooks(ids, fwd_hooks=hooks, attention_mask=mask,
                                           position_ids=torch.arange(size, device=ids.device)[None], return_type=None,
                                           logits_to_keep=1)
        except Exception as e:  # noqa: BLE001
            if _is_oom(e):
                raise ModelError(f"out of memory on the attention pattern of {size} tokens on {self.device}") from None
            raise
        return cap.result()


def _only_where(fn: Callable[..., Any], where: Bool[torch.Tensor, "rows seq"]) -> Callable[..., Any]:
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


#: generate() prefills a prefix shared by every row once when it is at least this long (shorter ones save little)
SHARED_PREFIX_MIN = 64


def _common_prefix(prompts: Sequence[Sequence[int]]) -> int:
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


def _prefix_groups(prompts: Sequence[Sequence[int]], positions: Sequence[Sequence[int]]) -> list[tuple[int, list[int]]]:
    """Rows of a capture batch grouped to share a prefix: [(common, rows)], each group's rows starting with the same
    `common` tokens, all of them before the group's first captured position (common 0: no sharing). The grouping
    computes the fewest tokens: prompts sorted, a run's common prefix is the smallest common prefix of neighbours,
    and a run is split at those neighbours when its parts, each with its own prefix, cost fewer tokens."""
    def shareable(r: int) -> int:  # never a captured position (nor the last token: a suffix has one at least)
        return min([len(prompts[r]) - 1, *positions[r]])

    alone = [r for r in range(len(prompts)) if shareable(r) < SHARED_PREFIX_MIN]
    order = sorted((r for r in range(len(prompts)) if shareable(r) >= SHARED_PREFIX_MIN), key=lambda r: tuple(prompts[r]))

    cap = [shareable(r) for r in order]
    # _common_prefix keeps a token of each prompt back, which the caps (<= len - 1) already do
    near = [min(_common_prefix([prompts[a], prompts[b]]), cap[i], cap[i + 1]) for i, (a, b) in enumerate(zip(order, order[1:]))]

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


def _distinct_rows(rows: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """The first index of each distinct row, in order, and for every row the position of its first copy among
    them: `rows[i] == rows[unique[expand[i]]]` (a prompt or suffix given several times is computed once)."""
    first: dict[tuple[int, ...], int] = {}
    expand = [first.setdefault(tuple(r), len(first)) for r in rows]
    unique: list[int] = []
    for i, k in enumerate(expand):
        if k == len(unique):  # a row's first copy: the copies are numbered in the order they first appear
            unique.append(i)
    return unique, expand


def _repeat_rows(logits: Float[torch.Tensor, "distinct vocab"], cache: Cache, expand: list[int]
                 ) -> Float[torch.Tensor, "batch vocab"]:
    """Logits and cache rows of the distinct rows repeated back to every row (`_distinct_rows`)."""
    import torch

    index = torch.tensor(expand, device=logits.device)
    cache.batch_select_indices(index)
    return logits[index]


def _growing_cache() -> Cache:
    return _growing_cache_class()()


@functools.cache
def _growing_cache_class() -> type:
    """The class of `_growing_cache`: a DynamicCache whose layers append each step's keys and values into buffers with spare room.

    DynamicLayer concatenates the whole cache with each new token: on a CPU that copy was 57% of a decode step
    (torch.profiler, SmolLM2, 8 rows, ~1,000 tokens of context, 40 steps: 34.8 s, then 17.8 s with this cache).
    Here a layer writes the new states
    into its buffer and hands attention a view of the filled part: the same keys and values, so the same
    logits. Whoever replaces `keys`/`values` (batch_select_indices, `_shift_rows`, a deepcopy) leaves a tensor
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


def _shift_rows(cache: Cache, shift: Sequence[int]) -> None:
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


def evaluate_organism(folder: Path, data: Any, batch: int = 50) -> dict[str, Any]:
    """A freshly trained organism's held-out accuracy (its training record's "eval"): greedy answers to every held-out
    prompt of `data` (an `interp.organisms.data.Dataset`) through the runtime (zero-shot protocol), checked per
    prompt. Generation stops 16 tokens past the longest right answer: a longer one cannot be right. Handed to
    `interp.organisms.folder_for`/`build_folder` by their callers: the organisms package never imports the runtime."""
    from interp.prompts import Protocol, build

    rt = Runtime.from_folder(folder, name=folder.name)
    known = [e for e in data.heldout if e.program] or data.training_examples(64, 0)
    longest = max(len(rt.tokenizer(e.answer, add_special_tokens=False)["input_ids"]) for e in known)
    max_new_tokens = longest + 16
    proto = Protocol("zero-shot", 0)
    results = []
    for i in range(0, len(data.heldout), batch):
        chunk = data.heldout[i : i + batch]
        built = [build(ex.item, proto, rt.tokenizer) for ex in chunk]
        gens = rt.generate([b.tokens for b in built], [Sampling(0.0, 0)] * len(chunk), StopRule(max_new_tokens=max_new_tokens))
        for ex, g in zip(chunk, gens):
            results.append({"id": ex.item.id, "correct": g.stop == "fence" and data.check(ex, g.text), "text": g.text})
    correct = sum(r["correct"] for r in results)
    return {"heldout_prompts": len(results), "heldout_correct": correct,
            "heldout_accuracy": round(correct / max(1, len(results)), 6),
            "wrong": [{"id": r["id"], "text": r["text"]} for r in results if not r["correct"]][:10]}



#: the stop rule for free text: EOS or end of turn, or 256 tokens; never a code fence
FREE_TEXT = StopRule.free_text()


def describe(rt: Runtime) -> str:
    i = rt.info
    extra = "".join([f", {i.attention}", ", compat" if i.compat else "",
                     f", {i.quantization}" if i.quantization != "none" else "",
                     ", split over " + ",".join(sorted(set(i.device_map.values()))) if len(set(i.device_map.values())) > 1 else ""])
    return f"{i.name} ({i.architecture}, {i.n_layers} layers, d_model {i.d_model}, {i.dtype} on {i.device}{extra})"


__all__ = ["FINAL_SITES", "Generation", "ModelInfo", "Runtime", "Sampling", "StopRule", "describe", "evaluate_organism",
           "remote_code", "plain_prompt", "PlainPrompt", "FREE_TEXT"]
