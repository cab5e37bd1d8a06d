"""The on-disk activation store: one HDF5 file per model, `[prompt, layer, position, d_model]`.

Layout of `activations/<model>.h5`:
- dataset `resid`: float32 or float16, shape [n_prompts, n_sites, n_positions, d_model], chunked as
  (up to 64 prompts, 1 site, all positions, d_model), so reading one layer touches only that layer's
  chunks; grown in whole batches;
- datasets `prompt_ids` and `tasks`: UTF-8 strings, one per row of `resid` (a prompt is identified by
  its task and id: probes and interventions are always per task);
- dataset `token_positions`: int32 [n_prompts, n_positions], the token index of each position;
- attributes: `meta` (JSON: model, weights digest, dtype, compatibility mode, hook names, position
  names and definitions, prompt protocol) and `complete` (rows fully written).

Resumable: a writer re-opened on an existing file checks that its metadata matches, trims rows past
`complete` (a batch a kill interrupted) and reports which prompt ids are done. `complete` is raised
only after a batch's data are written and flushed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

CHUNK_PROMPTS = 64
DTYPES = {"float32": np.float32, "float16": np.float16}


class StoreError(ValueError):
    """An activation file that does not match what is asked of it."""


def _h5() -> Any:
    import h5py

    return h5py


def _strings(values: Any) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else v for v in values]


class ActivationWriter:
    """Append batches of captured activations; resumes an existing file with the same metadata."""

    def __init__(self, path: str | Path, n_sites: int, n_positions: int, d_model: int, meta: Mapping[str, Any],
                 dtype: str = "float32") -> None:
        if dtype not in DTYPES:
            raise StoreError(f"dtype {dtype!r}: use float32 or float16")
        h5py = _h5()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        meta_json = json.dumps(dict(meta, store_dtype=dtype), sort_keys=True)
        shape = (n_sites, n_positions, d_model)
        if self.path.exists():
            self.f = h5py.File(self.path, "a")
            old = self.f.attrs.get("meta")
            if old != meta_json or tuple(self.f["resid"].shape[1:]) != shape:
                self.f.close()
                raise StoreError(f"{self.path} was written with other settings (model, dtype, hooks or positions); "
                                 "use another --out or delete the file")
            if "tasks" not in self.f:
                self.f.close()
                raise StoreError(f"{self.path} was written by an older version (no task per prompt): delete it and capture again")
            done = int(self.f.attrs["complete"])
            for name in ("resid", "prompt_ids", "tasks", "token_positions"):
                if self.f[name].shape[0] != done:
                    self.f[name].resize(done, axis=0)
        else:
            self.f = h5py.File(self.path, "w")
            self.f.create_dataset("resid", shape=(0, *shape), maxshape=(None, *shape), dtype=DTYPES[dtype],
                                  chunks=(CHUNK_PROMPTS, 1, n_positions, d_model), track_times=False)
            for name in ("prompt_ids", "tasks"):
                self.f.create_dataset(name, shape=(0,), maxshape=(None,), dtype=h5py.string_dtype("utf-8"),
                                      chunks=(256,), track_times=False)
            self.f.create_dataset("token_positions", shape=(0, n_positions), maxshape=(None, n_positions),
                                  dtype=np.int32, chunks=(256, n_positions), track_times=False)
            self.f.attrs["meta"] = meta_json
            self.f.attrs["complete"] = 0
            self.f.flush()

    @property
    def done(self) -> set[tuple[str, str]]:
        """(task, prompt id) of every complete row."""
        return set(zip(_strings(self.f["tasks"][:]), _strings(self.f["prompt_ids"][:])))

    def append(self, prompt_ids: Sequence[str], resid: np.ndarray, token_positions: np.ndarray,
               tasks: Sequence[str]) -> None:
        n = len(prompt_ids)
        if resid.shape[0] != n or token_positions.shape[0] != n or len(tasks) != n:
            raise StoreError("prompt ids, tasks, activations and positions disagree in length")
        start = int(self.f.attrs["complete"])
        for name in ("resid", "prompt_ids", "tasks", "token_positions"):
            self.f[name].resize(start + n, axis=0)
        self.f["resid"][start:] = resid.astype(self.f["resid"].dtype, copy=False)
        self.f["prompt_ids"][start:] = list(prompt_ids)
        self.f["tasks"][start:] = list(tasks)
        self.f["token_positions"][start:] = token_positions.astype(np.int32)
        self.f.flush()
        self.f.attrs["complete"] = start + n
        self.f.flush()

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> "ActivationWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ActivationStore:
    """Read an activation file lazily: `layer(L)` loads one layer, never the whole file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise StoreError(f"no activation file at {self.path}")
        self.f = _h5().File(self.path, "r")
        self.n = int(self.f.attrs["complete"])
        self.meta: dict[str, Any] = json.loads(self.f.attrs["meta"])

    @property
    def shape(self) -> tuple[int, int, int, int]:
        _, s, p, d = self.f["resid"].shape
        return (self.n, s, p, d)

    @property
    def prompt_ids(self) -> list[str]:
        return _strings(self.f["prompt_ids"][: self.n])

    @property
    def tasks(self) -> list[str]:
        return _strings(self.f["tasks"][: self.n]) if "tasks" in self.f else ["?"] * self.n

    def rows_of(self, task: str) -> dict[str, int]:
        """prompt id -> row index, for the prompts of one task."""
        return {p: i for i, (t, p) in enumerate(zip(self.tasks, self.prompt_ids)) if t == task}

    @property
    def positions(self) -> list[str]:
        return list(self.meta["positions"])

    @property
    def token_positions(self) -> np.ndarray:
        return self.f["token_positions"][: self.n]

    def layer(self, layer: int, position: int | str | None = None) -> np.ndarray:
        """float32 [n_prompts, n_positions, d_model] (or [n_prompts, d_model] for one position)."""
        n_sites = self.f["resid"].shape[1]
        if not -n_sites <= layer < n_sites:
            raise StoreError(f"layer {layer} out of range (the file has {n_sites} sites)")
        if position is None:
            return self.f["resid"][: self.n, layer].astype(np.float32)
        p = self.positions.index(position) if isinstance(position, str) else position
        return self.f["resid"][: self.n, layer, p].astype(np.float32)

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> "ActivationStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
