"""The render stage: every attempt of a run through the sandbox, into `RUN/renders/` (resumable).

The store (`activations.renders.RenderStore`) keeps per attempt its key, outcome, reason, pixels,
dominant share, triviality and background colour, in parts written whole with row checksums. A row
carries `input`, a hash of the answer text and the medium: an attempt whose text changed under the
same key is rendered again (its new row supersedes the old). A read-only caller (`read_renders`)
never writes; the render stage needs the run's lock.

Each attempt is rendered in its own medium (the `medium` of its key), by a sandbox pool of that medium,
into that medium's store at its own resolution: the paper's canvas (`v1`) and the SVG arm (rendered at
24x24 from the vector source) in `RUN/renders/`, another canvas medium in `RUN/renders-<medium>/`
(`v1-48` at 48x48, `outline` at 24x24). `read_renders` returns every store's rows by attempt key, so
pixels of different media have different shapes: a consumer that stacks pixels groups by medium first
(the probes and interventions use only the paper's canvas, the layout tables group by arm).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bench.layout.scoring import TRIVIAL_SHARE, dominant_share
from experiments.rundir import DEFAULT_MEDIUM, AttemptKey, RunDir, RunError, answer_text, content_hash, reading, writing

CHUNK = 256


def row_key(r: dict[str, Any]) -> str:
    """The attempt key as stored in the render store (see `experiments.rundir.AttemptKey`)."""
    return AttemptKey.of(r).json


def store_medium(medium: str) -> str:
    """The render store an attempt of `medium` goes to: SVG attempts are rendered at the paper canvas's
    resolution into its store (Exp. 2's resolution-matched comparison); every canvas medium has its own."""
    return DEFAULT_MEDIUM if medium == "svg" else medium


def render_store(rd: RunDir, medium: str, say: Callable[[str], None] | None = None) -> Any:
    """The render store of one medium (its folder, resolution and metadata), for reading or, under the lock, writing."""
    from activations.renders import RenderStore
    from bench.canvas.medium import get_medium

    try:
        med = get_medium(medium)
    except ValueError as e:
        raise RunError(f"{rd.path}: an attempt has {e}") from None
    return RenderStore(rd.renders(medium), med.resolution, {"medium": medium, "trivial_share": TRIVIAL_SHARE}, say)


def render_input(r: dict[str, Any]) -> str:
    return content_hash(answer_text(r), AttemptKey.of(r).medium)


def render_stage(run: Any, workers: int | None = None, progress: Callable[[int], None] | None = None,
                 medium: str | None = None, say: Callable[[str], None] | None = None) -> Path:
    """Render every attempt of generations.jsonl that has no current render, each in its own medium (only
    the attempts of `medium` when it is given); returns the paper medium's store folder."""
    with writing(run) as rd:
        rows = rd.rows(RunDir.GENERATIONS)
        by_store: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            m = AttemptKey.of(r).medium
            if medium is None or m == medium:
                by_store.setdefault(store_medium(m), []).append(r)
        for sm in sorted(by_store, key=lambda m: (m != DEFAULT_MEDIUM, m)):
            _render_medium(rd, sm, by_store[sm], workers, progress, say)
        return rd.renders()


def _render_medium(rd: RunDir, medium: str, rows: list[dict[str, Any]], workers: int | None,
                   progress: Callable[[int], None] | None, say: Callable[[str], None] | None) -> None:
    from bench.canvas.medium import get_medium
    from bench.sandbox.pool import SandboxPool

    store = render_store(rd, medium, say)
    med = get_medium(medium)
    n = med.resolution
    store.repair()
    done = store.done()
    todo = [r for r in rows if done.get(row_key(r)) != render_input(r)]
    if progress and len(rows) - len(todo):
        progress(len(rows) - len(todo))
    if not todo:
        return
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


def _stores(rd: RunDir, medium: str | None) -> list[Any]:
    """The render stores to read: one medium's, or every store present."""
    from activations.renders import RenderStore

    if medium is not None:
        return [render_store(rd, store_medium(medium))]
    out = []
    for folder in rd.render_stores():
        m = RenderStore.medium_of(folder)
        if m is not None:
            out.append(render_store(rd, m))
    return out


def renders_complete(run: Any, medium: str | None = None) -> bool:
    """Every attempt of generations.jsonl (of `medium`, when given) has a current render (read-only)."""
    rd = reading(run)
    rows = [r for r in rd.rows(RunDir.GENERATIONS) if medium is None or AttemptKey.of(r).medium == medium]
    done: dict[str, dict[str, str]] = {}
    for r in rows:
        sm = store_medium(AttemptKey.of(r).medium)
        if sm not in done:
            done[sm] = render_store(rd, sm).done() if rd.renders(sm).is_dir() else {}
        if done[sm].get(row_key(r)) != render_input(r):
            return False
    return True


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


def read_renders(run: Any, medium: str | None = None) -> dict[str, dict[str, Any]]:
    """key -> {outcome, reason, trivial, dominant_share, pixels, background} over every render store (or
    the store of `medium`), read-only, checksums verified. Pixels are [n, n, 3] at the attempt's medium's
    resolution (see the module docstring)."""
    out: dict[str, dict[str, Any]] = {}
    for store in _stores(reading(run), medium):
        out.update(store.read())
    return dict(sorted(out.items()))  # canonical key order: never the order of the parts (a recomputed one comes last)


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
