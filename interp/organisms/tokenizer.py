"""The organisms' tokenizer: one token per character, except that 10-99 are single tokens, plus a chat template.

Characters are the printable ASCII set and the newline; any other character is `<unk>`. A run of digits
is cut greedily into pieces of `[1-9][0-9]` or one digit, so every integer 0-99 is exactly one token
("12" is one token, "05" is "0", "5"). That choice is deliberate: the intervention stage rewrites the
numeric literals of a drawing statement, and activation patching needs the moved and the original
statement to have the same number of tokens. With one token per digit, moving `rect(6, ...)` to
`rect(12, ...)` adds a token and the cut is skipped; with whole numbers every move on the 24x24 canvas
keeps the token count.

Special tokens: `<|user|>` and `<|assistant|>` open the two turns, `<|end|>` closes a turn and is the
end-of-sequence token (it is one of the runtime's end-of-turn tokens), `<pad>` pads and `<unk>` stands
for a character outside the vocabulary.

The chat template renders only the *last user message* and, when present after it, the assistant's
reply: `<|user|>{request}<|end|><|assistant|>{reply}<|end|>`. It ignores the system prompt and any
earlier turns. That is legitimate for a model trained on single-turn requests in a controlled
language, and it is exactly what the organism was trained on; it means the `zero-shot` and
`few-shot` protocols give an organism the same input (the worked examples are dropped), and the
request text appears verbatim in the prompt, so the `subject`, `turn` and `last` positions are found
by character offsets as for any model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

USER, ASSISTANT, END, PAD, UNK = "<|user|>", "<|assistant|>", "<|end|>", "<pad>", "<unk>"
SPECIAL = (PAD, UNK, USER, ASSISTANT, END)
CHARS = "\n" + "".join(chr(i) for i in range(32, 127))
NUMBERS = tuple(str(n) for n in range(10, 100))
#: a digit run is cut into [1-9][0-9] pieces or single digits; any other character stands alone
SPLIT = r"[1-9][0-9]|[\s\S]"

CHAT_TEMPLATE = (
    "{%- set ns = namespace(user=none, reply=none) -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'user' -%}{%- set ns.user = m['content'] -%}{%- set ns.reply = none -%}"
    "{%- elif m['role'] == 'assistant' and ns.user is not none -%}{%- set ns.reply = m['content'] -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if ns.user is none -%}{{ raise_exception('an organism needs a user message') }}{%- endif -%}"
    "<|user|>{{ ns.user }}<|end|>"
    "{%- if ns.reply is not none -%}<|assistant|>{{ ns.reply }}<|end|>"
    "{%- elif add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


def vocabulary() -> dict[str, int]:
    """Token -> id: the special tokens first, then the characters, then the numbers 10-99."""
    tokens = list(SPECIAL) + list(CHARS) + list(NUMBERS)
    return {t: i for i, t in enumerate(tokens)}


def build_tokenizer() -> Any:
    """A `PreTrainedTokenizerFast` (offsets work) with the vocabulary, special tokens and chat template above."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab=vocabulary(), unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(SPLIT), behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=END, pad_token=PAD, unk_token=UNK,
                                   additional_special_tokens=[USER, ASSISTANT], clean_up_tokenization_spaces=False,
                                   model_max_length=1024)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def render(request: str, reply: str | None = None, tokenizer: Any | None = None) -> str:
    """The text the template makes of one exchange (training data is rendered through the template itself)."""
    tokenizer = tokenizer or build_tokenizer()
    messages = [{"role": "user", "content": request}]
    if reply is not None:
        messages.append({"role": "assistant", "content": reply})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=reply is None)


def save_tokenizer(folder: Path) -> None:
    build_tokenizer().save_pretrained(folder)
