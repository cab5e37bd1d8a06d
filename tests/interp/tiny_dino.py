"""Tiny random DINO-family ViTs built in code and saved as local folders (seconds, no hub)."""

from __future__ import annotations

from pathlib import Path


def build_tiny_dino(folder: Path, kind: str = "dinov2", layers: int = 1, patch: int = 2, hidden: int = 32,
                    seed: int = 0, processor: bool = True) -> Path:
    """A random `Dinov2Model` (or `ViTModel` for kind="vit", `Dinov2WithRegistersModel` for
    kind="dinov2_with_registers") with `layers` blocks. With one block the last layer's keys are a
    per-token function of the patch embeddings, so a one-cell change moves exactly one patch key."""
    import torch
    from transformers import (BitImageProcessor, Dinov2Config, Dinov2Model, Dinov2WithRegistersConfig,
                              Dinov2WithRegistersModel, ViTConfig, ViTImageProcessor, ViTModel)

    folder.mkdir(parents=True, exist_ok=True)
    common = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=2 * hidden,
                  patch_size=patch, image_size=16 * patch)
    torch.manual_seed(seed)
    if kind == "dinov2":
        model = Dinov2Model(Dinov2Config(**common))
    elif kind == "dinov2_with_registers":
        model = Dinov2WithRegistersModel(Dinov2WithRegistersConfig(num_register_tokens=4, **common))
    elif kind == "vit":
        model = ViTModel(ViTConfig(**common), add_pooling_layer=False)
    else:
        raise ValueError(kind)
    model.save_pretrained(folder)
    if processor:
        proc_cls = ViTImageProcessor if kind == "vit" else BitImageProcessor
        proc_cls(image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]).save_pretrained(folder)
    return folder
