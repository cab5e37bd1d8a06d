"""Coordinate splicing: find a generation's drawing statements and rewrite only their numbers.

`statements(text, vocabulary)` finds the top-level primitive calls of the program inside a model's
answer (the code of the first fenced block, or the whole text when it has no fence) with Python's
`tokenize`, and for each records its character span in `text` and the numeric literals of its position
arguments. Which arguments are positions is what each `bench.canvas.medium.Primitive` declares
(`positions`, or every point of a `takes_points` primitive): for the v1 vocabulary the row/column of
`rect`, `circle`, `set_pixel`, both ends of `line` and every vertex of `poly`. A new primitive needs no
edit here. A statement whose position arguments are not all plain non-negative integer literals (an
expression, a variable, a negative or float number) is not spliceable and is marked so.

`move(text, stmt, dr, dc)` returns `text` with those literals replaced by value + dr (rows) and
value + dc (columns), and nothing else changed: `check_splice` (also run inside `move`) asserts that
the result equals the original once every digit is removed from both.

`cut_arms(...)` builds the four arms of one cut after statement i:
- `null-empty`: the text up to the start of statement i (the statement is gone);
- `null-asis`: the text up to the end of statement i's line, unchanged;
- `moved-used`: statement i displaced so that at least half of its cells land on cells the model's
  own final picture paints (non-background), the smallest such displacement of length >= 2 cells;
- `moved-unused`: displaced so that at most 10% of its cells land on painted cells, the smallest
  such displacement of length >= 2.
Displacements keep the whole shape on the canvas, are searched over -12..12 in rows and columns,
ties broken by (length, dr, dc); every arm records (dr, dc), its length and its overlap share.
"""

from __future__ import annotations

import io
import math
import re
import tokenize
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from bench.canvas.medium import V1_VOCABULARY, Primitive

_FENCE = re.compile(r"```[^\n]*\n")


@dataclass(frozen=True)
class MoveRule:
    """A moved arm: the smallest displacement of at least `min_distance` cells (keeping the whole shape on
    the canvas) whose share of cells landing on the final picture's painted cells lies in
    [min_overlap, max_overlap]. Adding an arm is adding a rule to MOVES (the stages, tables, plots, merges
    and the CLI read the arms from here)."""

    name: str
    min_overlap: float = 0.0
    max_overlap: float = 1.0
    min_distance: float = 2.0

    def accepts(self, distance: float, overlap: float) -> bool:
        return distance >= self.min_distance and self.min_overlap <= overlap <= self.max_overlap


#: the paper's two moved arms: onto cells the model's own picture paints (~4 px in the paper), and off them (~9 px)
MOVES = (MoveRule("moved-used", min_overlap=0.5), MoveRule("moved-unused", max_overlap=0.1))
ARMS = ("null-empty", "null-asis") + tuple(m.name for m in MOVES)


class SpliceError(AssertionError):
    """A splice that would change more than the numbers of one statement."""


@dataclass
class Literal:
    start: int
    end: int
    value: int
    axis: str  #: "r" or "c"


@dataclass
class Statement:
    name: str
    start: int  #: offset of the call's first character in the answer text
    end: int  #: offset just after the closing parenthesis
    line_end: int  #: offset just after the statement's line (its newline included when there is one)
    literals: list[Literal] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)  #: literal values of all arguments (None when not a literal)
    spliceable: bool = False
    comment: bool = False  #: a comment follows the call on its line (it stays byte-identical when the call moves)
    code_after: bool = False  #: the program has more code after this statement's line (set by `statements`)
    #: what the call draws, from the vocabulary `statements` was given (its declared positions and raster)
    primitive: Primitive | None = field(default=None, repr=False, compare=False)


def code_region(text: str) -> tuple[int, int]:
    """(start, end) of the program inside the answer: the first fenced block's body, else all of it."""
    m = _FENCE.search(text)
    if not m:
        return 0, len(text)
    end = text.find("```", m.end())
    return m.end(), (len(text) if end < 0 else end)


def _offsets(code: str) -> list[int]:
    """Start offset of each line as `tokenize` counts lines: split at "\n" only. (`str.splitlines` also
    splits at form feeds, U+2028 and other separators that Python source treats as ordinary characters,
    which once shifted every later offset and made the splice check fail.)"""
    starts, pos = [], 0
    for line in code.split("\n"):
        starts.append(pos)
        pos += len(line) + 1
    starts.append(pos)
    return starts


