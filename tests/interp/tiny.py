"""A tiny random Llama with a small BPE tokenizer and a chat template, built in code (seconds, no hub)."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "fill('white')\nrect(2, 3, 4, 5, 'red')\ncircle(12, 12, 4, 'blue')\nline(0, 0, 23, 23, 'black')",
    "Draw on a 24x24 grid of cells. Rows are numbered 0-23 from top to bottom and columns 0-23.",
    "```python\nfor i in range(3):\n    poly([(1, 2), (3, 4), (5, 6)], 'green')\n```",
    "Draw the flag of Germany. A cat sitting on a mat under a light blue sky.",
    "You write short Python programs that draw on a canvas of square cells. Answer with the code only.",
]


def build_tokenizer(folder: Path, chat: bool = True, corpus: list[str] | None = None, vocab_size: int = 400):
    """A small byte-level BPE tokenizer (vocab ~400) trained on CORPUS (or `corpus`), saved into `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((CORPUS if corpus is None else corpus) * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>" if chat else "<|endoftext|>",
                                   bos_token="<|endoftext|>", pad_token="<pad>")
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return fast


def build_tiny(folder: Path, n_layers: int = 2, d_model: int = 32, seed: int = 0, chat: bool = True) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    fast = build_tokenizer(folder, chat)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=d_model, intermediate_size=2 * d_model, num_hidden_layers=n_layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    redraw(model, seed, cfg.initializer_range)
    with torch.no_grad():  # larger logits than the default init: greedy paths that are not near ties
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(folder)
    return folder


def redraw(model, seed: int, std: float) -> None:
    """Every weight matrix drawn again from N(0, std) by numpy, norms left at one: the same bytes on every CPU.

    torch's own initialiser samples float32 normals with code that ATen picks by instruction set, so under
    ATEN_CPU_CAPABILITY=default the tiny model's weights differed from the AVX2/AVX-512 ones by an ulp, and with them its
    weights digest and every value downstream (issue 29). numpy's generator is scalar code: one seed, one model.
    """
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() >= 2:
                param.copy_(torch.from_numpy(rng.normal(0.0, std, tuple(param.shape)).astype(np.float32)))
        emb = model.get_input_embeddings()
        if emb.padding_idx is not None:  # as torch's initialiser leaves it
            emb.weight[emb.padding_idx] = 0.0


VLM_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% else %}<image>{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_vlm(folder: Path) -> Path:
    """A tiny random LLaVA (CLIP vision tower + Llama) with a processor, saved as a local folder."""
    from transformers import (AutoTokenizer, CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor)

    tok = AutoTokenizer.from_pretrained(build_tiny(folder.with_name(folder.name + "-tok")))
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    tok.chat_template = VLM_TEMPLATE
    proc = LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}),
                          tokenizer=tok, patch_size=8, vision_feature_select_strategy="default",
                          num_additional_image_tokens=1, chat_template=VLM_TEMPLATE)
    cfg = LlavaConfig(
        text_config=LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                num_attention_heads=4, num_key_value_heads=2),
        vision_config=CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                                       image_size=32, patch_size=8),
        image_token_index=tok.convert_tokens_to_ids("<image>"), vision_feature_select_strategy="default",
        vision_feature_layer=-1)
    LlavaForConditionalGeneration(cfg).save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder
