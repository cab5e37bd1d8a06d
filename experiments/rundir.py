"""The run directory's identities: the one attempt key every stage and file uses.

An attempt is identified by (model, task, protocol, medium, prompt id, sample), in that order, with
one spelling everywhere: resume checks, the `key` column of renders.h5, the seeds of derived work
(continuations, patching, steering) and the grouping of every table. A key that leaves a field out is
how a second model's work was once silently skipped (its programs coincided with the first model's),
so derived stages key their units on the whole attempt key plus their own fields.
"""

from __future__ import annotations

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
        """The key as stored in renders.h5 (a JSON list in field order)."""
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
