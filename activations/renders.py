"""The render store: every attempt of a run as rendered by the sandbox, `RUN/renders/` (a folder of parts).

Per row (see `activations.base` for parts, checksums and recovery): `key` (JSON of the attempt key:
model, task, protocol, medium, prompt id, sample), `input` (a hash of the answer text and the medium:
an attempt whose text changed is rendered again, its new row superseding the old one), `outcome`,
`reason`, `pixels` uint8 [n, n, 3] (zeros for invalid attempts), `dominant_share`, `trivial` and
`background` (see `experiments.stages.render.background_of`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from activations.base import PartStore, StoreError, strings

FIELDS_ORDER = ("key", "input", "outcome", "reason", "pixels", "dominant_share", "trivial", "background")

__all__ = ["RenderStore", "StoreError"]


class RenderStore:
    """Append and read rendered attempts; `meta` (medium, resolution, trivial threshold) must match."""

    def __init__(self, folder: str | Path, resolution: int, meta: Mapping[str, Any],
                 say: Callable[[str], None] | None = None) -> None:
        n = resolution
        fields = {"key": ((), str), "input": ((), str), "outcome": ((), str), "reason": ((), str),
                  "pixels": ((n, n, 3), np.uint8), "dominant_share": ((), np.float32), "trivial": ((), np.bool_),
                  "background": ((3,), np.uint8)}
        self.parts = PartStore(folder, fields, dict(meta, resolution=n), chunk_rows=256, say=say)

    @staticmethod
    def medium_of(folder: str | Path) -> str | None:
        """The medium a store folder was written for (None when it has no metadata yet)."""
        import json

        meta = Path(folder) / "meta.json"
        if not meta.is_file():
            return None
        try:
            medium = json.loads(meta.read_text(encoding="utf-8")).get("medium")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            raise StoreError(f"{meta} is not valid JSON; the store was edited or corrupted") from None
        if not isinstance(medium, str):
            raise StoreError(f"{meta} names no medium; the store was edited or corrupted")
        return medium

    def repair(self) -> list[Path]:
        """Rebuild a deleted meta.json from the parts, move aside parts that fail to open or to verify (the lock
        holder only; their rows are recomputed)."""
        self.parts.rebuild_meta()
        return self.parts.check(repair=True)

    def done(self) -> dict[str, str]:
        """key -> input hash of every stored row (the latest one per key)."""
        if not self.parts.part_files():
            return {}
        got = self.parts.read(["key", "input"], verify=False)
        return dict(zip(strings(got["key"]), strings(got["input"])))

    def append(self, rows: Mapping[str, Sequence[Any]]) -> Path:
        return self.parts.append(rows)

    def read(self) -> dict[str, dict[str, Any]]:
        """key -> {outcome, reason, trivial, dominant_share, pixels, background, input}, every part verified."""
        if not self.parts.part_files():
            return {}
        got = self.parts.read(list(FIELDS_ORDER))
        out = {}
        for i, k in enumerate(strings(got["key"])):
            out[k] = {"outcome": str(got["outcome"][i]), "reason": str(got["reason"][i]), "trivial": bool(got["trivial"][i]),
                      "dominant_share": float(got["dominant_share"][i]), "pixels": got["pixels"][i],
                      "background": got["background"][i], "input": str(got["input"][i])}
        return out
