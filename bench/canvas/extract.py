"""Turn model text into the program to run: fenced blocks, prose around code, trailing junk.

`extract_code` works on text only and never executes anything. It never drops a line of the model's
program silently: a fenced block is taken from its first non-blank line (a docstring or a decorator
stays, and the policy refuses what it must with a reason), and in unfenced text a decorator line reads
as code. Only prose around the program is dropped: before the first statement of unfenced text, and
trailing lines that do not read as code. `normalise` works on the parsed
tree: it unwraps `if __name__ == "__main__":` (a dunder the policy would refuse) and calls drawing
functions the model defined but never called (`def draw(): ...` with no `draw()`), passing None for
required parameters.
"""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_CODE_LANGS = {"", "python", "py", "python3", "py3"}
_CODE_LINE = re.compile(
    r"^(\s+\S"  # indented: inside a block
    r"|\s*(\#|[)\]}])"  # comment or closing bracket
    r"|\s*@[A-Za-z_]"  # a decorator: part of the program (the policy refuses it with a reason)
    r"|\s*(def|for|while|if|elif|else|return|import|from|pass|break|continue|with|try|except|finally|class|lambda|assert|global|nonlocal|del|raise|async|await|match|case|yield)\b"
    r"|\s*[A-Za-z_][\w.]*\s*(\(|\[|=(?!=)|[-+*/%]=)"  # call, subscript, assignment
    r"|\s*[A-Za-z_]\w*\s*(,\s*[A-Za-z_]\w*\s*)+=(?!=))"  # tuple assignment
)
MAX_TRIMS = 64


def looks_like_code(line: str) -> bool:
    """A line that reads as a statement: the pattern above, or a line that parses on its own and is
    more than a bare word or literal (prose like "Enjoy!" or "Note: it is red." does not parse)."""
    stripped = line.strip()
    if not stripped or stripped.startswith("```"):
        return False
    if _CODE_LINE.match(line):
        return True
    try:
        tree = ast.parse(stripped + ("\n    pass" if stripped.endswith(":") else ""))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    if len(tree.body) != 1:
        return False
    node = tree.body[0]
    return not (isinstance(node, ast.Expr) and isinstance(node.value, (ast.Name, ast.Constant)))


def extract_code(text: str) -> str | None:
    """The program in a model's answer, or None when there is nothing code-like in it."""
    found = extract_program(text)
    return None if found is None else found[0]


def extract_program(text: str) -> tuple[str, ast.Module | None] | None:
    """`extract_code`'s program and the tree finding its end parsed (None when that parse failed), so that
    the sandbox does not parse the same text twice (4% of a typical program's time)."""
    if not text or not text.strip():
        return None
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
    if blocks:
        code_blocks = [body for lang, body in blocks if lang in _CODE_LANGS]
        if not code_blocks:
            return None
        candidate = "\n".join(b.rstrip("\n") for b in code_blocks)
    else:
        candidate = text
    lines = candidate.replace("\r\n", "\n").split("\n")
    if blocks:  # a fenced block is the program as the model wrote it: no leading line is dropped
        start = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    else:  # prose before the code: start at the first line that reads as a statement
        start = next((i for i, ln in enumerate(lines) if looks_like_code(ln) and not ln[:1].isspace()), None)
    if start is None:
        return None
    lines = lines[start:]
    code = "\n".join(lines).strip("\n")
    return _trim_trailing_junk(code) if code.strip() else None


def _trim_trailing_junk(code: str) -> tuple[str, ast.Module | None]:
    """Drop prose after the last statement; a syntax error among code lines is left for the parser. The
    tree is that of exactly the returned text, or None."""
    lines = code.split("\n")
    tree = None
    for _ in range(MAX_TRIMS):
        try:
            tree = ast.parse("\n".join(lines))
            break
        except SyntaxError as e:
            bad = min(max((e.lineno or len(lines)) - 1, 0), len(lines) - 1)
            if bad == 0 or any(looks_like_code(t) for t in lines[bad:]):
                break  # a real syntax error inside the program
            lines = lines[:bad]
        except (ValueError, RecursionError, MemoryError):
            break
    text = "\n".join(lines)
    kept = text.rstrip()
    return kept, tree if kept == text else None


def _is_main_guard(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or node.orelse:
        return False
    t = node.test
    return (
        isinstance(t, ast.Compare)
        and isinstance(t.left, ast.Name)
        and t.left.id == "__name__"
        and len(t.ops) == 1
        and isinstance(t.ops[0], ast.Eq)
        and len(t.comparators) == 1
        and isinstance(t.comparators[0], ast.Constant)
        and t.comparators[0].value == "__main__"
    )


def normalise(tree: ast.Module) -> ast.Module:
    body: list[ast.stmt] = []
    for node in tree.body:
        body.extend(node.body if _is_main_guard(node) else [node])
    tree.body = body
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if not defs:  # most answers: nothing to call, and the parsed tree already has every location
        return tree
    # a called function's name is a Name read (Load) too: one walk finds both
    referenced = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for fn in defs:
        if fn.name in referenced:
            continue
        required = len(fn.args.posonlyargs) + len(fn.args.args) - len(fn.args.defaults)
        args = [ast.Constant(value=None) for _ in range(max(required, 0))]
        kw_required = [a for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is None]
        keywords = [ast.keyword(arg=a.arg, value=ast.Constant(value=None)) for a in kw_required]
        call = ast.Expr(value=ast.Call(func=ast.Name(id=fn.name, ctx=ast.Load()), args=args, keywords=keywords))
        tree.body.append(call)
    return ast.fix_missing_locations(tree)
