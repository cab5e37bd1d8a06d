"""A local `transformers` VLM as a layout judge (the weights must already be on disk).

`TransformersJudge(name, folder)` loads the folder with `AutoProcessor` and
`AutoModelForImageTextToText` (Qwen2.5-VL, InternVL3-hf, LLaVA, ... whatever the installed
transformers supports), sends the same system and user texts as every other judge
(`bench.layout.judge.JUDGE_SYSTEM` and `judge_user_text`, from the rubric's data file) with the same
PNG, decodes greedily and parses the verdict. Greedy decoding is deterministic, so there is no
re-ask: an unparsable answer is a `VerdictParseError` carrying the answer's start. It is a
`bench.layout.judge.Judge`; `experiments.judges.make_judge` builds it from a spec of kind "local".
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from bench.layout.judge import (JUDGE_SYSTEM, JudgeError, JudgeSpec, JudgeSpecError, Verdict, VerdictParseError,
                                judge_user_text, parse_verdict)

DTYPES = ("bfloat16", "float16", "float32")


class TransformersJudge:
    """A local vision-language model folder as a judge (loaded on first use, greedy decoding)."""

    def __init__(self, name: str, folder: str | Path, device: str = "cpu", dtype: str | None = None,
                 max_new_tokens: int = 200) -> None:
        self.name = name
        self.folder = Path(folder)
        if not (self.folder / "config.json").is_file():
            raise JudgeError(f"judge {name}: {self.folder} is not a model folder (no config.json); "
                             "download the VLM's weights there first (nothing is fetched at run time)")
        self.device = device
        self.dtype = dtype
        self.max_new_tokens = max_new_tokens
        self._model: Any = None
        self._processor: Any = None

    @classmethod
    def from_spec(cls, spec: JudgeSpec) -> "TransformersJudge":
        """Options: folder (required); device ("cpu"), dtype (bfloat16/float16/float32), max_new_tokens."""
        o = spec.options_for({"folder": str}, {"device": str, "dtype": str, "max_new_tokens": int})
        if o.get("dtype", DTYPES[0]) not in DTYPES:
            raise JudgeSpecError(f"judge {spec.name}: dtype must be one of {', '.join(DTYPES)}, got {o['dtype']!r}")
        if not 1 <= o.get("max_new_tokens", 200) <= 4096:
            raise JudgeSpecError(f"judge {spec.name}: max_new_tokens must be in 1..4096")
        return cls(spec.name, o["folder"], device=o.get("device", "cpu"), dtype=o.get("dtype"),
                   max_new_tokens=o.get("max_new_tokens", 200))

    def _load(self) -> None:
        if self._model is not None:
            return
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}.get(self.dtype or "", None)
        if dt is None:
            dt = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        try:
            self._processor = AutoProcessor.from_pretrained(self.folder)
            self._model = AutoModelForImageTextToText.from_pretrained(self.folder, dtype=dt).to(self.device).eval()
        except (OSError, ValueError, KeyError) as e:
            raise JudgeError(f"judge {self.name}: cannot load a vision-language model from {self.folder} ({e})") from None

    def judge(self, prompt_text: str, png: bytes) -> Verdict:
        import torch
        from PIL import Image

        self._load()
        image = Image.open(io.BytesIO(png)).convert("RGB")
        messages = [
            {"role": "system", "content": [{"type": "text", "text": JUDGE_SYSTEM}]},
            {"role": "user", "content": [{"type": "text", "text": judge_user_text(prompt_text)},
                                         {"type": "image"}]},
        ]
        text = self._processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        enc = self._processor(images=[image], text=text, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            out = self._model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False)
        answer = self._processor.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        try:
            return parse_verdict(answer)
        except VerdictParseError as e:
            raise VerdictParseError(f"judge {self.name}: {e}; the answer began {answer[:80]!r}") from None
