"""Prompt protocols: what text a model sees, and the three token positions that capture reads.

A prompt item is data: `PromptItem(id, task, text, subject)`. `text` is the user's request and
`subject` is the span of it that names what to draw (for a layout prompt the phrase, for a
translation prompt the geometric description). A *protocol* turns an item into model input:

- `zero-shot`: the canvas system prompt (our own words for the paper's appendix A.2.1: code only, an
  explicit background, coordinates bounded by the grid, no imports or prints, the palette and the
  orientation) plus the request, through the model's chat template;
- `few-shot`: the same with k worked examples as earlier user/assistant turns. The examples are
  written for this module and are not in any evaluated prompt set (a test checks);
- `completion`: for base models without a chat template. The system text, the examples (k may be 0)
  and the request are laid out as a document that ends inside an open code fence, so the model's
  continuation is the program.

`protocol="auto"` picks `zero-shot` for a model with a chat template and `completion` otherwise.

The canvas medium (`Protocol.medium`, a `bench.canvas.medium.Medium`: `v1` the paper's, `v1-48` the
48-cell grid, `outline` with outline primitives) sets the grid and the primitive list the system
prompt states and picks each example's program for that medium; the requests are the same in every
medium. Translation prompts state a 24x24 grid, so they are refused on a medium of another grid.

Token positions (indices into the prompt's tokens, counted from 0), defined on character offsets so
they mean the same thing for every tokenizer:
- `subject`: the last token that starts before the end of the subject span;
- `turn`: the last token that starts before the end of the user's request text (so the end of the
  user turn, before any end-of-turn marker the template adds);
- `last`: the final prompt token, the one whose next-token prediction starts the program.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from bench.canvas.medium import V1, Medium

PROTOCOLS = ("auto", "zero-shot", "few-shot", "completion")
#: the most a prompt's text may hold, checked when the prompt is made (before any tokenizer, model or folder): a
#: 10 MB prompt once grew `generate` to 24 GB and the kernel's OOM killer (issue 42). 100 kB is ~25k tokens, more
#: than the embedded models' contexts; each model's own context is checked too (`Runtime`, `ambench run`)
MAX_PROMPT_BYTES = 100_000
#: the largest prompt file read (a prompt a line: 2,000 prompts at the cap)
MAX_PROMPT_FILE_BYTES = 200_000_000
POSITIONS = ("subject", "turn", "last")
TASKS = ("translation", "layout")


class PromptError(ValueError):
    """A prompt file or prompt item that cannot be used."""


@dataclass(frozen=True)
class PromptItem:
    id: str
    task: str
    text: str
    subject: str = ""  #: a substring of `text`; empty means the whole text
    #: the prompt's family (layout: its subcategory; a prompt file's optional `group` field; translation: a reference's
    #: optional `meta.group`); prompts of one group share wording and layout, so the probe stage's folds, permutations
    #: and intervals keep them together (docs/probes.md). Empty: the prompt is its own group.
    group: str = ""

    def __post_init__(self) -> None:
        if not self.id or not isinstance(self.id, str):
            raise PromptError("a prompt needs a non-empty string id")
        if self.task not in TASKS:
            raise PromptError(f"prompt {self.id}: task {self.task!r} is not one of {', '.join(TASKS)}")
        if not self.text.strip():
            raise PromptError(f"prompt {self.id}: empty text")
        size = len(self.text.encode("utf-8", "surrogatepass"))
        if size > MAX_PROMPT_BYTES:
            raise PromptError(f"prompt {self.id}: its text is {size:,} bytes; a prompt is at most {MAX_PROMPT_BYTES:,} bytes "
                              "(a drawing prompt is under 2 kB; no model's context holds more)")
        if self.subject and self.subject not in self.text:
            raise PromptError(f"prompt {self.id}: subject {self.subject!r} is not part of its text")

    @property
    def subject_span(self) -> tuple[int, int]:
        if not self.subject:
            return 0, len(self.text)
        start = self.text.index(self.subject)
        return start, start + len(self.subject)


def system_prompt(medium: Medium = V1) -> str:
    n = medium.grid
    names = ", ".join(medium.palette.colors)
    calls = "\n".join(f"- {p.doc}" for p in medium.vocabulary.values())
    return (
        f"You write short Python programs that draw on a {n}x{n} canvas of square cells. "
        f"Rows are numbered 0 to {n - 1} from top to bottom and columns 0 to {n - 1} from left to right; "
        f"every position is (row, column) and (0, 0) is the top-left cell.\n"
        f"These functions are already defined; call them directly:\n{calls}\n"
        f"A color is one of the names {names}, or a '#rrggbb' string, or an (r, g, b) tuple of 0-255 integers.\n"
        "Rules: start by filling the background explicitly with fill(...). Keep every coordinate inside "
        f"the grid (0 to {n - 1}). Later calls paint over earlier ones. You may use arithmetic, loops, "
        "helper functions and the math module, but no other imports, no print, no files. "
        "Answer with the code only, in one ```python code block, and keep it short."
    )


@dataclass(frozen=True)
class Example:
    task: str
    text: str
    code: str  #: the program for the paper's canvas medium (v1)
    svg: str = ""  #: the same picture as SVG (layout examples), for the SVG medium
    #: the same picture for other canvas media, as (medium name, program) pairs: `v1-48` with every
    #: coordinate doubled (same picture, finer grid), `outline` with outline primitives where they help
    programs: tuple[tuple[str, str], ...] = ()

    def program(self, medium: str = "v1") -> str | None:
        """The example's program for a canvas medium (None when it has none for that medium)."""
        return self.code if medium == "v1" else dict(self.programs).get(medium)


