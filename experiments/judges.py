"""Judge backends by kind, and `make_judge(spec)`, which builds a `bench.layout.judge.Judge` from a spec.

A spec is a `JudgeSpec` or the JSON object it is written as: {"kind": "openai", "name": "qwen25vl7b",
"base_url": "http://127.0.0.1:8000/v1", "model": "Qwen/Qwen2.5-VL-7B-Instruct", "api_key_env": "KEY",
"timeout": 60} or {"kind": "local", "name": "tiny", "folder": "/models/vlm", "device": "cuda"}. Each
backend checks its own options (`JudgeSpec.options_for`), so a bad spec is one sentence.

This table lives in `experiments/`, not beside the protocol in `bench/layout/judge.py`, because the
local backend is in `interp/` (it runs torch) and `bench/` never imports `interp/` or torch.
Adding a backend touches two files: the backend's own module (a class with `name`, `judge` and a
`from_spec` classmethod) and one entry of `JUDGE_BACKENDS` below. The CLI (`ambench judge --spec
FILE`) and `make_judge` then know it with no further edit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping

from bench.layout.judge import Judge, JudgeSpec, JudgeSpecError, OpenAIJudge
from interp.vlm_judge import TransformersJudge  # cheap: torch is imported only when the model loads

#: kind -> builder of a judge from its spec
JUDGE_BACKENDS: dict[str, Callable[[JudgeSpec], Judge]] = {
    "openai": OpenAIJudge.from_spec,
    "local": TransformersJudge.from_spec,
}


def make_judge(spec: JudgeSpec | Mapping[str, Any]) -> Judge:
    """The judge a spec describes; `JudgeSpecError` (one sentence) for an unknown kind or bad options."""
    if not isinstance(spec, JudgeSpec):
        spec = JudgeSpec.from_dict(spec)
    build = JUDGE_BACKENDS.get(spec.kind)
    if build is None:
        raise JudgeSpecError(f"judge {spec.name}: unknown kind {spec.kind!r}; known: {', '.join(JUDGE_BACKENDS)}")
    judge = build(spec)
    if not isinstance(judge, Judge):
        raise JudgeSpecError(f"judge {spec.name}: the {spec.kind} backend built a {type(judge).__name__}, "
                             "which has no name and judge(prompt_text, png)")
    return judge


def read_spec(path: Path) -> JudgeSpec:
    """A judge spec from a JSON file (bounded: a spec is a few lines)."""
    try:
        if path.stat().st_size > 64_000:
            raise JudgeSpecError(f"{path}: a judge spec is a small JSON object; this file is over 64 kB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise JudgeSpecError(f"{path}: cannot read the judge spec ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise JudgeSpecError(f"{path}: the judge spec is not JSON ({e.msg} at line {e.lineno})") from None
    return JudgeSpec.from_dict(data, where=str(path))


__all__ = ["JUDGE_BACKENDS", "make_judge", "read_spec"]
