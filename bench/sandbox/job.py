"""One unit of work for a sandbox worker: a model answer and what to do with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Job:
    """A model answer for a worker: run it as a canvas program (optionally scoring it) or render it as SVG."""

    text: str  #: the model's answer, prose and fences included
    kind: str = "canvas"  #: "canvas" (a program for the pool's medium) or "svg" (an SVG answer)
    geometry: bool = True  #: canvas: send the call log and shapes back (stages that only need pixels say no)
    reference: Any = None  #: canvas: a `bench.translation.references.Reference` to score against in the worker
    size: int = 24  #: svg: the raster size (drawn from the vector source)
    native: int = 0  #: svg: also render at this size and send it back as PNG (0: no)

    def __post_init__(self) -> None:
        if self.kind not in ("canvas", "svg"):
            raise ValueError(f"unknown job kind {self.kind!r}: canvas or svg")
