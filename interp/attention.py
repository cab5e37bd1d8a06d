"""Attention focus on a prompt's spatial words: the word list, where the words are, and the focus ratio.

The paper's appendix shows attention maps in which GLM-4 32B attends more tightly than CodeLlama 34B,
from hand-picked examples ("illustrative rather than quantified"). This module turns that into a
statistic over attempts (issue 16; `docs/attention.md`):

- **Spatial words**: `SPATIAL_WORDS`, a documented list (`interp/data/spatial_words.json`: directions,
  relations, regions, grid words, partitions), found as whole words, case-insensitively, in the
  user's request only (`spatial_spans`) and mapped to the prompt tokens that overlap them by character
  offsets (`BuiltPrompt.tokens_in`), as the probe positions are.
- **Queries**: the tokens of each top-level drawing statement of the attempt's program
  (`bench.intervene.splice.statements`), teacher-forced after the prompt: the prompt's tokens, then
  the attempt's answer re-tokenised (the stored attempt keeps its text, not its token ids).
- **Focus ratio**, per query token and layer, from the attention pattern averaged over heads:
  (mass on the spatial tokens / mass on all prompt tokens) / (visible spatial tokens / visible prompt
  tokens). Mass on the answer so far is left out (renormalised over the prompt), so the ratio asks
  where, inside the prompt, the statement looks. 1 is what uniform attention over the prompt gives; 5
  means the spatial words get five times their share. "Visible" keys are those with a non-zero weight
  in some head: on a sliding-window layer the expectation is over the prompt tokens inside the window
  (all of them on full-attention layers). A query that sees no spatial token has no ratio (nan).
- Aggregation: per statement, the mean over its tokens; per attempt and layer, the mean over
  statements; an attempt's focus is the mean over layers. The distribution over attempts (mean,
  median, IQR, a prompt-clustered CI of the mean) and the per-layer profile are the model's answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Sequence

import numpy as np


@lru_cache(maxsize=1)
def _word_data() -> dict[str, Any]:
    data = json.loads(resources.files("interp").joinpath("data/spatial_words.json").read_text(encoding="utf-8"))
    groups = data.get("groups")
    if not isinstance(groups, dict) or not all(isinstance(v, list) and all(isinstance(w, str) and re.fullmatch(r"[a-z]+", w)
                                                                           for w in v) for v in groups.values()):
        raise ValueError("interp/data/spatial_words.json: 'groups' must map names to lists of lower-case words")
    return data


#: every spatial word (the union of the data file's groups), sorted
SPATIAL_WORDS: tuple[str, ...] = tuple(sorted({w for ws in _word_data()["groups"].values() for w in ws}))
#: the word list's version, recorded with every result
SPATIAL_WORDS_VERSION: str = str(_word_data()["version"])


def spatial_spans(text: str, words: Sequence[str] = SPATIAL_WORDS) -> list[tuple[int, int, str]]:
    """(start, end, word) of every whole-word, case-insensitive occurrence of `words` in `text`, in order."""
    if not words:
        return []
    pattern = re.compile(r"(?<![A-Za-z])(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")(?![A-Za-z])",
                         re.IGNORECASE)
    return [(m.start(), m.end(), m.group(0).lower()) for m in pattern.finditer(text)]


@dataclass
class Focus:
    """The focus of one attempt (see the module docstring)."""

    by_layer: np.ndarray  #: [layers] mean over statements of each statement's mean ratio over its tokens (nan: none)
    share_by_layer: np.ndarray  #: [layers] the same means of the raw share (spatial mass / prompt mass)
    n_queries: int  #: query tokens (drawing-statement tokens) that entered

    @property
    def focus(self) -> float:
        """The attempt's focus: the mean over layers (nan when no layer has one)."""
        finite = self.by_layer[np.isfinite(self.by_layer)]
        return float(finite.mean()) if finite.size else float("nan")


def focus_from_mass(mass: np.ndarray, statements: Sequence[Sequence[int]]) -> Focus:
    """The attempt's focus from the runtime's per-layer attention mass.

    `mass`: [layers, queries, 2 groups (spatial, prompt), 2 (mass, visible keys)], as
    `Runtime.attention_mass` returns for key groups (spatial tokens, prompt tokens); `statements`: per
    statement, the indices into the query axis of its tokens."""
    m = np.asarray(mass, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = m[:, :, 0, 0] / m[:, :, 1, 0]
        expected = m[:, :, 0, 1] / m[:, :, 1, 1]
        ratio = np.where((m[:, :, 1, 0] > 0) & (m[:, :, 0, 1] > 0), share / expected, np.nan)
        share = np.where(m[:, :, 1, 0] > 0, share, np.nan)
    per_stmt = [(_nanmean(ratio[:, list(q)], axis=1), _nanmean(share[:, list(q)], axis=1)) for q in statements if len(q)]
    if not per_stmt:
        nan = np.full(m.shape[0], np.nan)
        return Focus(nan, nan.copy(), 0)
    return Focus(_nanmean(np.stack([r for r, _ in per_stmt], axis=1), axis=1),
                 _nanmean(np.stack([s for _, s in per_stmt], axis=1), axis=1), int(sum(len(q) for q in statements)))


def _nanmean(x: np.ndarray, axis: int) -> np.ndarray:
    finite = np.isfinite(x)
    n = finite.sum(axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, np.where(finite, x, 0.0).sum(axis=axis) / n, np.nan)


__all__ = ["Focus", "SPATIAL_WORDS", "SPATIAL_WORDS_VERSION", "focus_from_mass", "spatial_spans"]
