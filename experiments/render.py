"""The render stage: every attempt of a run through the sandbox, into RUN/renders.h5 (resumable).

`renders.h5`: `pixels` uint8 [n, 24, 24, 3] (zeros for invalid attempts), `key` (JSON of the attempt
key: model, task, protocol, medium, prompt id, sample), `outcome`, `reason`, `dominant_share`, `trivial` and
`background` (see `background_of`), appended in
chunks, with a `complete` attribute raised after each flushed chunk (a kill mid-chunk is trimmed on
resume, like the activation store).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bench.layout.scoring import TRIVIAL_SHARE, dominant_share
from experiments.generation import GENERATIONS, RunError, answer_text, read_rows
from experiments.rundir import AttemptKey

RENDERS = "renders.h5"
CHUNK = 256


def row_key(r: dict[str, Any]) -> str:
    """The attempt key as stored in renders.h5 (see `experiments.rundir.AttemptKey`)."""
    return AttemptKey.of(r).json


def render_stage(run: Path, workers: int | None = None, progress: Callable[[int], None] | None = None,
                 medium: str = "v1") -> Path:
    import h5py

    from bench.canvas.medium import get_medium
    from bench.sandbox.pool import SandboxPool

    med = get_medium(medium)
    n = med.resolution
    rows = read_rows(run / GENERATIONS)
    path = run / RENDERS
    str_t = h5py.string_dtype("utf-8")
    with h5py.File(path, "a") as f:
        if "pixels" not in f:
            f.create_dataset("pixels", shape=(0, n, n, 3), maxshape=(None, n, n, 3), dtype=np.uint8, chunks=(64, n, n, 3),
                             track_times=False)
            for name in ("key", "outcome", "reason"):
                f.create_dataset(name, shape=(0,), maxshape=(None,), dtype=str_t, chunks=(256,), track_times=False)
            f.create_dataset("dominant_share", shape=(0,), maxshape=(None,), dtype=np.float32, chunks=(256,), track_times=False)
            f.create_dataset("trivial", shape=(0,), maxshape=(None,), dtype=bool, chunks=(256,), track_times=False)
            f.create_dataset("background", shape=(0, 3), maxshape=(None, 3), dtype=np.uint8, chunks=(256, 3), track_times=False)
            f.attrs["complete"] = 0
            f.attrs["medium"] = medium
            f.attrs["trivial_share"] = TRIVIAL_SHARE
        done_n = int(f.attrs["complete"])
        if "background" not in f:
            raise RunError(f"{path} was written by an older version (no background colours): delete it and render again")
        names = ("pixels", "key", "outcome", "reason", "dominant_share", "trivial", "background")
        for name in names:
            if f[name].shape[0] != done_n:
                f[name].resize(done_n, axis=0)
        done = {k.decode() if isinstance(k, bytes) else k for k in f["key"][:]}
        todo = [r for r in rows if row_key(r) not in done]
        if progress and len(rows) - len(todo):
            progress(len(rows) - len(todo))
        with SandboxPool(workers=workers, medium=med) as pool:
            for i in range(0, len(todo), CHUNK):
                batch = todo[i: i + CHUNK]
                results = _render_batch(pool, batch, run, n)
                pix = np.zeros((len(batch), n, n, 3), dtype=np.uint8)
                share = np.zeros(len(batch), dtype=np.float32)
                bg = np.zeros((len(batch), 3), dtype=np.uint8)
                for j, res in enumerate(results):
                    if res.valid and res.pixels is not None:
                        pix[j] = res.pixels
                        share[j] = dominant_share(res.pixels)
                        bg[j] = background_of(res)
                start = int(f.attrs["complete"])
                for name in names:
                    f[name].resize(start + len(batch), axis=0)
                f["pixels"][start:] = pix
                f["key"][start:] = [row_key(r) for r in batch]
                f["outcome"][start:] = [res.outcome for res in results]
                f["reason"][start:] = [res.reason for res in results]
                f["dominant_share"][start:] = share
                f["background"][start:] = bg
                f["trivial"][start:] = [bool(res.valid and s >= TRIVIAL_SHARE) for res, s in zip(results, share)]
                f.flush()
                f.attrs["complete"] = start + len(batch)
                f.flush()
                if progress:
                    progress(len(batch))
    return path


def background_of(res: Any) -> np.ndarray:
    """The background colour of a render: for canvas code, the colour of the last full-canvas fill()
    (white when there is none: the medium's blank canvas); for SVG, the most frequent colour among the
    border cells (an explicit background rect covers them)."""
    if getattr(res, "background", None) is not None:
        return np.asarray(res.background, dtype=np.uint8)
    px = res.pixels
    border = np.concatenate([px[0], px[-1], px[1:-1, 0], px[1:-1, -1]])
    colors, counts = np.unique(border, axis=0, return_counts=True)
    return colors[int(np.argmax(counts))].astype(np.uint8)


def _render_batch(pool: Any, batch: list[dict[str, Any]], run: Path, n: int) -> list[Any]:
    """Every attempt goes through the sandbox pool: canvas programs as programs (pixels only, no
    geometry), SVG answers (medium `svg`) sanitised and drawn by resvg inside a worker at n x n
    (stored) and at native 512 (written to RUN/svg_native/<key hash>.png)."""
    from bench.sandbox.job import Job
    from bench.svg.medium import NATIVE

    jobs = [Job(answer_text(r), kind="svg", size=n, native=NATIVE) if r.get("medium") == "svg"
            else Job(answer_text(r), geometry=False) for r in batch]
    results = pool.run_jobs(jobs)
    for r, res in zip(batch, results):
        if res.valid and res.png is not None:
            native = run / "svg_native" / (hashlib.sha256(row_key(r).encode()).hexdigest()[:20] + ".png")
            native.parent.mkdir(parents=True, exist_ok=True)
            tmp = native.with_suffix(".tmp")
            tmp.write_bytes(res.png)  # resvg's own PNG, validated by the boundary's size checks
            tmp.replace(native)
    return results


def read_renders(run: Path) -> dict[str, dict[str, Any]]:
    """key -> {outcome, reason, trivial, dominant_share, pixels}."""
    import h5py

    out = {}
    with h5py.File(run / RENDERS, "r") as f:
        n = int(f.attrs["complete"])
        keys = [k.decode() if isinstance(k, bytes) else k for k in f["key"][:n]]
        outcome = [k.decode() if isinstance(k, bytes) else k for k in f["outcome"][:n]]
        reason = [k.decode() if isinstance(k, bytes) else k for k in f["reason"][:n]]
        trivial, share, pixels, bg = f["trivial"][:n], f["dominant_share"][:n], f["pixels"][:n], f["background"][:n]
    for i, k in enumerate(keys):
        out[k] = {"outcome": outcome[i], "reason": reason[i], "trivial": bool(trivial[i]), "dominant_share": float(share[i]),
                  "pixels": pixels[i], "background": bg[i]}
    return out


def validity(rows: Iterable[dict[str, Any]], renders: dict[str, dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Executed-and-rendered rate and outcome counts per (model, task, protocol), from `read_renders`."""
    table: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        outcome = renders[row_key(r)]["outcome"]
        t = table.setdefault((r["model"], r["task"], AttemptKey.of(r).arm), {"attempts": 0, "valid": 0, "outcomes": {}})
        t["attempts"] += 1
        t["valid"] += outcome == "ok"
        t["outcomes"][outcome] = t["outcomes"].get(outcome, 0) + 1
    for t in table.values():
        t["valid_rate"] = t["valid"] / t["attempts"]
    return table