#: Worked examples for few-shot and completion protocols. None of them is (or paraphrases) an
#: evaluated prompt: tests check these texts against the translation references and the layout set.
#: Every medium sees the same requests; only the programs differ (a test runs each program in its
#: medium). The translation examples state a 24x24 grid, so the 48-cell medium has only the layout ones.
EXAMPLES: tuple[Example, ...] = (
    Example(
        "layout", "Draw a red ball resting on green grass under a light blue sky.",
        "fill('light_blue')\nrect(18, 0, 6, 24, 'green')\ncircle(14, 12, 4, 'red')",
        '<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512" viewBox="0 0 512 512">\n'
        '<rect width="512" height="512" fill="#add8e6"/>\n<rect y="384" width="512" height="128" fill="#008000"/>\n'
        '<circle cx="256" cy="309" r="85" fill="#ff0000"/>\n</svg>',
        (("v1-48", "fill('light_blue')\nrect(36, 0, 12, 48, 'green')\ncircle(28, 24, 8, 'red')"),
         ("outline", "fill('light_blue')\nrect(18, 0, 6, 24, 'green')\ncircle(14, 12, 4, 'red')\n"
                     "circle_outline(14, 12, 4, 'dark_red')")),
    ),
    Example(
        "layout", "Draw a yellow lamp post standing on the left with a dark night around it.",
        "fill('navy')\nrect(6, 4, 18, 2, 'gray')\ncircle(5, 5, 3, 'yellow')\nrect(22, 0, 2, 24, 'dark_gray')",
        '<svg xmlns="http://www.w3.org/2000/svg" width="512" height="512" viewBox="0 0 512 512">\n'
        '<rect width="512" height="512" fill="#000080"/>\n<rect x="85" y="128" width="43" height="384" fill="#808080"/>\n'
        '<circle cx="107" cy="107" r="64" fill="#ffff00"/>\n<rect y="469" width="512" height="43" fill="#404040"/>\n</svg>',
        (("v1-48", "fill('navy')\nrect(12, 8, 36, 4, 'gray')\ncircle(10, 10, 6, 'yellow')\nrect(44, 0, 4, 48, 'dark_gray')"),
         ("outline", "fill('navy')\nrect(6, 4, 18, 2, 'gray')\ncircle(5, 5, 3, 'yellow')\ncircle_outline(5, 5, 5, 'orange')\n"
                     "rect_outline(22, 0, 2, 24, 'dark_gray')")),
    ),
    Example(
        "translation",
        "Draw on a 24x24 grid of cells. Rows are numbered 0-23 from top to bottom and columns 0-23 from left "
        "to right; a position is written (row, column). First fill the whole canvas with 'white'. Then draw "
        "these shapes in this order (later shapes cover earlier ones): 1. a filled 'blue' rectangle covering "
        "rows 2-9 and columns 13-21. 2. a '#804000' line one cell thick from cell (20, 1) to cell (20, 17).",
        "fill('white')\nrect(2, 13, 8, 9, 'blue')\nline(20, 1, 20, 17, '#804000')",
        programs=(("outline", "fill('white')\nrect(2, 13, 8, 9, 'blue')\nline(20, 1, 20, 17, '#804000')"),),
    ),
    Example(
        "translation",
        "Draw on a 24x24 grid of cells. Rows are numbered 0-23 from top to bottom and columns 0-23 from left "
        "to right; a position is written (row, column). First fill the whole canvas with 'black'. Then draw "
        "these shapes in this order (later shapes cover earlier ones): 1. 3 'orange' vertical stripes, each 2 "
        "columns wide and covering rows 1-22; the first covers columns 3-4 and each next one starts 7 columns "
        "further right.",
        "fill('black')\nfor i in range(3):\n    rect(1, 3 + 7 * i, 22, 2, 'orange')",
        programs=(("outline", "fill('black')\nfor i in range(3):\n    rect(1, 3 + 7 * i, 22, 2, 'orange')"),),
    ),
)


