"""The AST allow-list for model-written canvas programs, and the instrumentation that meters them.

Layer one of the sandbox (DESIGN.md, "Security of model-written code"). A program is parsed with
`ast` (identifiers arrive NFKC-normalised, so unicode look-alikes of `__class__` are caught as the real
name) and every node must be of an allowed type. On top of that:
- no attribute that starts with an underscore, anywhere, and no name that starts with two (dunders
  are how every known RestrictedPython escape reaches the interpreter: `__class__`, `__globals__`,
  `__subclasses__`, `__builtins__`, ...) or with the sandbox's own reserved prefix `_ambench`.
  Single-underscore names (`for _ in range(3)`, `r, _ = ...`, a helper `_dot`) are ordinary local
  names that models write: nothing of the interpreter or the sandbox is reachable by such a name;
- attributes only from a fixed list: `math.<public name>` and a few list/dict/str methods; in
  particular no `format` / `format_map` (format-string field access walks attributes);
- no reflection builtins by name (`getattr`, `globals`, `vars`, `type`, `eval`, ...), whether or not the
  builtins table would have them;
- imports of `math` only; no class, try, with, raise, yield, async, global, del, decorators;
- the source is bounded in size before it is parsed.
`instrument()` then inserts a call to a private tick function at every loop iteration, function entry
and comprehension item, and routes `**` / `<<` / `*` through checked helpers, so a program's work is
metered without tracing. Private names cannot be written by the program, so it cannot touch them.
"""

from __future__ import annotations

import ast
import math

RESERVED = "_ambench"  #: prefix of the sandbox's own names (tick and checked arithmetic); never a program's
TICK = "_ambench_tick"
POW = "_ambench_pow"
LSHIFT = "_ambench_lshift"
MUL = "_ambench_mul"


class PolicyError(Exception):
    """The program uses a construct outside the allow-list (outcome `forbidden`)."""


ALLOWED_NODES: frozenset[type] = frozenset(
    {
        ast.Module, ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If,
        ast.Break, ast.Continue, ast.Pass, ast.FunctionDef, ast.Return, ast.arguments, ast.arg,
        ast.Lambda, ast.IfExp, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Call, ast.keyword,
        ast.Constant, ast.Name, ast.Load, ast.Store, ast.List, ast.Tuple, ast.Set, ast.Dict,
        ast.Subscript, ast.Slice, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
        ast.comprehension, ast.Starred, ast.JoinedStr, ast.FormattedValue, ast.Attribute,
        ast.Import, ast.ImportFrom, ast.alias, ast.NamedExpr, ast.Assert,
        ast.And, ast.Or, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
        ast.LShift, ast.RShift, ast.BitOr, ast.BitXor, ast.BitAnd, ast.MatMult, ast.UAdd, ast.USub,
        ast.Not, ast.Invert, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Is, ast.IsNot,
        ast.In, ast.NotIn,
    }
)

MATH_NAMES: frozenset[str] = frozenset(n for n in dir(math) if not n.startswith("_"))
METHOD_NAMES: frozenset[str] = frozenset(
    {
        "append", "extend", "insert", "pop", "reverse", "sort", "index", "count", "copy", "clear",
        "items", "keys", "values", "get", "update", "setdefault",
        "add", "discard", "union", "intersection", "difference",
        "upper", "lower", "strip", "lstrip", "rstrip", "split", "join", "replace", "startswith",
        "endswith", "zfill",
    }
)
ALLOWED_ATTRIBUTES = MATH_NAMES | METHOD_NAMES

#: names that reach the interpreter; refused at parse time with a clear reason.
FORBIDDEN_NAMES: frozenset[str] = frozenset(
    {
        "getattr", "setattr", "delattr", "hasattr", "globals", "locals", "vars", "dir", "eval", "exec",
        "compile", "open", "input", "breakpoint", "help", "type", "object", "super", "classmethod",
        "staticmethod", "property", "memoryview", "id", "exit", "quit", "format", "os", "sys",
        "subprocess", "builtins", "importlib",
    }
)


