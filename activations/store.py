"""The activation store: per model, the residual stream `[prompt, site, position, d_model]` of a run.

A folder `activations/<model>/` of parts (see `activations.base`): per part, datasets
- `resid` float32 or float16 [rows, n_sites, n_positions, d_model], chunked one site at a time so that
  reading one layer touches only that layer's chunks;
- `key` (JSON of [task, prompt id]), `prompt_ids`, `tasks` (a prompt is identified by its task and id:
  probes and interventions are always per task), `token_positions` int32 [rows, n_positions] (the token
  index of each position), `input` (a hash of the prompt's tokens and the model: a prompt whose text
  changed is captured again and its new row supersedes the old one);
- `crc` per row over the small fields, and `site_crc` [rows, n_sites], the CRC-32 of each row's
  activations at each site, verified by every layer read: a flipped byte in a stored activation is
  reported with the file and the row, never used.
`meta.json`: the model (weights digest, dtype, compatibility mode), hook names, the final site, the
position names and definitions, the prompt protocol and medium, the store dtype.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from jaxtyping import Float, Int

from activations.base import PartStore, StoreError, strings

DTYPES = {"float32": np.float32, "float16": np.float16}
CHECKED = ["key", "prompt_ids", "tasks", "token_positions", "input"]

__all__ = ["ActivationStore", "ActivationWriter", "StoreError", "prompt_key", "repair_store"]


def prompt_key(task: str, prompt_id: str) -> str:
    return json.dumps([task, prompt_id])


def _site_crc(resid: np.ndarray) -> np.ndarray:
    out = np.empty(resid.shape[:2], dtype=np.uint32)
    for i in range(resid.shape[0]):
        for s in range(resid.shape[1]):
            out[i, s] = zlib.crc32(np.ascontiguousarray(resid[i, s]).tobytes()) & 0xFFFFFFFF
    return out


class _Parts(PartStore):
    def _check_more(self, f: Any, path: Path) -> None:
        crc = _site_crc(f["resid"][:])
        if not np.array_equal(crc, f["site_crc"][:]):
            raise StoreError(f"{path}: activations fail their checksum")


def _store(folder: Path, n_sites: int, n_positions: int, d_model: int, meta: Mapping[str, Any], dtype: str,
           say: Callable[[str], None] | None = None) -> _Parts:
    if dtype not in DTYPES:
        raise StoreError(f"dtype {dtype!r}: use float32 or float16")
    fields = {"key": ((), str), "prompt_ids": ((), str), "tasks": ((), str), "input": ((), str),
              "token_positions": ((n_positions,), np.int32), "resid": ((n_sites, n_positions, d_model), DTYPES[dtype])}
    full = dict(meta, store_dtype=dtype, shape=[n_sites, n_positions, d_model])
    return _Parts(folder, fields, full, checked=CHECKED, say=say)


class ActivationWriter:
    """Append batches of captured activations to `folder`; an existing store must have the same metadata."""

    def __init__(self, folder: str | Path, n_sites: int, n_positions: int, d_model: int, meta: Mapping[str, Any],
                 dtype: str = "float32", say: Callable[[str], None] | None = None) -> None:
        self.store = _store(Path(folder), n_sites, n_positions, d_model, meta, dtype, say)
        self.store.rebuild_meta()
        self.store.check(repair=True)
        self.shape = (n_sites, n_positions, d_model)

    @property
    def done(self) -> dict[tuple[str, str], str]:
        """(task, prompt id) -> input hash of every stored row (the latest one per prompt)."""
        if not self.store.part_files():
            return {}
        got = self.store.read(["key", "input"], verify=False)
        return {tuple(json.loads(k)): inp for k, inp in zip(got["key"], got["input"])}  # type: ignore[misc]

    def append(self, prompt_ids: Sequence[str], resid: Float[np.ndarray, "batch site pos d"],
               token_positions: Int[np.ndarray, "batch pos"], tasks: Sequence[str],
               inputs: Sequence[str] | None = None,
               embed_mean: Float[np.ndarray, "batch d"] | None = None) -> None:
        """`embed_mean`: per prompt, the model's input embeddings averaged over its request's tokens (a lexical
        baseline of the probe stage), stored in the same part with its own row checksums."""
        n = len(prompt_ids)
        if resid.shape[0] != n or token_positions.shape[0] != n or len(tasks) != n:
            raise StoreError("prompt ids, tasks, activations and positions disagree in length")
        if tuple(resid.shape[1:]) != self.shape:
            raise StoreError(f"activations of shape {resid.shape[1:]}, the store holds {self.shape}")
        dtype = self.store.fields["resid"][1]
        resid = np.asarray(resid, dtype=dtype)

        if embed_mean is not None:
            embed_mean = np.asarray(embed_mean, dtype=np.float32)
            if embed_mean.shape != (n, self.shape[2]):
                raise StoreError(f"embedding means of shape {embed_mean.shape}, expected {(n, self.shape[2])}")

        def site_crc(f: Any, arrays: Mapping[str, np.ndarray]) -> None:
            f.create_dataset("site_crc", data=_site_crc(arrays["resid"]), track_times=False)
            if embed_mean is not None:
                f.create_dataset("embed_mean", data=embed_mean, track_times=False)
                f.create_dataset("embed_crc", data=_site_crc(embed_mean[:, None]).ravel(), track_times=False)

        self.store.append({"key": [prompt_key(t, p) for t, p in zip(tasks, prompt_ids)], "prompt_ids": list(prompt_ids),
                           "tasks": list(tasks), "input": list(inputs or [""] * n),
                           "token_positions": np.asarray(token_positions, dtype=np.int32), "resid": resid}, site_crc)

    def close(self) -> None:
        pass

    def __enter__(self) -> "ActivationWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ActivationStore:
    """Read an activation store lazily: `layer(L)` loads one layer (verified), never the whole store.

    `order` ((task, prompt id) -> rank, e.g. the run's prompts.jsonl order) is the canonical order in which
    `rows_of` lists prompts; without it, prompts are listed by id. Never the order of the parts: a part
    recomputed after damage comes last, and an analysis that followed it would change its results."""

    def __init__(self, folder: str | Path, order: Mapping[tuple[str, str], int] | None = None) -> None:
        self.path = Path(folder)
        self._order = dict(order or {})
        if not (self.path / "meta.json").is_file():
            if self.path.with_suffix(".h5").is_file() or self.path.is_file():
                raise StoreError(f"{self.path} was written by an older version (one .h5 file): delete it and capture again")
            if any(self.path.glob("part-*.h5")):
                raise StoreError(f"{self.path} has its parts but no meta.json: rerun the capture (`ambench capture` or "
                                 "`ambench run` on the run), which rebuilds it from the parts")
            raise StoreError(f"no activation store at {self.path}")
        self.meta: dict[str, Any] = json.loads((self.path / "meta.json").read_text(encoding="utf-8"))
        n_sites, n_pos, d = self.meta["shape"]
        self._parts = _store(self.path, n_sites, n_pos, d, {k: v for k, v in self.meta.items() if k not in ("store_dtype", "shape")},
                             self.meta["store_dtype"])
        small = self._parts.read(["key", "prompt_ids", "tasks", "token_positions", "input"])
        self._index = self._parts.latest()
        self._keys = list(small["key"])
        self._small = small
        self._files = self._parts.part_files()
        self._dims = (n_sites, n_pos, d)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (len(self._keys), *self._dims)

    @property
    def prompt_ids(self) -> list[str]:
        return strings(self._small["prompt_ids"])

    @property
    def tasks(self) -> list[str]:
        return strings(self._small["tasks"])

    @property
    def inputs(self) -> list[str]:
        return strings(self._small["input"])

    @property
    def positions(self) -> list[str]:
        return list(self.meta["positions"])

    @property
    def token_positions(self) -> Int[np.ndarray, "prompt pos"]:
        return self._small["token_positions"]

    def rows_of(self, task: str) -> dict[str, int]:
        """prompt id -> row index, for the prompts of one task, in the canonical order (see the class docstring)."""
        rows = [(p, i) for i, (t, p) in enumerate(zip(self.tasks, self.prompt_ids)) if t == task]
        last = len(self._order)
        return dict(sorted(rows, key=lambda pi: (self._order.get((task, pi[0]), last), pi[0])))

    def layer(self, layer: int, position: int | str | None = None) -> Float[np.ndarray, "prompt ..."]:
        """float32 [n_prompts, n_positions, d_model] (or [n_prompts, d_model] for one position), every row
        checked against its stored checksum."""
        import h5py

        n_sites = self._dims[0]
        if not -n_sites <= layer < n_sites:
            raise StoreError(f"layer {layer} out of range (the store has {n_sites} sites)")
        layer %= n_sites
        p = None if position is None else (self.positions.index(position) if isinstance(position, str) else position)
        by_part: dict[int, list[tuple[int, int]]] = {}
        for out_i, k in enumerate(self._keys):
            pi, row = self._index[k]
            by_part.setdefault(pi, []).append((out_i, row))
        out = np.empty((len(self._keys), self._dims[1], self._dims[2]), dtype=np.float32)
        for pi, pairs in by_part.items():
            path = self._files[pi]
            try:
                with h5py.File(path, "r") as f:
                    block = f["resid"][:, layer]
                    crc = f["site_crc"][:, layer]
            except OSError as e:
                raise StoreError(f"{path} is truncated or corrupt ({str(e)[:80]}): rerun the capture") from None
            for out_i, row in pairs:
                if zlib.crc32(np.ascontiguousarray(block[row]).tobytes()) & 0xFFFFFFFF != int(crc[row]):
                    raise StoreError(f"{path} row {row}: activations at site {layer} fail their checksum; the store "
                                     "was edited or corrupted: rerun the capture (the bad part is recomputed)")
                out[out_i] = block[row]
        return out if p is None else out[:, p]

    def embed_mean(self, rows: Sequence[int]) -> Float[np.ndarray, "rows d"] | None:
        """The model's input embeddings averaged over each prompt's request (rows: indices as `rows_of` gives), each
        row checked against its checksum; None when any of these rows was captured without them (before issue 19)."""
        import h5py

        keys = [self._keys[i] for i in rows]
        out = np.empty((len(keys), self._dims[2]), dtype=np.float32)
        by_part: dict[int, list[tuple[int, int]]] = {}
        for out_i, k in enumerate(keys):
            pi, row = self._index[k]
            by_part.setdefault(pi, []).append((out_i, row))
        for pi, pairs in by_part.items():
            path = self._files[pi]
            try:
                with h5py.File(path, "r") as f:
                    if "embed_mean" not in f:
                        return None
                    block, crc = f["embed_mean"][:], f["embed_crc"][:]
            except OSError as e:
                raise StoreError(f"{path} is truncated or corrupt ({str(e)[:80]}): rerun the capture") from None
            for out_i, row in pairs:
                if zlib.crc32(np.ascontiguousarray(block[row]).tobytes()) & 0xFFFFFFFF != int(crc[row]):
                    raise StoreError(f"{path} row {row}: the embedding mean fails its checksum; the store was edited or "
                                     "corrupted: rerun the capture (the bad part is recomputed)")
                out[out_i] = block[row]
        return out

    def close(self) -> None:
        pass

    def __enter__(self) -> "ActivationStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def repair_store(folder: str | Path, say: Callable[[str], None] | None = None) -> list[Path]:
    """Move aside the parts of a store that fail to open or to verify (the run's lock holder only); returns them.
    Their prompts are captured again by the next capture."""
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    n_sites, n_pos, d = meta["shape"]
    parts = _store(folder, n_sites, n_pos, d, {k: v for k, v in meta.items() if k not in ("store_dtype", "shape")},
                   meta["store_dtype"], say)
    return parts.check(repair=True)


def merge_stores(sources: Sequence[str | Path], target: str | Path, order: Callable[[str, str], Any]) -> int:
    """Put the parts of several stores of one model (shards of a run) into `target`, ordered by `order(task,
    prompt id)` of each part's first prompt, so that the target holds the parts an unsharded run writes (each
    part is one capture batch; a shard holds whole batches). Parts are copied byte for byte; returns the
    number of prompts."""
    import shutil

    import h5py

    metas = []
    parts: list[tuple[Any, Path]] = []
    for src in sources:
        st = ActivationStore(src)
        metas.append(st.meta)
        for p in st._parts.part_files():
            with h5py.File(p, "r") as f:
                keys = [json.loads(k) for k in strings(f["key"][:])]
            parts.append((min(order(t, pid) for t, pid in keys), p))
    if any(m != metas[0] for m in metas):
        raise StoreError("the shards' activation stores were written with other settings")
    target = Path(target)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    (target / "meta.json").write_text(json.dumps(metas[0], sort_keys=True, indent=1) + "\n", encoding="utf-8")
    for i, (_, p) in enumerate(sorted(parts, key=lambda t: t[0])):
        shutil.copyfile(p, target / f"part-{i:06d}.h5")
    return len(ActivationStore(target).prompt_ids)