def examples_for(task: str, k: int, output: str = "canvas", medium: str = "v1") -> list[Example]:
    """k examples, those of the same task first, in a fixed order (deterministic); SVG: layout examples
    only; another canvas medium: the examples that have a program for it."""
    if output == "svg":
        pool = [e for e in EXAMPLES if e.svg]
    else:
        pool = [e for e in EXAMPLES if e.program(medium) is not None]
    ordered = [e for e in pool if e.task == task] + [e for e in pool if e.task != task]
    if k > len(ordered):
        where = "" if output == "svg" or medium == "v1" else f" for medium {medium}"
        raise PromptError(f"only {len(ordered)} worked examples exist{where}; asked for {k}")
    return ordered[:k]


LANG = {"canvas": "python", "svg": "svg"}


def fence(code: str, medium: str = "canvas") -> str:
    return f"```{LANG[medium]}\n{code}\n```"


@dataclass(frozen=True)
class Protocol:
    name: str = "auto"
    shots: int = 2  #: examples for few-shot and completion
    medium: Medium = field(default=V1, compare=False)
    output: str = "canvas"  #: what the model writes: canvas code (v1 medium) or raw SVG (Exp. 2)

    def __post_init__(self) -> None:
        if self.name not in PROTOCOLS:
            raise PromptError(f"unknown protocol {self.name!r}: use one of {', '.join(PROTOCOLS)}")
        if self.output not in LANG:
            raise PromptError(f"unknown output medium {self.output!r}: use canvas or svg")
        if self.shots < 0:
            raise PromptError("shots must be >= 0")
        if self.output == "svg" and self.medium.name != V1.name:
            raise PromptError(f"the SVG output has no canvas medium: give medium v1, not {self.medium.name}")

    def resolve(self, has_chat_template: bool) -> "Protocol":
        name = self.name
        if name == "auto":
            name = "zero-shot" if has_chat_template else "completion"
        if name in ("zero-shot", "few-shot") and not has_chat_template:
            raise PromptError(f"protocol {name!r} needs a chat template and this model has none: use 'completion'")
        return Protocol(name, self.shots if name != "zero-shot" else 0, self.medium, self.output)

    @property
    def label(self) -> str:
        """The protocol as recorded in rows: `zero-shot`, `few-shot-2`, `completion-0` (the output
        medium is a separate field, see `medium_name`)."""
        return self.name if self.name == "zero-shot" else f"{self.name}-{self.shots}"

    @property
    def medium_name(self) -> str:
        """What the model writes, as recorded in rows: the canvas medium's name (`v1`, ...) or `svg`."""
        return self.medium.name if self.output == "canvas" else self.output