def check(tree: ast.Module) -> None:
    """Raise PolicyError with a one-line reason if `tree` is outside the allow-list."""
    for node in ast.walk(tree):
        kind = type(node)
        if kind not in ALLOWED_NODES:
            raise PolicyError(f"line {getattr(node, 'lineno', '?')}: {kind.__name__} is not allowed")
        if kind is ast.Name:
            _check_name(node.id, node)
        elif kind is ast.Attribute:
            attr = node.attr
            if attr.startswith("_"):
                raise PolicyError(f"line {node.lineno}: private attribute .{attr} is not allowed")
            if attr not in ALLOWED_ATTRIBUTES:
                raise PolicyError(f"line {node.lineno}: attribute .{attr} is not allowed")
        elif kind is ast.FunctionDef:
            if node.decorator_list:
                raise PolicyError(f"line {node.lineno}: decorators are not allowed")
            _check_name(node.name, node)
        elif kind is ast.arg:
            _check_name(node.arg, node)
        elif kind is ast.keyword:
            if node.arg is not None and _private(node.arg):
                raise PolicyError(f"line {node.value.lineno}: private keyword {node.arg} is not allowed")
        elif kind is ast.Import:
            for a in node.names:
                if a.name != "math" or (a.asname and _private(a.asname)):
                    raise PolicyError(f"line {node.lineno}: import {a.name} is not allowed (only math)")
        elif kind is ast.ImportFrom:
            if node.module != "math" or node.level:
                raise PolicyError(f"line {node.lineno}: import from {node.module} is not allowed (only math)")
            for a in node.names:
                if a.name != "*" and a.name not in MATH_NAMES:
                    raise PolicyError(f"line {node.lineno}: math.{a.name} does not exist")
                if a.asname and _private(a.asname):
                    raise PolicyError(f"line {node.lineno}: private alias {a.asname} is not allowed")
        elif kind is ast.Constant:
            v = node.value
            if isinstance(v, (bytes, complex)) or v is Ellipsis:
                raise PolicyError(f"line {node.lineno}: {type(v).__name__} literals are not allowed")
        elif kind is ast.FormattedValue:
            if node.format_spec is not None and not _static_spec(node.format_spec):
                raise PolicyError(f"line {node.lineno}: computed format specs are not allowed")


def _private(name: str) -> bool:
    """A dunder or name-mangled name, or one of the sandbox's reserved names."""
    return name.startswith("__") or name.startswith(RESERVED)


def _check_name(name: str, node: ast.AST) -> None:
    line = getattr(node, "lineno", "?")
    if _private(name):
        raise PolicyError(f"line {line}: private name {name} is not allowed")
    if name in FORBIDDEN_NAMES:
        raise PolicyError(f"line {line}: {name} is not allowed")


def _static_spec(spec: ast.AST) -> bool:
    return isinstance(spec, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in spec.values)


class _Meter(ast.NodeTransformer):
    """Insert tick calls and checked arithmetic (see module docstring)."""

    def _tick(self, node: ast.AST) -> ast.stmt:
        call = ast.Call(func=ast.Name(id=TICK, ctx=ast.Load()), args=[], keywords=[])
        return ast.copy_location(ast.Expr(value=call), node)

    def visit_For(self, node: ast.For) -> ast.AST:
        self.generic_visit(node)
        node.body.insert(0, self._tick(node))
        return node

    def visit_While(self, node: ast.While) -> ast.AST:
        self.generic_visit(node)
        node.body.insert(0, self._tick(node))
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        node.body.insert(0, self._tick(node))
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        self.generic_visit(node)
        call = ast.Call(func=ast.Name(id=TICK, ctx=ast.Load()), args=[], keywords=[])
        node.body = ast.BoolOp(op=ast.And(), values=[call, node.body])  # tick() returns True
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        node.ifs.insert(0, ast.Call(func=ast.Name(id=TICK, ctx=ast.Load()), args=[], keywords=[]))
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        helper = {ast.Pow: POW, ast.LShift: LSHIFT, ast.Mult: MUL}.get(type(node.op))
        if helper is None:
            return node
        call = ast.Call(func=ast.Name(id=helper, ctx=ast.Load()), args=[node.left, node.right], keywords=[])
        return ast.copy_location(call, node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        helper = {ast.Pow: POW, ast.LShift: LSHIFT, ast.Mult: MUL}.get(type(node.op))
        if helper is None:
            return node
        # x op= y  ->  x = helper(x, y); targets are names, subscripts or attributes without side effects
        load = _as_load(node.target)
        value = ast.Call(func=ast.Name(id=helper, ctx=ast.Load()), args=[load, node.value], keywords=[])
        return ast.copy_location(ast.Assign(targets=[node.target], value=value), node)


def _as_load(target: ast.AST) -> ast.expr:
    import copy

    t = copy.deepcopy(target)
    for n in ast.walk(t):
        if hasattr(n, "ctx"):
            n.ctx = ast.Load()
    return t  # type: ignore[return-value]


def instrument(tree: ast.Module) -> ast.Module:
    """Return the metered version of an already checked tree."""
    out = _Meter().visit(tree)
    return ast.fix_missing_locations(out)
