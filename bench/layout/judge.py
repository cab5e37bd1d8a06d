"""VLM judges for the layout task: the `Judge` protocol, judge specs, one judge prompt, an OpenAI-compatible client, verdict cache.

The rubric and the judge prompt are data (`bench/layout/data/rubric.json`, checked by
`bench.layout.rubric`): five dimensions scored as integers 0-5 (prompt fidelity, shape, colour,
spatial, completeness); the overall score is their mean and an attempt passes at >= 3.0. Every judge
gets byte-identical messages (`judge_messages`): the same system text, the same user text and the
image as a PNG (the 24x24 render upscaled x16 by nearest neighbour, `bench.canvas.png.png_bytes`: the
one encoder, whose bytes the verdict cache keys hash). The prompt never names the medium.

A judge is anything with a `name` and `judge(prompt_text, png) -> Verdict` (`Judge`). A `JudgeSpec`
(kind, name, the backend's options) says which one to build; `experiments.judges.make_judge` builds it
(it lives there because the local backend is in `interp/`, which `bench/` may not import). A backend
reads its options with `JudgeSpec.options_for`, which turns a missing, unknown or mistyped option into
one sentence.

`OpenAIJudge` talks to any OpenAI-compatible chat-completions endpoint that takes image input (how
Qwen2.5-VL-7B or InternVL3-8B are served with vLLM or llama.cpp): base URL and model name from the
config, temperature 0, retries with exponential backoff on connection errors, 429 and 5xx, and a
re-ask when the verdict cannot be parsed. `VerdictCache` keys verdicts by (image sha256, prompt,
judge name, rubric version), so judging the same picture again costs nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

from bench.layout.rubric import RUBRIC

RUBRIC_VERSION = RUBRIC.version
DIMENSIONS = RUBRIC.names
PASS = RUBRIC.pass_threshold
JUDGE_SYSTEM = RUBRIC.system_prompt


class JudgeError(RuntimeError):
    """A judge that cannot be reached or never returns a usable verdict."""


class JudgeSpecError(JudgeError):
    """A judge spec that names an unknown backend or gives it missing, unknown or mistyped options."""


class VerdictParseError(ValueError):
    """A judge answer without an integer score in the rubric's scale (0..5) for every dimension."""


@dataclass(frozen=True)
class Verdict:
    scores: dict[str, int]  #: one integer score per rubric dimension
    raw: str  #: the judge's answer as received

    @property
    def overall(self) -> float:
        return sum(self.scores[d] for d in DIMENSIONS) / len(DIMENSIONS)

    @property
    def passed(self) -> bool:
        return self.overall >= PASS


@runtime_checkable
class Judge(Protocol):
    """What the judge stage needs of a judge backend (`OpenAIJudge`, `interp.vlm_judge.TransformersJudge`, ...)."""

    #: the judge's name: it keys the verdict cache and the rows of judge_scores.jsonl
    name: str

    def judge(self, prompt_text: str, png: bytes) -> Verdict:
        """Grade one picture (`png`, from `bench.canvas.png.png_bytes`) made for the layout prompt `prompt_text`.

        Send the rubric's texts (`judge_messages`, or `JUDGE_SYSTEM` and `judge_user_text`) and parse the
        answer with `parse_verdict`; raise `JudgeError` when the judge cannot answer and `VerdictParseError`
        when it never gives a usable verdict."""
        ...


_NUMBER = (int, float)


def _type_words(types: tuple[type, ...]) -> str:
    if set(types) == set(_NUMBER):
        return "number"
    return " or ".join({str: "string", int: "whole number", float: "number", bool: "true/false"}.get(t, t.__name__) for t in types)