@dataclass(frozen=True)
class BuiltPrompt:
    item_id: str
    protocol: str  #: resolved label, e.g. "zero-shot", "few-shot-2", "completion-2"
    text: str
    tokens: tuple[int, ...]
    positions: dict[str, int]
    open_fence: bool  #: the prompt ends inside a code fence (the first ``` the model writes closes it)
    opener: str = ""  #: the fence line the prompt ends with (prepend it to the answer to read the program)
    medium: str = "v1"  #: what the model is asked to write: a canvas medium's name or "svg"
    request: tuple[int, int] = (0, 0)  #: (start, end) character span in `text` of the user's request (the item's text)
    #: (start, end) character span in `text` of every token (what `positions` are computed from)
    offsets: tuple[tuple[int, int], ...] = ()

    def tokens_in(self, spans: Sequence[tuple[int, int]]) -> list[int]:
        """Indices of the prompt tokens that overlap any of these character spans of `text` (sorted, each once)."""
        return sorted({i for i, (a, b) in enumerate(self.offsets) if b > a and any(a < e and b > s for s, e in spans)})


def build_text(item: PromptItem, protocol: Protocol, tokenizer: Any) -> tuple[str, int, int, bool]:
    """The prompt text, the character offsets where the subject and the request end, open-fence flag."""
    out = protocol.output
    if out == "svg":
        from bench.svg.medium import SYSTEM_PROMPT as system
    else:
        system = system_prompt(protocol.medium)
    if out == "canvas" and item.task == "translation" and protocol.medium.grid != V1.grid:
        # a translation prompt states its geometry on the 24x24 grid (bench.translation.prompts)
        raise PromptError(f"prompt {item.id}: translation prompts state their geometry on a {V1.grid}x{V1.grid} grid; "
                          f"the {protocol.medium.grid}-cell medium {protocol.medium.name} is for the layout task")
    shots = examples_for(item.task, protocol.shots, out, protocol.medium.name) if protocol.shots else []
    if protocol.name in ("zero-shot", "few-shot"):
        messages = [{"role": "system", "content": system}]
        for ex in shots:
            messages += [{"role": "user", "content": ex.text},
                         {"role": "assistant", "content": fence(ex.svg if out == "svg" else ex.program(protocol.medium.name), out)}]
        messages.append({"role": "user", "content": item.text})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        at = text.rfind(item.text)
        if at < 0:
            raise PromptError(f"prompt {item.id}: the chat template changed the request text; cannot place positions")
        open_fence = False
    elif protocol.name == "completion":
        parts = [system, ""]
        for ex in shots:
            parts += [f"Request: {ex.text}", fence(ex.svg if out == "svg" else ex.program(protocol.medium.name), out), ""]
        head = "\n".join(parts) + "Request: "
        text = head + item.text + f"\n```{LANG[out]}\n"
        at = len(head)
        open_fence = True
    else:  # pragma: no cover - resolve() runs first
        raise PromptError(f"unresolved protocol {protocol.name!r}")
    s0, s1 = item.subject_span
    return text, at + s1, at + len(item.text), open_fence


def _last_token_before(offsets: Sequence[tuple[int, int]], end: int) -> int:
    best = -1
    for i, (a, b) in enumerate(offsets):
        if a < end and b > a:
            best = i
    if best < 0:
        raise PromptError(f"no token starts before character {end}")
    return best


