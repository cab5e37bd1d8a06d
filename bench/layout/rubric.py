"""The layout judges' rubric and judge prompt: a data file with a checked schema, loaded once.

`data/rubric.json` holds:
- `version` ("rubric/1"): recorded with every verdict and part of the verdict-cache key, so a change
  to anything a judge sees or to how a verdict scores must bump it;
- `scale` (`min`, `max`): every dimension is an integer in this range;
- `pass_threshold`: an attempt passes when the mean of its dimensions is at least this;
- `dimensions`: in order, each with `name` (the key a judge answers with), `question` (the line the
  judge reads) and `aliases` (other keys accepted in an answer: "colour" for "color");
- `judge_prompt`: `system`, the system text with one `{dimensions}` slot that receives one
  `dimension_line` ("- {name}: {question}") per dimension, and `user`, the user text with one
  `{request}` slot for the layout prompt. Every judge backend sends exactly these texts.
An optional `description` is for people. A broken file is one `RubricError` sentence naming the file
and the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

_KEY = re.compile(r"[a-z][a-z0-9_]*")  #: a dimension name or alias as `parse_verdict` normalises answer keys
_FIELDS = {"description", "version", "scale", "pass_threshold", "dimensions", "judge_prompt"}
_PROMPT_FIELDS = {"system", "dimension_line", "user"}


class RubricError(ValueError):
    """A rubric file that breaks the schema."""


@dataclass(frozen=True)
class Dimension:
    """One scored dimension of the rubric."""

    name: str  #: the key a judge's verdict gives this score under
    question: str  #: what the judge is asked about it (one line of the system prompt)
    aliases: tuple[str, ...] = ()  #: other keys accepted for it in a verdict (normalised: lower case, "_" for " ")


@dataclass(frozen=True)
class Rubric:
    """The rubric a verdict is scored by and the texts every judge is sent."""

    version: str  #: recorded with each verdict; part of the verdict-cache key
    dimensions: tuple[Dimension, ...]  #: in the order they are listed to the judge
    score_min: int  #: lowest score of a dimension
    score_max: int  #: highest score of a dimension
    pass_threshold: float  #: an attempt passes when its mean score is >= this
    system_template: str  #: system text with one "{dimensions}" slot
    dimension_line: str  #: one line per dimension, with "{name}" and "{question}" slots
    user_template: str  #: user text with one "{request}" slot

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions)

    @cached_property
    def system_prompt(self) -> str:
        """The system text every judge gets, byte for byte."""
        lines = [self.dimension_line.replace("{name}", d.name).replace("{question}", d.question) for d in self.dimensions]
        return self.system_template.replace("{dimensions}", "\n".join(lines))

    def user_text(self, request: str) -> str:
        """The user text for one layout prompt (the request is inserted as is, never interpreted)."""
        head, tail = self.user_template.split("{request}")
        return head + request + tail

    @cached_property
    def keys(self) -> Mapping[str, str]:
        """Every key accepted in a verdict (names and aliases) -> the dimension's name."""
        return {k: d.name for d in self.dimensions for k in (d.name, *d.aliases)}


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_rubric(data: Any, where: str) -> Rubric:
    """Check a rubric's decoded JSON against the schema above; `where` names it in errors."""
    def fail(msg: str) -> RubricError:
        return RubricError(f"{where}: {msg}")

    if not isinstance(data, dict):
        raise fail("the rubric must be a JSON object")
    unknown = sorted(set(data) - _FIELDS)
    missing = sorted(_FIELDS - {"description"} - set(data))
    if unknown or missing:
        raise fail(f"unknown fields {unknown} / missing fields {missing} (fields: {', '.join(sorted(_FIELDS))})")
    version = data["version"]
    if not isinstance(version, str) or not version.strip():
        raise fail("version must be a non-empty string")
    scale = data["scale"]
    if not (isinstance(scale, dict) and set(scale) == {"min", "max"} and all(isinstance(scale[k], int)
                                                                            and not isinstance(scale[k], bool) for k in scale)):
        raise fail('scale must be {"min": int, "max": int}')
    lo, hi = scale["min"], scale["max"]
    if not lo < hi:
        raise fail(f"scale min {lo} must be below max {hi}")
    threshold = data["pass_threshold"]
    if not _number(threshold) or not lo <= threshold <= hi:
        raise fail(f"pass_threshold must be a number in {lo}..{hi}, got {threshold!r}")
    dims_raw = data["dimensions"]
    if not isinstance(dims_raw, list) or not dims_raw:
        raise fail("dimensions must be a non-empty list")
    dims, seen = [], set()
    for n, d in enumerate(dims_raw, 1):
        if not isinstance(d, dict) or set(d) != {"name", "question", "aliases"}:
            raise fail(f"dimension {n} must be an object with exactly name, question and aliases")
        name, question, aliases = d["name"], d["question"], d["aliases"]
        if not isinstance(name, str) or not _KEY.fullmatch(name):
            raise fail(f"dimension {n}: name {name!r} must be lower case letters, digits and _")
        if not isinstance(question, str) or not question.strip() or "\n" in question:
            raise fail(f"dimension {name}: question must be one non-empty line")
        if not isinstance(aliases, list) or not all(isinstance(a, str) and _KEY.fullmatch(a) for a in aliases):
            raise fail(f"dimension {name}: aliases must be a list of lower-case keys")
        for key in (name, *aliases):
            if key in seen:
                raise fail(f"dimension {name}: key {key!r} is used twice")
            seen.add(key)
        dims.append(Dimension(name, question, tuple(aliases)))
    prompt = data["judge_prompt"]
    if not isinstance(prompt, dict) or set(prompt) != _PROMPT_FIELDS or not all(isinstance(v, str) for v in prompt.values()):
        raise fail(f"judge_prompt must be an object of strings with exactly {', '.join(sorted(_PROMPT_FIELDS))}")
    for field, slot in (("system", "{dimensions}"), ("user", "{request}")):
        if prompt[field].count(slot) != 1:
            raise fail(f"judge_prompt.{field} must hold {slot} exactly once")
    if "{name}" not in prompt["dimension_line"] or "{question}" not in prompt["dimension_line"]:
        raise fail("judge_prompt.dimension_line must hold {name} and {question}")
    return Rubric(version, tuple(dims), lo, hi, float(threshold), prompt["system"], prompt["dimension_line"], prompt["user"])


def load_rubric(path: str | Path | None = None) -> Rubric:
    """The rubric in `path`, or the packaged `bench/layout/data/rubric.json`."""
    if path is None:
        where = "bench/layout/data/rubric.json"
        try:
            text = resources.files("bench.layout").joinpath("data/rubric.json").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise RubricError(f"{where}: cannot read the packaged rubric ({e})") from None
    else:
        where = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise RubricError(f"{where}: cannot read the rubric ({e})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RubricError(f"{where}: not JSON ({e.msg} at line {e.lineno})") from None
    return parse_rubric(data, where)


#: the rubric every judge and every verdict in this package uses, loaded and checked once at import
RUBRIC = load_rubric()

__all__ = ["Dimension", "RUBRIC", "Rubric", "RubricError", "load_rubric", "parse_rubric"]