@dataclass(frozen=True)
class JudgeSpec:
    """Which judge to build: a backend kind, the judge's name and the backend's own options."""

    kind: str  #: the backend, a key of `experiments.judges.JUDGE_BACKENDS` ("openai", "local")
    name: str  #: the judge's name (keys the verdict cache and the judge_scores rows)
    options: Mapping[str, Any] = field(default_factory=dict)  #: the backend's settings, checked by `options_for`

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise JudgeSpecError('a judge spec needs a kind (the backend, e.g. "openai" or "local")')
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 200 or not self.name.isprintable():
            raise JudgeSpecError("a judge spec needs a name: printable, non-empty, at most 200 characters (it keys the verdict cache)")
        if not isinstance(self.options, Mapping) or not all(isinstance(k, str) for k in self.options):
            raise JudgeSpecError("a judge spec's options must be a mapping of names to values")

    @classmethod
    def from_dict(cls, data: Any, where: str = "judge spec") -> "JudgeSpec":
        """A spec from a JSON object: {"kind": ..., "name": ..., <the backend's options>...}."""
        if not isinstance(data, Mapping):
            raise JudgeSpecError(f"{where} must be a JSON object with kind, name and the backend's options")
        try:
            return cls(data.get("kind"), data.get("name"), {k: v for k, v in data.items() if k not in ("kind", "name")})
        except JudgeSpecError as e:
            raise JudgeSpecError(f"{where}: {e}") from None

    def options_for(self, required: Mapping[str, type | tuple[type, ...]],
                    optional: Mapping[str, type | tuple[type, ...]] | None = None) -> dict[str, Any]:
        """The options, checked: every `required` one present, none unknown, each of its type (None = absent)."""
        known = {**required, **(optional or {})}
        given = {k: v for k, v in self.options.items() if v is not None}
        where = f"judge {self.name} ({self.kind})"
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise JudgeSpecError(f"{where}: unknown option {unknown[0]!r}; {self.kind} takes {', '.join(known) or 'none'}")
        missing = [k for k in required if k not in given]
        if missing:
            raise JudgeSpecError(f"{where} needs {', '.join(missing)}")
        for k, v in given.items():
            want = known[k]
            types = want if isinstance(want, tuple) else (want,)
            if isinstance(v, bool) and bool not in types or not isinstance(v, types):
                raise JudgeSpecError(f"{where}: option {k} must be a {_type_words(types)}, got {type(v).__name__}")
            if isinstance(v, str) and not v.strip():
                raise JudgeSpecError(f"{where}: option {k} is empty")
        return given


def judge_user_text(prompt_text: str) -> str:
    """The user text every judge gets for one layout prompt."""
    return RUBRIC.user_text(prompt_text)


def judge_messages(prompt_text: str, png: bytes) -> list[dict[str, Any]]:
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {"role": "user", "content": [
            {"type": "text", "text": judge_user_text(prompt_text)},
            {"type": "image_url", "image_url": {"url": url}},
        ]},
    ]


def _key(k: str) -> str:
    return k.strip().lower().replace(" ", "_")


