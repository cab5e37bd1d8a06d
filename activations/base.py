"""The store base of both HDF5 stores (activations and renders): a folder of parts, each part written whole.

A store is a folder holding `meta.json` and parts `part-000000.h5`, `part-000001.h5`, ...: one part per
appended batch of rows, written to a temporary name, fsynced and renamed into place, so a part is
either absent or complete. Why parts rather than one growing file: HDF5 keeps metadata that a
truncated file loses, and h5py then refuses to open the file at all (tried: a renders file cut at 90%
of its length cannot be opened, and `h5clear --increment` does not bring its datasets back), so one
growing file turns one torn write or one bad block into the loss of every row. With parts, a part that
cannot be opened or fails a checksum is moved aside (`*.corrupt`) with a message naming it, and only
its rows are recomputed; the rest of the store is kept.

Each part holds one dataset per field (rows along axis 0) and `crc`, the CRC-32 of each row's bytes
over every field (fields listed in `checked`, in order); stores whose rows are large may add finer
checksums of their own (the activation store checks each row and site). Rows are identified by a key
(a string); a key written again in a later part (a recomputed stale row) supersedes the earlier one.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

META = "meta.json"
PART = "part-{:06d}.h5"


class StoreError(ValueError):
    """A store that cannot be used as asked (one sentence for the user)."""


def _h5() -> Any:
    import h5py

    return h5py


def row_crc(arrays: Sequence[np.ndarray], i: int) -> int:
    """CRC-32 over row i of each array (strings as UTF-8 bytes)."""
    c = 0
    for a in arrays:
        v = a[i]
        if isinstance(v, (bytes, str)):
            data = v if isinstance(v, bytes) else v.encode("utf-8")
        else:
            data = np.ascontiguousarray(v).tobytes()
        c = zlib.crc32(data, c)
    return c & 0xFFFFFFFF


def strings(values: Iterable[Any]) -> list[str]:
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in values]


class PartStore:
    """A folder of parts (see the module docstring). `fields` maps a field name to (row shape, dtype);
    dtype `str` stores UTF-8 strings. `meta` must match the folder's `meta.json` when it exists."""

    def __init__(self, folder: str | Path, fields: Mapping[str, tuple[tuple[int, ...], Any]], meta: Mapping[str, Any],
                 key_field: str = "key", checked: Sequence[str] | None = None, chunk_rows: int = 64,
                 say: Callable[[str], None] | None = None) -> None:
        self.folder = Path(folder)
        self.fields = dict(fields)
        self.key_field = key_field
        self.checked = list(checked) if checked is not None else list(self.fields)
        self.chunk_rows = chunk_rows
        # what happens to a store is never silent: a part moved aside is said, on stderr when no one listens
        self.say = say or (lambda m: print(m, file=sys.stderr, flush=True))
        self.meta = dict(meta)
        if self.folder.exists() and not self.folder.is_dir():
            raise StoreError(f"{self.folder} is a file, not a store folder (written by an older version?): "
                             "delete it and run the stage again")
        stored = self.folder / META
        if stored.exists():
            try:
                old = json.loads(stored.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise StoreError(f"{stored} is not valid JSON; the store was edited or corrupted") from None
            if old != json.loads(json.dumps(self.meta)):
                raise StoreError(f"{self.folder} was written with other settings (model, dtype, hooks, positions or "
                                 "medium); use another --out or delete it")

    def rebuild_meta(self) -> bool:
        """Write `meta.json` again from the metadata every part carries, when it is missing (deleted) and the
        parts agree with this store's settings (the writer's lock holder only); True when it was rebuilt."""
        stored = self.folder / META
        parts = self.part_files()
        if stored.exists() or not parts:
            return False
        want = json.dumps(self.meta, sort_keys=True)
        for p in parts:
            try:
                with self._open(p) as f:
                    got = f.attrs.get("meta")
            except StoreError:
                continue  # a bad part: `check` moves it aside
            if got is not None and got != want:
                raise StoreError(f"{self.folder} has no {META} and its parts were written with other settings (model, "
                                 f"dtype, hooks, positions or medium); delete the folder {self.folder} and run the stage again")
        tmp = stored.with_name(".meta.json.tmp")
        tmp.write_text(json.dumps(self.meta, sort_keys=True, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, stored)
        self.say(f"{stored} was missing: rebuilt from the metadata its {len(parts)} parts carry")
        return True

    # ------------------------------------------------------------------ reading

    def part_files(self) -> list[Path]:
        return sorted(self.folder.glob("part-*.h5")) if self.folder.is_dir() else []

    def _open(self, path: Path) -> Any:
        try:
            return _h5().File(path, "r")
        except OSError as e:
            raise StoreError(f"{path} is truncated or corrupt ({str(e)[:80]})") from None

    def check(self, repair: bool = False) -> list[Path]:
        """Verify every part (opens, complete fields, row checksums); returns the bad parts. With `repair`
        (the run's lock holder only), bad parts are moved aside so their rows are recomputed."""
        bad = []
        for p in self.part_files():
            try:
                with self._open(p) as f:
                    n = int(f.attrs["rows"])
                    arrays = [f[name][:] for name in self.checked]
                    if any(a.shape[0] != n for a in arrays) or f["crc"].shape[0] != n:
                        raise StoreError(f"{p} has fewer rows than it declares")
                    crc = f["crc"][:]
                    for i in range(n):
                        if row_crc(arrays, i) != int(crc[i]):
                            raise StoreError(f"{p} row {i} fails its checksum")
                    self._check_more(f, p)
            except (StoreError, KeyError, OSError, ValueError) as e:
                bad.append(p)
                if repair:
                    aside = p.with_name(p.name + ".corrupt")
                    os.replace(p, aside)
                    self.say(f"{e}: moved aside to {aside.name}; its rows will be recomputed")
        return bad

    def _check_more(self, f: Any, path: Path) -> None:
        """Finer checksums of a subclass (verified by `check`)."""

    def keys(self) -> list[str]:
        """Keys of every stored row, in part order (a key may appear again in a later part)."""
        out: list[str] = []
        for p in self.part_files():
            with self._open(p) as f:
                out += strings(f[self.key_field][:])
        return out

    def latest(self) -> dict[str, tuple[int, int]]:
        """key -> (part index, row) of the row that counts (the last written)."""
        out: dict[str, tuple[int, int]] = {}
        for pi, p in enumerate(self.part_files()):
            with self._open(p) as f:
                for i, k in enumerate(strings(f[self.key_field][:])):
                    out[k] = (pi, i)
        return out

    def read(self, names: Sequence[str], verify: bool = True) -> dict[str, np.ndarray]:
        """The latest row of every key, in first-written order of the keys: {field: array}. Every part read
        is verified against its row checksums unless `verify` is False."""
        parts = self.part_files()
        order: list[str] = []
        latest = self.latest()
        seen: set[str] = set()
        for k in self.keys():
            if k not in seen:
                seen.add(k)
                order.append(k)
        per_part: dict[int, dict[str, np.ndarray]] = {}
        want = list(dict.fromkeys(list(names) + (self.checked if verify else [])))
        for pi, p in enumerate(parts):
            with self._open(p) as f:
                data = {n: f[n][:] for n in want}
                if verify:
                    crc = f["crc"][:]
                    arrays = [data[n] for n in self.checked]
                    for i in range(int(f.attrs["rows"])):
                        if row_crc(arrays, i) != int(crc[i]):
                            raise StoreError(f"{p} row {i} fails its checksum; the store was edited or corrupted: "
                                             "rerun the stage that writes it (the bad part is then recomputed)")
                per_part[pi] = data
        out = {}
        for n in names:
            rows = [per_part[latest[k][0]][n][latest[k][1]] for k in order]
            shape, dtype = self.fields[n]
            if not rows:
                out[n] = np.zeros((0, *shape), dtype=object if dtype is str else dtype)
            elif dtype is str:
                out[n] = np.array(strings(rows), dtype=object)
            else:
                out[n] = np.stack(rows)
        return out

    # ------------------------------------------------------------------ writing

    def append(self, rows: Mapping[str, Any], extra: Callable[[Any, Mapping[str, np.ndarray]], None] | None = None) -> Path:
        """Write one part with these rows ({field: values}, all of one length); returns its path."""
        h5py = _h5()
        n = len(rows[self.key_field])
        if n == 0:
            raise StoreError("an empty batch")
        if set(rows) != set(self.fields):
            raise StoreError(f"a batch needs exactly the fields {sorted(self.fields)}")
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path = self.folder / META
        if not meta_path.exists():
            tmp = meta_path.with_name(".meta.json.tmp")
            tmp.write_text(json.dumps(self.meta, sort_keys=True, indent=1) + "\n", encoding="utf-8")
            os.replace(tmp, meta_path)
        for t in self.folder.glob(".part-*.tmp"):  # a part a kill interrupted: never renamed, never counted
            t.unlink()
        index = len(self.part_files()) + len(list(self.folder.glob("part-*.h5.corrupt")))
        path = self.folder / PART.format(index)
        while path.exists():
            index += 1
            path = self.folder / PART.format(index)
        tmp = self.folder / f".{path.name}.tmp"
        arrays: dict[str, np.ndarray] = {}
        with h5py.File(tmp, "w", track_order=False) as f:
            for name, (shape, dtype) in self.fields.items():
                values = rows[name]
                if dtype is str:
                    arr = np.array([str(v) for v in values], dtype=object)
                    f.create_dataset(name, data=arr, dtype=h5py.string_dtype("utf-8"), track_times=False)
                else:
                    arr = np.asarray(values, dtype=dtype).reshape((n, *shape))
                    chunks = (min(self.chunk_rows, n), *shape) if shape else None
                    f.create_dataset(name, data=arr, chunks=chunks, track_times=False)
                if len(arr) != n:
                    raise StoreError(f"field {name} has {len(arr)} rows, not {n}")
                arrays[name] = arr
            f.create_dataset("crc", data=np.array([row_crc([arrays[c] for c in self.checked], i) for i in range(n)],
                                                  dtype=np.uint32), track_times=False)
            if extra is not None:
                extra(f, arrays)
            f.attrs["rows"] = n
            f.attrs["meta"] = json.dumps(self.meta, sort_keys=True)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path
