"""DINO ViT embeddings of canvas renders, loaded from a local folder, with one ViT patch per canvas cell.

The paper's appendix E.2 embeds every valid, non-trivial layout render with DINO ViT-S/8, resized so
that each DINO patch is exactly one cell of the 24x24 canvas (24x24 -> 192x192 for patch 8). Here:

- **Weights from a local folder only** (`load_dino(folder)`): `transformers`' `AutoModel` and
  `AutoImageProcessor` with `local_files_only=True`, never the hub. Supported checkpoints are the
  vision transformers DINO ships as: `dinov2`, `dinov2_with_registers`, `dinov3_vit` and `vit` (the
  original DINO ViT-S/8, B/16 ... are `ViTModel` checkpoints). A folder that is missing, holds no
  config, holds another kind of model, or whose weights are absent, broken or do not match the config
  raises `DinoError` with one sentence.
- **Preprocessing** (`model_input`): each n x n render is upscaled by nearest-neighbour repetition by
  the model's patch size p (so each cell becomes one p x p block of one colour, and the patch grid is
  the canvas grid: cell (r, c) is patch r*n + c in row-major order), scaled to [0, 1] and normalised
  with the processor's `image_mean`/`image_std` (ImageNet's, DINO's training statistics, when the
  folder has no processor config; recorded as `normalisation`). No resize, crop or interpolation that
  would mix two cells into one patch: bilinear upscaling would bleed a cell's colour into its
  neighbours' patches.
- **Embeddings** (`Dino.embed`): the CLS token of the last hidden state (the global embedding of
  E.2) and the **keys of the last attention layer** at the patch tokens, all heads concatenated (the
  local-structure features of E.3; keys rather than outputs, as DINO's patch-correspondence work uses
  them, because they are the least mixed across positions of the last layer's features). Register
  tokens, when the model has them, sit between CLS and the patches and are dropped.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from jaxtyping import Float, UInt8

if TYPE_CHECKING:
    import torch

#: model types of the DINO family whose checkpoints `transformers` loads as plain ViT backbones
SUPPORTED = ("dinov2", "dinov2_with_registers", "dinov3_vit", "vit")
#: DINO (v1, v2, v3) were trained on ImageNet-normalised inputs; used only when a folder has no processor config
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class DinoError(ValueError):
    """A DINO folder that cannot be used, in one sentence that says what to do."""


@dataclass(frozen=True)
class DinoInfo:
    """What was loaded: recorded with every result computed from it."""

    folder: str  #: the local folder the weights came from
    model_type: str  #: the `transformers` model type (one of SUPPORTED)
    patch_size: int  #: pixels per patch side: the upscaling factor of a render
    hidden_size: int  #: width of the CLS embedding
    key_size: int  #: width of a patch key (all heads concatenated)
    layers: int  #: transformer blocks; the keys are the last one's
    mean: tuple[float, float, float]  #: per-channel normalisation mean (inputs in [0, 1])
    std: tuple[float, float, float]  #: per-channel normalisation std
    normalisation: str  #: "processor" (from the folder's processor config) or "imagenet-default"
    digest: str  #: sha256 over config.json and each weights file's size and first MiB

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def model_input(pixels: UInt8[np.ndarray, "batch n n 3"], patch: int, mean: Sequence[float],
                std: Sequence[float]) -> Float["torch.Tensor", "batch 3 side side"]:
    """Renders as DINO input: nearest-neighbour upscaling by `patch` (cell (r, c) -> the p x p block at
    (r*p, c*p), exactly one patch), scaled to [0, 1], normalised per channel; side = n * patch."""
    import torch

    px = np.asarray(pixels)
    if px.ndim != 4 or px.shape[-1] != 3 or px.shape[1] != px.shape[2]:
        raise ValueError(f"renders must be [batch, n, n, 3], got {list(px.shape)}")
    big = px.repeat(patch, axis=1).repeat(patch, axis=2)
    x = torch.from_numpy(np.ascontiguousarray(big)).permute(0, 3, 1, 2).float() / 255.0
    m = torch.tensor(list(mean), dtype=torch.float32).view(1, 3, 1, 1)
    s = torch.tensor(list(std), dtype=torch.float32).view(1, 3, 1, 1)
    return (x - m) / s


class Dino:
    """A loaded DINO backbone that embeds renders: CLS embeddings and last-layer patch keys."""

    def __init__(self, model: Any, info: DinoInfo, key_module: Any, device: str = "cpu") -> None:
        self.model = model
        self.info = info
        self.device = device
        self._key_module = key_module
        # ViTModel keeps absolute position embeddings for its training size and needs asking to
        # interpolate them; Dinov2/DINOv3 always interpolate (or use RoPE) and take no such argument
        self._interpolate = "interpolate_pos_encoding" in inspect.signature(model.forward).parameters

    def embed(self, pixels: UInt8[np.ndarray, "batch n n 3"], batch_size: int = 32
              ) -> tuple[Float[np.ndarray, "batch d"], Float[np.ndarray, "batch cells dk"]]:
        """(CLS embeddings, last-layer keys at the n*n patch tokens in row-major cell order), float32."""
        import torch

        px = np.asarray(pixels)
        if px.ndim != 4:
            raise ValueError(f"renders must be [batch, n, n, 3], got {list(px.shape)}")
        n = px.shape[1]
        cells = n * n
        cls_out: list[np.ndarray] = []
        key_out: list[np.ndarray] = []
        captured: list[torch.Tensor] = []
        handle = self._key_module.register_forward_hook(lambda _m, _i, out: captured.append(out))
        try:
            with torch.inference_mode():
                for i in range(0, len(px), max(1, batch_size)):
                    x = model_input(px[i: i + batch_size], self.info.patch_size, self.info.mean, self.info.std)
                    kw = {"interpolate_pos_encoding": True} if self._interpolate else {}
                    captured.clear()
                    hidden = self.model(pixel_values=x.to(self.device), **kw).last_hidden_state
                    if hidden.shape[1] < cells + 1 or not captured or captured[-1].shape[1] != hidden.shape[1]:
                        raise DinoError(f"the DINO model in {self.info.folder} returned {hidden.shape[1]} tokens for "
                                        f"{cells} patches; it is not a ViT whose patches are its last tokens")
                    cls_out.append(hidden[:, 0].float().cpu().numpy())
                    # the last `cells` tokens are the patches (CLS and any registers come first)
                    key_out.append(captured[-1][:, -cells:].float().cpu().numpy())
        finally:
            handle.remove()
        d, dk = self.info.hidden_size, self.info.key_size
        if not cls_out:
            return np.zeros((0, d), np.float32), np.zeros((0, cells, dk), np.float32)
        return np.concatenate(cls_out), np.concatenate(key_out)


def _digest(folder: Path) -> str:
    from interp.models import file_digest

    h = hashlib.sha256((folder / "config.json").read_bytes())
    for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        h.update(f.name.encode())
        h.update(file_digest(f).encode())
    return h.hexdigest()[:16]


def _reason(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return text[:200].rstrip(".")


def _key_projection(model: Any) -> Any:
    """The last attention block's key projection (`k_proj` in transformers 5, `key` in older layouts)."""
    found = [m for name, m in model.named_modules() if name.endswith("k_proj") or name.endswith("attention.key")]
    return found[-1] if found else None