def build(item: PromptItem, protocol: Protocol, tokenizer: Any, chat: bool | None = None) -> BuiltPrompt:
    """Render `item` for `tokenizer` under `protocol`, tokenise it and locate the three positions."""
    if chat is None:
        chat = bool(getattr(tokenizer, "chat_template", None))
    proto = protocol.resolve(chat)
    text, subject_end, turn_end, open_fence = build_text(item, proto, tokenizer)
    # chat templates carry their own BOS; plain documents get the tokenizer's special tokens
    enc = tokenizer(text, add_special_tokens=proto.name == "completion", return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    positions = {
        "subject": _last_token_before(offsets, subject_end),
        "turn": _last_token_before(offsets, turn_end),
        "last": len(ids) - 1,
    }
    opener = f"```{LANG[proto.output]}\n" if open_fence else ""
    return BuiltPrompt(item.id, proto.label, text, tuple(ids), positions, open_fence, opener, proto.medium_name,
                       (turn_end - len(item.text), turn_end), tuple(offsets))


# --------------------------------------------------------------------------- prompt files


def load_prompts(path: str | Path, task: str | None = None) -> list[PromptItem]:
    """Read a JSONL prompt file: one object per line with `id`, `text`, optional `task`, `subject` and `group` (the
    prompt's family: prompts of one group are kept together by the probe stage's folds and permutations)."""
    p = Path(path)
    if p.is_dir():
        raise PromptError(f"prompt file {p} is a folder: give a JSONL file (one prompt a line)")
    if not p.is_file():
        raise PromptError(f"prompt file {p} does not exist")
    try:
        size = p.stat().st_size
    except OSError as e:
        raise PromptError(f"cannot read prompt file {p}: {e.strerror}") from None
    if size > MAX_PROMPT_FILE_BYTES:
        raise PromptError(f"prompt file {p} is {size:,} bytes; prompt files are at most {MAX_PROMPT_FILE_BYTES:,} bytes")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise PromptError(f"{p}: not UTF-8 text (byte {e.start}); save the prompt file as UTF-8") from None
    except OSError as e:
        raise PromptError(f"cannot read prompt file {p}: {e.strerror}") from None
    items: list[PromptItem] = []
    seen: set[tuple[str, str]] = set()
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines: U+2028 inside JSON strings
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise PromptError(f"{p}:{n}: not JSON ({e.msg})") from None
        if not isinstance(row, dict) or "id" not in row or "text" not in row:
            raise PromptError(f"{p}:{n}: each line needs at least 'id' and 'text'")
        for field_name in ("id", "text", "task", "subject", "group"):
            v = row.get(field_name)
            if field_name in row and not isinstance(v, str):
                raise PromptError(f"{p}:{n}: '{field_name}' must be a string, not {json.dumps(v)[:40]}")
            if isinstance(v, str):
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    raise PromptError(f"{p}:{n}: '{field_name}' holds a lone surrogate (\\ud800-\\udfff escape); fix the file") from None
        row_task = row.get("task", task)
        if row_task is None:
            raise PromptError(f"{p}:{n}: no 'task' in the line and none given")
        if task is not None and row_task != task:
            raise PromptError(f"{p}:{n}: task {row_task!r} but {task!r} was asked for")
        try:
            item = PromptItem(row["id"], row_task, row["text"], row.get("subject", ""), row.get("group", ""))
        except PromptError as e:
            raise PromptError(f"{p}:{n}: {e}") from None
        if (item.task, item.id) in seen:
            raise PromptError(f"{p}:{n}: duplicate {item.task} id {item.id!r}")
        seen.add((item.task, item.id))
        items.append(item)
    if not items:
        raise PromptError(f"{p}: no prompts")
    return items


def translation_items(ids: Iterable[str] | None = None) -> list[PromptItem]:
    """The translation prompts, built from the frozen references (the subject is the shape list)."""
    from bench.translation.prompts import write_prompt
    from bench.translation.references import load_references

    refs = load_references()
    wanted = None if ids is None else set(ids)
    out = []
    for ref in refs:
        if wanted is not None and ref.id not in wanted:
            continue
        text = write_prompt(ref)
        marker = "(later shapes cover earlier ones):"
        subject = text[text.index(marker) + len(marker):].strip() if marker in text else ""
        out.append(PromptItem(ref.id, "translation", text, subject, str(ref.meta.get("group", ""))))
    return out


def layout_items(ids: Iterable[str] | None = None) -> list[PromptItem]:
    """The 150 layout prompts (bench/layout/data/prompts.jsonl) as prompt items."""
    from bench.layout.prompts import load_layout_prompts

    wanted = None if ids is None else set(ids)
    return [PromptItem(p.id, "layout", p.text, p.subject, p.subcategory) for p in load_layout_prompts()
            if wanted is None or p.id in wanted]


def items_by_id() -> dict[str, PromptItem]:
    """Every built-in prompt (the 150 layout prompts and the translation prompts of all references) by id."""
    return {i.id: i for i in layout_items() + translation_items()}


def write_prompts(items: Sequence[PromptItem], path: str | Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for it in items:
            row = {"id": it.id, "task": it.task, "text": it.text, "subject": it.subject}
            if it.group:
                row["group"] = it.group
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
