"""Loading: a model name or folder becomes the pieces a `Runtime` owns (the Hugging Face model, its tokenizer,
its residual hook points, `ModelInfo`, and a lazily booted TransformerBridge).

`locate(name)` resolves a registry name, an organism, a local folder or a hub name already in the local cache
to a folder (nothing is downloaded at run time); `open_folder(folder, ...)` loads it straight onto its device
(`device_map`, so a 34B checkpoint never sits in host RAM first) with the fastest attention kernel the
architecture has (`sdpa`, else `eager`, recorded in `ModelInfo`). `Runtime.load` and `Runtime.from_folder`
are these two calls; this module never imports the runtime facade.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from interp.models import ModelError, ensure_folder, resolve
from interp.residual import FINAL_NORM_SITE, ResidualSites, SiteError

if TYPE_CHECKING:
    import torch
    from transformers import BitsAndBytesConfig, PreTrainedModel, PreTrainedTokenizerBase
    from transformer_lens.model_bridge import TransformerBridge

QUANTIZE = ("8bit", "4bit")

_SDPA_RUNS: dict[str, str] = {}


def cpu_sdpa_failure(dtype: torch.dtype) -> str:
    """Why PyTorch's CPU `scaled_dot_product_attention` cannot run in `dtype` here ("" when it runs), tried once
    per process on a causal 1 x 1 x 256 x 64 call: long enough (>= 64 queries and keys) that the flash kernel
    packs its operands for AMX. On a CPU with AMX, torch 2.13 forced to a lower kernel level
    (`ATEN_CPU_CAPABILITY=default`) reaches that packing and raises "pack_vnni2 is only supported when avx512
    is supported" for bfloat16 (issue 29); the eager kernel's matmul and softmax do not pack."""
    import torch

    key = str(dtype)
    if key not in _SDPA_RUNS:
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 1, 256, 64, generator=gen).to(dtype) for _ in range(3))
        try:
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            _SDPA_RUNS[key] = ""
        except RuntimeError as e:
            first = (str(e).strip().splitlines() or [""])[0]
            level = os.environ.get("ATEN_CPU_CAPABILITY") or torch.backends.cpu.get_cpu_capability()
            _SDPA_RUNS[key] = (f"PyTorch's CPU sdpa kernel cannot run {key.replace('torch.', '')} here (kernel level "
                               f"{level}: {first}); runs eager")
    return _SDPA_RUNS[key]


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


def locate(model: str, evaluate: Callable[..., Any] | None = None) -> tuple[str, Path]:
    """(source, folder) of `model`: a registry name or organism (built on first use, scored by `evaluate`), a local
    Hugging Face folder, or a hub name already in the local cache (ModelError otherwise: nothing is downloaded)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub at run time
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    kind, folder = resolve(model)
    if kind in ("embedded", "organism"):
        folder = ensure_folder(model, evaluate=evaluate)  # an organism trained now is scored by the caller's runtime
    elif kind == "hub":
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(model, local_files_only=True))
        except Exception as e:  # noqa: BLE001 - any failure here means "not cached"
            raise ModelError(f"{model!r} is not in the local Hugging Face cache and nothing is downloaded "
                             f"at run time; download it first or pass a local folder ({type(e).__name__})") from None
    assert folder is not None
    return kind, Path(folder)


class Loaded(NamedTuple):
    """What `open_folder` hands to `Runtime`: `bridge` is booted now only in compatibility mode, else `boot`
    boots it on first use."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    info: ModelInfo
    sites: ResidualSites
    bridge: TransformerBridge | None
    boot: Callable[[], TransformerBridge] | None


def check_device(device: Any) -> None:
    """A device this machine has, or one sentence before anything loads (issue 40: device="cuda:7" on a CPU build was
    torch's bare AssertionError, wrapped). The command line's --device check calls it too."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"device {device!r}: give 'cpu', 'cuda', 'cuda:N' or 'mps'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this torch has no CUDA device (a CPU build, or no GPU visible); "
                             "use the cpu")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ValueError(f"device {device!r}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}")
    elif dev.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device {device!r}: MPS is not available here (it is for Apple silicon); use the cpu")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device {device!r}: give 'cpu', 'cuda', 'cuda:N' or 'mps'")


#: tokenizers loaded before the model (the prompt-length check, `experiments.study.checks.check_lengths`), kept for the
#: next load of the same folder, which takes the instance (each is handed over once): a tokenizer with Gemma 3's 262,144
#: tokens took 3.5 s to load, twice per command (the check, then the runtime)
_HANDED: dict[tuple[str, bool], Any] = {}


def tokenizer_for_check(folder: Path, trust_remote_code: bool = False) -> Any:
    """The folder's tokenizer for a check made before the model loads (read it, never change it): the same instance is
    handed to the next `open_folder` of this folder in this process, which then does not load it again."""
    from transformers import AutoTokenizer

    key = (str(Path(folder).resolve()), bool(trust_remote_code))
    if key not in _HANDED:
        _HANDED.clear()  # one at a time: a check is followed by its load
        _HANDED[key] = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    return _HANDED[key]


def open_folder(folder: Path, name: str | None = None, source: str = "folder", device: str = "cpu",
                dtype: str | torch.dtype | None = None, compat: bool = False, attention: str | None = None,
                trust_remote_code: bool = False, device_map: str | dict | None = None,
                quantize: str | None = None) -> Loaded:
    """Load a Hugging Face folder. `attention=None` takes the fastest kernel the architecture has (sdpa,
    else eager); `device_map` "auto" spreads the blocks over the visible GPUs (default: all on `device`);
    `quantize` 8bit/4bit loads bitsandbytes weights; `trust_remote_code` lets a folder's own modeling
    code run (never implied)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    dtype = dtype or torch.float32
    folder = Path(folder)
    label = name or str(folder)
    if device_map is None:
        check_device(device)
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
    fallback = ""
    on_cpu = device_map is None and str(device) == "cpu"
    if on_cpu and attention in (None, "sdpa") and dtype in (torch.bfloat16, torch.float16):
        fallback = cpu_sdpa_failure(dtype)
        if fallback:
            attention = "eager"
    quant = _quantization_config(quantize, dtype)
    placement = device_map if device_map is not None else {"": device}
    kwargs: dict[str, Any] = {"dtype": dtype, "device_map": placement, "trust_remote_code": trust_remote_code}
    if attention is not None:
        kwargs["attn_implementation"] = attention
    if quant is not None:
        kwargs["quantization_config"] = quant
    try:
        tokenizer = _HANDED.pop((str(folder.resolve()), bool(trust_remote_code)), None)
        if tokenizer is None:
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
    note = fallback
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
    return Loaded(hf, tokenizer, info, sites, bridge, None if compat else boot)
