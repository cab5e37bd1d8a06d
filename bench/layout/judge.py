"""VLM judges for the layout task: rubric, one judge prompt, an OpenAI-compatible client, verdict cache.

The rubric has five dimensions scored as integers 0-5 (prompt fidelity, shape, colour, spatial,
completeness); the overall score is their mean and an attempt passes at >= 3.0. Every judge gets
byte-identical messages (`judge_messages`): the same system text, the same user text and the image
as a PNG (the 24x24 render upscaled x16 by nearest neighbour, `bench.canvas.png.png_bytes`: the one
encoder, whose bytes the verdict cache keys hash). The prompt never names the medium.

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
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

RUBRIC_VERSION = "rubric/1"
DIMENSIONS = ("fidelity", "shape", "color", "spatial", "completeness")
PASS = 3.0

JUDGE_SYSTEM = (
    "You grade small pixel pictures. Each picture was made to answer a drawing request on a 24x24 grid, "
    "shown enlarged. Judge only what is visible. Score five dimensions with integers from 0 (absent or wrong) "
    "to 5 (excellent):\n"
    "- fidelity: does the picture depict what was requested?\n"
    "- shape: are the shapes recognisable and well formed for this resolution?\n"
    "- color: are the colours appropriate to the request?\n"
    "- spatial: are the parts arranged and proportioned sensibly?\n"
    "- completeness: are all requested elements present?\n"
    'Answer with one JSON object and nothing else, for example {"fidelity": 3, "shape": 2, "color": 4, '
    '"spatial": 3, "completeness": 2}.'
)


class JudgeError(RuntimeError):
    """A judge that cannot be reached or never returns a usable verdict."""


class VerdictParseError(ValueError):
    """A judge answer without five integer scores in 0..5."""


@dataclass(frozen=True)
class Verdict:
    scores: dict[str, int]
    raw: str

    @property
    def overall(self) -> float:
        return sum(self.scores[d] for d in DIMENSIONS) / len(DIMENSIONS)

    @property
    def passed(self) -> bool:
        return self.overall >= PASS


def judge_messages(prompt_text: str, png: bytes) -> list[dict[str, Any]]:
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {"role": "user", "content": [
            {"type": "text", "text": f"Request: {prompt_text}\nGrade the picture."},
            {"type": "image_url", "image_url": {"url": url}},
        ]},
    ]


_ALIASES = {"prompt_fidelity": "fidelity", "fidelity": "fidelity", "shape": "shape", "shapes": "shape", "color": "color",
            "colour": "color", "colors": "color", "colours": "color", "spatial": "spatial", "layout": "spatial",
            "completeness": "completeness", "complete": "completeness"}


def parse_verdict(text: str) -> Verdict:
    """Five integer scores from a judge's answer: a JSON object (possibly fenced or inside prose), or
    `name: n` lines. Scores must be integers (4.0 is accepted as 4) in 0..5."""
    found: dict[str, Any] = {}
    for m in re.finditer(r"\{[^{}]*\}", text, re.S):
        try:
            obj = json.loads(m.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            cand = {_ALIASES[k.strip().lower().replace(" ", "_")]: v for k, v in obj.items()
                    if isinstance(k, str) and k.strip().lower().replace(" ", "_") in _ALIASES}
            if len(cand) == len(DIMENSIONS):
                found = cand
                break
    if not found:
        for m in re.finditer(r"([A-Za-z_ ]+?)\s*[:=]\s*(-?\d+(?:\.\d+)?)", text):
            key = m.group(1).strip().lower().replace(" ", "_")
            if key in _ALIASES and _ALIASES[key] not in found:
                found[_ALIASES[key]] = float(m.group(2))
    if set(found) != set(DIMENSIONS):
        raise VerdictParseError(f"expected scores for {', '.join(DIMENSIONS)}; got {sorted(found) or 'none'}")
    scores = {}
    for d in DIMENSIONS:
        v = found[d]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or float(v) != int(v) or not 0 <= int(v) <= 5:
            raise VerdictParseError(f"{d} score {v!r} is not an integer in 0..5")
        scores[d] = int(v)
    return Verdict(scores, text)


@dataclass
class OpenAIJudge:
    name: str
    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 60.0
    max_retries: int = 4
    backoff: float = 1.0  #: seconds before the first retry; doubles each time
    parse_retries: int = 2
    sleep: Callable[[float], None] = time.sleep

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
