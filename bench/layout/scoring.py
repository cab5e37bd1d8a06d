"""Scoring a layout attempt without a judge: validity and triviality.

- **valid**: the program executed in the sandbox and rendered (outcome `ok`).
- **trivial**: a valid render that is near-uniform: its most frequent colour covers at least
  `TRIVIAL_SHARE` (95%) of the cells, i.e. fewer than 29 of the 576 cells of a 24x24 canvas differ
  from it. A plain `fill(...)`, or a fill plus a dot or a short line, is trivial; any shape of about
  a 5x6 rectangle or larger is not. The threshold is fixed here, before looking at model output, and
  reported with every table.
"""

from __future__ import annotations

import numpy as np

TRIVIAL_SHARE = 0.95


def dominant_share(pixels: np.ndarray) -> float:
    """Share of cells painted in the most frequent colour of an (H, W, 3) uint8 raster."""
    flat = pixels.reshape(-1, pixels.shape[-1])
    _, counts = np.unique(flat, axis=0, return_counts=True)
    return float(counts.max() / flat.shape[0])


def is_trivial(pixels: np.ndarray, share: float = TRIVIAL_SHARE) -> bool:
    return dominant_share(pixels) >= share
