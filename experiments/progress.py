"""Progress bars for the stages a user waits on (tqdm on stderr; silent when stderr is not a terminal, so logs
and tests stay clean).

Generation reports per token, not per batch: a batch of 8 SmolLM2 attempts takes tens of seconds on a CPU,
and a bar that moves only when a batch ends looks like a hang (`ambench generate` was silent 74-95 s).
"""

from __future__ import annotations

import time
from typing import Any


def bar(total: int | None, desc: str, unit: str, leave: bool = True) -> Any:
    """A tqdm bar on stderr, shown only on a terminal."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=None, leave=leave)


class GenerationProgress:
    """Attempts done, tokens so far and tokens per second on one bar: `progress` is the generate stage's
    per-batch callback (attempts, new tokens), `on_token` the runtime's per-token callback."""

    def __init__(self, b: Any, every_s: float = 0.5) -> None:
        self.bar = b
        self.tokens = 0
        self.counted = 0  # tokens already counted through on_token in the batch under way
        self.t0 = time.perf_counter()
        self.every_s = every_s
        self.shown = 0.0

    def _show(self, force: bool = False) -> None:
        now = time.perf_counter()
        if force or now - self.shown >= self.every_s:
            self.shown = now
            self.bar.set_postfix_str(f"{self.tokens:,} tokens, {self.tokens / max(now - self.t0, 1e-9):.1f} tok/s")

    def on_token(self, n: int) -> None:
        self.tokens += n
        self.counted += n
        self._show()

    def progress(self, attempts: int, new_tokens: int) -> None:
        # a batch ends: its tokens were counted one by one, unless the runtime gave no per-token callback
        if not self.counted:
            self.tokens += new_tokens
        self.counted = 0
        self.bar.update(attempts)
        self._show(force=True)


__all__ = ["GenerationProgress", "bar"]
