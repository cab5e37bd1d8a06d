"""PNG output of canvas rasters, nearest-neighbour upscaled so cells stay crisp for people and judges."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from jaxtyping import UInt8
from PIL import Image


def scale_for(pixels: UInt8[np.ndarray, "n n 3"], side: int) -> int:
    """The integer upscale that brings an n x n raster to `side` pixels (at least 1): renders of media with
    different resolutions (24 and 48 cells) then reach a judge or a page at the same size."""
    return max(1, side // int(pixels.shape[0]))


def to_image(pixels: UInt8[np.ndarray, "n n 3"], scale: int = 16) -> Image.Image:
    if scale < 1:
        raise ValueError("scale must be >= 1")
    img = Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8), mode="RGB")
    n = pixels.shape[0]
    return img.resize((n * scale, n * scale), Image.NEAREST) if scale > 1 else img


def png_bytes(pixels: UInt8[np.ndarray, "n n 3"], scale: int = 16) -> bytes:
    buf = io.BytesIO()
    to_image(pixels, scale).save(buf, format="PNG", optimize=False)
    return buf.getvalue()


def save_png(pixels: UInt8[np.ndarray, "n n 3"], path: str | Path, scale: int = 16) -> Path:
    path = Path(path)
    path.write_bytes(png_bytes(pixels, scale))
    return path