def load_dino(folder: str | Path, device: str = "cpu") -> Dino:
    """A DINO ViT from a local folder (config.json + weights, optionally preprocessor_config.json), in eval mode."""
    p = Path(folder).expanduser()
    hint = "give --dino-folder a local folder holding a DINO checkpoint (config.json and its weights)"
    if not p.exists():
        raise DinoError(f"the DINO folder {p} does not exist; {hint}")
    if not p.is_dir():
        raise DinoError(f"{p} is a file, not a folder; {hint}")
    if not (p / "config.json").is_file():
        raise DinoError(f"{p} has no config.json, so it is not a Hugging Face model folder; {hint}")
    try:
        raw = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise DinoError(f"{p / 'config.json'} is not valid JSON; {hint}") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if model_type not in SUPPORTED:
        raise DinoError(f"{p} holds a {model_type or 'untyped'} model, not a DINO vision transformer "
                        f"(supported model types: {', '.join(SUPPORTED)}); {hint}")

    import torch
    from transformers import AutoConfig, AutoImageProcessor, AutoModel
    from transformers.utils import logging as hf_logging

    try:
        config = AutoConfig.from_pretrained(p, local_files_only=True)
    except Exception as e:  # the boundary: any failure of a user's folder is one sentence
        raise DinoError(f"{p / 'config.json'} is not a usable {model_type} config ({_reason(e)}); {hint}") from None
    patch = config.patch_size
    patch = int(patch[0] if isinstance(patch, (list, tuple)) else patch)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the processor's "torchvision is missing" notice is not ours to show
    hf_logging.disable_progress_bar()
    try:
        try:
            model, loading = AutoModel.from_pretrained(p, config=config, local_files_only=True, output_loading_info=True)
        except Exception as e:
            if "mismatched" in str(e):  # transformers refers to a report it logged, which we keep quiet
                raise DinoError(f"the weights in {p} do not match its config (tensors of another shape); {hint}") from None
            raise DinoError(f"cannot load the DINO weights in {p} ({_reason(e)}); {hint}") from None
        # a checkpoint that loads but leaves weights at their random initialisation is worse than none:
        # the ViT pooler is not part of DINO checkpoints, everything else must be there
        missing = sorted(k for k in loading.get("missing_keys", ()) if not k.startswith("pooler."))
        bad = missing + sorted(str(k) for k in loading.get("mismatched_keys", ()))
        if bad:
            raise DinoError(f"the weights in {p} do not match its config ({len(bad)} tensors missing or of another "
                            f"shape, e.g. {bad[0]}); {hint}")
        if (p / "preprocessor_config.json").is_file():
            try:
                proc = AutoImageProcessor.from_pretrained(p, local_files_only=True)
                mean, std = tuple(float(v) for v in proc.image_mean), tuple(float(v) for v in proc.image_std)
            except Exception as e:
                raise DinoError(f"{p / 'preprocessor_config.json'} is not a usable image processor ({_reason(e)}); "
                                f"{hint}") from None
            if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
                raise DinoError(f"{p / 'preprocessor_config.json'} needs three image_mean and three positive image_std "
                                f"values; {hint}")
            norm = "processor"
        else:
            mean, std, norm = IMAGENET_MEAN, IMAGENET_STD, "imagenet-default"
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    key = _key_projection(model)
    if key is None:
        raise DinoError(f"the {model_type} model in {p} has no attention key projection to read patch keys from; {hint}")
    model.eval().to(device=device, dtype=torch.float32)
    info = DinoInfo(folder=str(p), model_type=str(model_type), patch_size=patch, hidden_size=int(config.hidden_size),
                    key_size=int(key.out_features), layers=int(config.num_hidden_layers), mean=mean, std=std,  # type: ignore[arg-type]
                    normalisation=norm, digest=_digest(p))
    return Dino(model, info, key, device)