def parse_verdict(text: str) -> Verdict:
    """One integer score per rubric dimension from a judge's answer: a JSON object (possibly fenced or
    inside prose), or `name: n` lines. Scores must be integers (4.0 is accepted as 4) in the rubric's
    scale (0..5). Keys may be a dimension's name or one of its aliases, in any case."""
    keys = RUBRIC.keys
    found: dict[str, Any] = {}
    for m in re.finditer(r"\{[^{}]*\}", text, re.S):
        try:
            obj = json.loads(m.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            cand = {keys[_key(k)]: v for k, v in obj.items() if isinstance(k, str) and _key(k) in keys}
            if len(cand) == len(DIMENSIONS):
                found = cand
                break
    if not found:
        for m in re.finditer(r"([A-Za-z_ ]+?)\s*[:=]\s*(-?\d+(?:\.\d+)?)", text):
            key = _key(m.group(1))
            if key in keys and keys[key] not in found:
                found[keys[key]] = float(m.group(2))
    if set(found) != set(DIMENSIONS):
        raise VerdictParseError(f"expected scores for {', '.join(DIMENSIONS)}; got {sorted(found) or 'none'}")
    lo, hi = RUBRIC.score_min, RUBRIC.score_max
    scores = {}
    for d in DIMENSIONS:
        v = found[d]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != int(v) or not lo <= int(v) <= hi:
            raise VerdictParseError(f"{d} score {v!r} is not an integer in {lo}..{hi}")
        scores[d] = int(v)
    return Verdict(scores, text)


@dataclass
class OpenAIJudge:
    """A VLM behind an OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp, a hosted API)."""

    name: str  #: keys the verdict cache and the judge_scores rows
    base_url: str  #: the endpoint's base, e.g. http://127.0.0.1:8000/v1 (".../chat/completions" is appended)
    model: str  #: the model name the endpoint serves
    api_key: str | None = None  #: sent as a bearer token when given
    timeout: float = 60.0  #: seconds to wait for one answer
    max_retries: int = 4  #: retries on connection errors, 408, 429 and 5xx
    backoff: float = 1.0  #: seconds before the first retry; doubles each time
    parse_retries: int = 2  #: re-asks when an answer has no usable verdict
    sleep: Callable[[float], None] = time.sleep  #: how to wait between retries (tests pass a no-op)

    @classmethod
    def from_spec(cls, spec: JudgeSpec) -> "OpenAIJudge":
        """Options: base_url, model (required); api_key_env (the environment variable holding the key), timeout."""
        o = spec.options_for({"base_url": str, "model": str}, {"api_key_env": str, "timeout": _NUMBER})
        key = None
        if "api_key_env" in o:
            key = os.environ.get(o["api_key_env"])
            if not key:
                raise JudgeSpecError(f"judge {spec.name}: the environment variable {o['api_key_env']} (api_key_env) is not set")
        timeout = float(o.get("timeout", 60.0))
        if not 0 < timeout <= 3600:
            raise JudgeSpecError(f"judge {spec.name}: timeout must be in (0, 3600] seconds, got {timeout:g}")
        return cls(spec.name, o["base_url"], o["model"], api_key=key, timeout=timeout)

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url.rstrip("/") + "/chat/completions"
        data = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        delay, last = self.backoff, ""
        for attempt in range(self.max_retries + 1):
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return json.loads(resp.read().decode())
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
                if e.code not in (408, 429) and e.code < 500:
                    raise JudgeError(f"judge {self.name}: {url} answered {last}: {e.read()[:200]!r}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as e:
                last = str(getattr(e, "reason", e))
            if attempt < self.max_retries:
                self.sleep(delay)
                delay *= 2
        raise JudgeError(f"judge {self.name}: no answer from {url} after {self.max_retries + 1} tries ({last})")

    def judge(self, prompt_text: str, png: bytes) -> Verdict:
        payload = {"model": self.model, "messages": judge_messages(prompt_text, png), "temperature": 0, "max_tokens": 200}
        error = ""
        for _ in range(self.parse_retries + 1):
            out = self._post(payload)
            try:
                text = out["choices"][0]["message"]["content"]
            except (KeyError, IndexError, TypeError):
                error = "answer without choices[0].message.content"
                continue
            try:
                return parse_verdict(text if isinstance(text, str) else json.dumps(text))
            except VerdictParseError as e:
                error = str(e)
        raise VerdictParseError(f"judge {self.name}: no usable verdict ({error})")


def cache_key(png: bytes, prompt_text: str, judge: str) -> str:
    h = hashlib.sha256()
    for part in (hashlib.sha256(png).hexdigest(), prompt_text, judge, RUBRIC_VERSION):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class VerdictCache:
    """Append-only JSONL of verdicts keyed by (image hash, prompt, judge, rubric version)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.entries: dict[str, dict[str, Any]] = {}
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").split("\n"):  # not splitlines: U+2028 in JSON strings
                try:
                    row = json.loads(line)
                    self.entries[row["key"]] = row
                except (json.JSONDecodeError, KeyError):
                    continue  # a torn last line from a kill

    def get(self, key: str) -> Verdict | None:
        row = self.entries.get(key)
        return None if row is None else Verdict(row["scores"], row["raw"])

    def put(self, key: str, v: Verdict) -> None:
        row = {"key": key, "scores": v.scores, "raw": v.raw, "rubric": RUBRIC_VERSION}
        self.entries[key] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