def statements(text: str, vocabulary: Mapping[str, Primitive] = V1_VOCABULARY) -> list[Statement]:
    """The top-level calls of `vocabulary`'s primitives in the answer's program, in source order."""
    start, end = code_region(text)
    code = text[start:end]
    line_starts = _offsets(code)

    def off(rc: tuple[int, int]) -> int:
        return start + line_starts[rc[0] - 1] + rc[1]

    toks = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            toks.append(t)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # a truncated program: keep the tokens read so far
    out: list[Statement] = []
    last_code_line = 0  # the last line that holds a token of code (not a comment or blank)
    for t in toks:
        if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT,
                          tokenize.ENDMARKER):
            last_code_line = max(last_code_line, t.end[0])
    i = 0
    at_line_start = True
    depth_indent = 0
    while i < len(toks):
        t = toks[i]
        if t.type == tokenize.INDENT:
            depth_indent += 1
        elif t.type == tokenize.DEDENT:
            depth_indent -= 1
        if t.type in (tokenize.NEWLINE, tokenize.NL):
            at_line_start = True
            i += 1
            continue
        if t.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT):
            i += 1
            continue
        if at_line_start and depth_indent == 0 and t.type == tokenize.NAME and t.string in vocabulary \
                and i + 1 < len(toks) and toks[i + 1].string == "(":
            stmt, i = _parse_call(toks, i, off, text, vocabulary[t.string])
            if stmt is not None:
                close_line = toks[i - 1].end[0]
                stmt.comment = any(t.type == tokenize.COMMENT and t.start[0] == close_line for t in toks[i: i + 3])
                stmt.code_after = last_code_line > close_line
                out.append(stmt)
            at_line_start = False
            continue
        at_line_start = False
        i += 1
    return out


def _parse_call(toks: list, i: int, off: Any, text: str, prim: Primitive) -> tuple[Statement | None, int]:
    name = toks[i].string
    depth, j = 0, i + 1
    args: list[list] = [[]]
    while j < len(toks):
        t = toks[j]
        if t.string in "([{" and t.type == tokenize.OP:
            depth += 1
            if depth > 1:
                args[-1].append(t)
        elif t.string in ")]}" and t.type == tokenize.OP:
            depth -= 1
            if depth == 0:
                break
            args[-1].append(t)
        elif t.string == "," and depth == 1:
            args.append([])
        elif t.type not in (tokenize.NL, tokenize.COMMENT):
            args[-1].append(t)
        j += 1
    if j >= len(toks):
        return None, j  # unclosed call (truncated program)
    close = toks[j]
    stmt_end = off(close.end)
    nl = text.find("\n", stmt_end)
    line_end = len(text) if nl < 0 else nl + 1
    stmt = Statement(name, off(toks[i].start), stmt_end, line_end, primitive=prim)
    if args and not args[-1]:
        args.pop()
    stmt.args = [int(a[0].string) if len(a) == 1 and a[0].type == tokenize.NUMBER and a[0].string.isdigit() else None
                 for a in args]
    lits: list[Literal] = []
    ok = True
    if prim.positions:
        for ri, ci in prim.positions:
            for idx, axis in ((ri, "r"), (ci, "c")):
                a = args[idx] if idx < len(args) else []
                if len(a) == 1 and a[0].type == tokenize.NUMBER and a[0].string.isdigit():
                    lits.append(Literal(off(a[0].start), off(a[0].end), int(a[0].string), axis))
                else:
                    ok = False
    elif prim.takes_points:
        nums = [t for t in args[0]] if args else []
        # [(r, c), (r, c), ...]: every NUMBER inside the first argument, alternating r and c
        numbers = [t for t in nums if t.type == tokenize.NUMBER]
        others = [t for t in nums if t.type not in (tokenize.NUMBER,) and t.string not in "[](),"]
        if numbers and not others and len(numbers) % 2 == 0 and all(t.string.isdigit() for t in numbers):
            for k, t in enumerate(numbers):
                lits.append(Literal(off(t.start), off(t.end), int(t.string), "r" if k % 2 == 0 else "c"))
        else:
            ok = False
    else:
        ok = False  # fill has no position
    stmt.literals = lits
    stmt.spliceable = ok and bool(lits)
    return stmt, j + 1


def strip_digits(s: str) -> str:
    return re.sub(r"[0-9]", "", s)


def check_splice(original: str, spliced: str) -> None:
    if strip_digits(original) != strip_digits(spliced):
        raise SpliceError("the splice changed more than digits")


