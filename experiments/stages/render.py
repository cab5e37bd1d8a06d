"""The render stage: every attempt of a run through the sandbox, into `RUN/renders/` (resumable).

The store (`activations.renders.RenderStore`) keeps per attempt its key, outcome, reason, pixels,
dominant share, triviality and background colour, in parts written whole with row checksums. A row
carries `input`, a hash of the answer text and the medium: an attempt whose text changed under the
same key is rendered again (its new row supersedes the old). A read-only caller (`read_renders`)
never writes; the render stage needs the run's lock.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bench.layout.scoring import TRIVIAL_SHARE, dominant_share
from experiments.rundir import AttemptKey, RunDir, answer_text, content_hash, reading, writing

CHUNK = 256


def row_key(r: dict[str, Any]) -> str:
    """The attempt key as stored in the render store (see `experiments.rundir.AttemptKey`)."""
    return AttemptKey.of(r).json


def _store(rd: RunDir, medium: str, say: Callable[[str], None] | None = None) -> Any:
    from activations.renders import RenderStore
    from bench.canvas.medium import get_medium

    med = get_medium(medium)
    return RenderStore(rd.file(RunDir.RENDERS), med.resolution, {"medium": medium, "trivial_share": TRIVIAL_SHARE}, say)


def render_input(r: dict[str, Any]) -> str:
    return content_hash(answer_text(r), AttemptKey.of(r).medium)


def render_stage(run: Any, workers: int | None = None, progress: Callable[[int], None] | None = None,
                 medium: str = "v1", say: Callable[[str], None] | None = None) -> Path:
    """Render every attempt of generations.jsonl that has no current render; returns the store's folder."""
    from bench.canvas.medium import get_medium
    from bench.sandbox.pool import SandboxPool

    med = get_medium(medium)
    n = med.resolution
    with writing(run) as rd:
        rows = rd.rows(RunDir.GENERATIONS)
        store = _store(rd, medium, say)
        store.repair()
        done = store.done()
        todo = [r for r in rows if done.get(row_key(r)) != render_input(r)]
        if progress and len(rows) - len(todo):
            progress(len(rows) - len(todo))
        if todo:
            with SandboxPool(workers=workers, medium=med) as pool:
                for i in range(0, len(todo), CHUNK):
                    batch = todo[i: i + CHUNK]
                    results = _render_batch(pool, batch, rd.path, n)
                    pix = np.zeros((len(batch), n, n, 3), dtype=np.uint8)
                    share = np.zeros(len(batch), dtype=np.float32)
                    bg = np.zeros((len(batch), 3), dtype=np.uint8)
                    for j, res in enumerate(results):
                        if res.valid and res.pixels is not None:
                            pix[j] = res.pixels
                            share[j] = dominant_share(res.pixels)
                            bg[j] = background_of(res)
                    store.append({"key": [row_key(r) for r in batch], "input": [render_input(r) for r in batch],
                                  "outcome": [res.outcome for res in results], "reason": [res.reason for res in results],
                                  "pixels": pix, "dominant_share": share, "background": bg,
                                  "trivial": [bool(res.valid and sh >= TRIVIAL_SHARE) for res, sh in zip(results, share)]})
                    if progress:
                        progress(len(batch))
        return rd.file(RunDir.RENDERS)


def renders_complete(run: Any, medium: str = "v1") -> bool:
    """Every attempt of generations.jsonl has a current render (read-only)."""
    rd = reading(run)
    done = _store(rd, medium).done()
    return all(done.get(row_key(r)) == render_input(r) for r in rd.rows(RunDir.GENERATIONS))


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
            native = run / RunDir.SVG_NATIVE / (hashlib.sha256(row_key(r).encode()).hexdigest()[:20] + ".png")
            native.parent.mkdir(parents=True, exist_ok=True)
            tmp = native.with_suffix(".tmp")
            tmp.write_bytes(res.png)  # resvg's own PNG, validated by the boundary's size checks
            tmp.replace(native)
    return results


def read_renders(run: Any, medium: str = "v1") -> dict[str, dict[str, Any]]:
    """key -> {outcome, reason, trivial, dominant_share, pixels, background} (read-only, checksums verified)."""
    return _store(reading(run), medium).read()


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
