"""The keys a run is indexed by: the attempt key (one spelling everywhere), the seeds and content hashes derived
from keys, and a model's file-safe name."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, NamedTuple

#: the canvas medium of the paper; SVG attempts have medium "svg"; other canvas media (v1-48, outline)
#: are named as `bench.canvas.medium.get_medium` names them
DEFAULT_MEDIUM = "v1"


class AttemptKey(NamedTuple):
    model: str
    task: str
    protocol: str
    medium: str
    prompt_id: str
    sample: int

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> "AttemptKey":
        """The key of a row of generations.jsonl (or of any row that carries the attempt's fields)."""
        return cls(str(row["model"]), str(row["task"]), str(row["protocol"]), str(row.get("medium", DEFAULT_MEDIUM)),
                   str(row["prompt_id"]), int(row["sample"]))

    @property
    def json(self) -> str:
        """The key as stored in the render store (a JSON list in field order)."""
        return json.dumps(list(self))

    @property
    def arm(self) -> str:
        """The generation arm: `protocol` for the paper's canvas medium, `medium/protocol` otherwise."""
        return self.protocol if self.medium == DEFAULT_MEDIUM else f"{self.medium}/{self.protocol}"

    def fields(self) -> dict[str, Any]:
        return self._asdict()


def arm_of(row: Mapping[str, Any]) -> str:
    return AttemptKey.of(row).arm


def parse_arm(label: str) -> tuple[str, str]:
    """(medium, protocol) of an arm label such as `few-shot-2` or `svg/few-shot-2`."""
    medium, sep, protocol = label.rpartition("/")
    return (medium if sep else DEFAULT_MEDIUM), protocol


def derive_seed(*key: Any) -> int:
    """A 60-bit seed from sha256 of the JSON of `key`: the same key, the same seed, on any machine."""
    return int(hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:15], 16)


def content_hash(*parts: Any) -> str:
    """A short hash of what produced a row (JSON of the parts), for content-keyed resume."""
    return hashlib.sha256(json.dumps(list(parts), sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


def safe_name(model: str) -> str:
    """A file name for a model name or path (the activation store's name)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in model.strip("/"))[-80:]