def move(text: str, stmt: Statement, dr: int, dc: int) -> str:
    if not stmt.spliceable:
        raise ValueError(f"statement {stmt.name} at {stmt.start} is not spliceable")
    out, last = [], 0
    for lit in sorted(stmt.literals, key=lambda x: x.start):
        new = lit.value + (dr if lit.axis == "r" else dc)
        if new < 0:
            raise ValueError("a moved coordinate would be negative")
        out.append(text[last:lit.start])
        out.append(str(new))
        last = lit.end
    out.append(text[last:])
    spliced = "".join(out)
    check_splice(text, spliced)
    return spliced


def shape_mask(stmt: Statement, dr: int = 0, dc: int = 0, grid: int = 24) -> np.ndarray | None:
    """Cells the statement paints after a move (None when its arguments are not all literals)."""
    prim = stmt.primitive
    if prim is None:
        raise ValueError(f"statement {stmt.name} at {stmt.start} has no primitive: take statements from `statements()`")
    if prim.takes_points:
        pts = [lit.value + (dr if lit.axis == "r" else dc) for lit in stmt.literals]
        return prim.mask([(pts[k], pts[k + 1]) for k in range(0, len(pts), 2)], grid)
    vals = stmt.args[: len(prim.params)]
    if len(vals) < len(prim.params) or any(v is None for v in vals):
        return None
    return prim.mask(*prim.moved(vals, dr, dc), grid)


@dataclass
class Arm:
    arm: str
    prefix: str  #: the answer text up to the cut, after the splice
    dr: int = 0
    dc: int = 0
    distance: float = 0.0
    overlap: float | None = None  #: share of the moved shape's cells on the final picture's painted cells


def _fits(stmt: Statement, dr: int, dc: int, grid: int) -> bool:
    for lit in stmt.literals:
        v = lit.value + (dr if lit.axis == "r" else dc)
        if not 0 <= v < grid:
            return False
    return True


def choose_displacements(stmt: Statement, painted: np.ndarray, grid: int = 24, reach: int = 12,
                         moves: tuple[MoveRule, ...] = MOVES) -> dict[str, tuple[int, int, float, float] | None]:
    """(dr, dc, distance, overlap) of each moved arm (None when no displacement qualifies)."""
    base = shape_mask(stmt, 0, 0, grid) if stmt.spliceable else None
    if base is None or not base.any():
        return {m.name: None for m in moves}
    cands = []
    for dr in range(-reach, reach + 1):
        for dc in range(-reach, reach + 1):
            dist = math.hypot(dr, dc)
            if dist < min(m.min_distance for m in moves) or not _fits(stmt, dr, dc, grid):
                continue
            m = shape_mask(stmt, dr, dc, grid)
            if m is None or m.sum() < base.sum():  # clipped by the canvas edge: not the same shape
                continue
            cands.append((dist, dr, dc, float((m & painted).sum() / m.sum())))
    cands.sort()
    return {m.name: next(((dr, dc, d, o) for d, dr, dc, o in cands if m.accepts(d, o)), None) for m in moves}


def cut_arms(text: str, stmt: Statement, painted: np.ndarray, grid: int = 24) -> list[Arm]:
    """The arms of the cut after `stmt`: null-empty, null-asis and each of MOVES whose displacement qualifies."""
    line_start = text.rfind("\n", 0, stmt.start) + 1
    arms = [Arm("null-empty", text[:line_start]), Arm("null-asis", text[: stmt.line_end])]
    for name, got in choose_displacements(stmt, painted, grid).items():
        if got is None:
            continue
        dr, dc, dist, overlap = got
        spliced = move(text[: stmt.line_end], stmt, dr, dc)
        arms.append(Arm(name, spliced, dr, dc, round(dist, 6), round(overlap, 6)))
    return arms


def count_primitive_calls(code: str, vocabulary: Mapping[str, Primitive] = V1_VOCABULARY) -> int:
    """Primitive calls (a name of `vocabulary` followed by '(') in possibly truncated code, via tokenize."""
    n = 0
    prev = None
    try:
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            if prev is not None and prev.type == tokenize.NAME and prev.string in vocabulary and t.string == "(":
                n += 1
            if t.type not in (tokenize.NL, tokenize.COMMENT):
                prev = t
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return n


def continued_drawing(continuation: str, vocabulary: Mapping[str, Primitive] = V1_VOCABULARY) -> bool:
    """The continuation emits at least one more primitive call before its code block closes."""
    body = continuation.split("```", 1)[0]
    return count_primitive_calls(body, vocabulary) > 0
