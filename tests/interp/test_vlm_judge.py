"""The local transformers judge on a tiny random LLaVA built in code: it loads, sees the image, answers."""

import numpy as np
import pytest

from bench.canvas.png import png_bytes
from bench.layout.judge import JudgeError, VerdictParseError
from interp.vlm_judge import TransformersJudge
from tests.interp.tiny import build_tiny_vlm


def test_local_vlm_judge_runs_and_reports_unparsable_answers(tmp_path):
    folder = build_tiny_vlm(tmp_path / "vlm")
    j = TransformersJudge("tiny-vlm", folder, max_new_tokens=8)
    png = png_bytes(np.zeros((24, 24, 3), np.uint8))
    with pytest.raises(VerdictParseError, match="tiny-vlm.*the answer began"):
        j.judge("Draw a cat.", png)  # a random model does not write a verdict; the error says what it wrote
    # the image reaches the model: the first answer token's logits depend on the picture
    import torch
    from PIL import Image

    p, m = j._processor, j._model
    logits = []
    for color in ((0, 0, 0), (255, 255, 255)):
        text = p.apply_chat_template([{"role": "user", "content": [{"type": "image"}]}], add_generation_prompt=True, tokenize=False)
        enc = p(images=[Image.new("RGB", (24, 24), color)], text=text, return_tensors="pt")
        with torch.inference_mode():
            logits.append(m(**enc).logits[0, -1])
    assert not torch.allclose(logits[0], logits[1])


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(JudgeError, match="not a model folder"):
        TransformersJudge("x", tmp_path)
