"""The AST allow-list for model-written canvas programs, and the names of the meter's helpers that the instrumenter inserts.

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
`bench.sandbox.instrument` then inserts the work-unit charges into a program that passed.
Private names cannot be written by the program, so it cannot touch them.
"""

from __future__ import annotations

import ast
import math

from bench.sandbox.meter import MAX_INT_BITS

RESERVED = "_ambench"  #: prefix of the sandbox's own names (the meter's helpers); never a program's
TICK = "_ambench_tick"  #: tick(units): one loop pass / call / comprehension item of that static size
BINOP = "_ambench_binop"  #: binop(op, a, b, inplace): every binary operator, charged and checked
UNARY = "_ambench_unary"  #: unary(op, x): -x, +x, ~x of a non-literal operand (a big int charged by its size)
CMP = "_ambench_cmp"  #: cmp(op, a, b): a single comparison, charged
SIZED = "_ambench_sized"  #: sized(x): x after charging its nested size
CHAIN = "_ambench_chain"  #: chain(ops, a, *thunks): a chained comparison inside a comprehension's iterable
NESTED = "_ambench_nested"  #: nested(gen): a generator expression just made, checked against the depth bound
SOURCED = "_ambench_sourced"  #: sourced(x): a generator expression's source, its nesting depth noted for nested()
UNPACKED = "_ambench_unpacked"  #: unpacked(x): x after charging the elements C makes out of it (*x, a, *b = x)
TEMP = "_ambench_c"  #: prefix of the temporaries of a chained comparison (each middle operand evaluated once)
RENDERED = "_ambench_rendered"  #: rendered(x): x after charging what rendering it as text costs (f-strings)
COPIED = "_ambench_copied"  #: copied(x): x after charging its length (slices, *args, **kwargs)
ATTR = "_ambench_attr"  #: attr(obj, name): an allowed method, charged when called
AUG_OBJ, AUG_KEY = "_ambench_o", "_ambench_k"  #: temporaries of obj[key] op= value (obj and key evaluated once)
KEY = "_ambench_key"  #: key(k): a subscript or display key after charging its hash
SLICE = "_ambench_slice"  #: the builtin slice (an augmented slice target: x[i:j] += y)
HASHED = "_ambench_hashed"  #: hashed(x): x after charging the hash of every element ({*x} in a set display)
GENERIC = "_ambench_generic"  #: generic(obj, k): obj[k] where obj is named like a wrapped type (tuple[int, int])
#: names of the builtins table's wrapped types: `tuple[int, int]` is a generic alias of the type
WRAPPED_TYPE_NAMES = frozenset({"int", "float", "list", "tuple", "dict", "set", "str"})
#: units of one loop pass, call or comprehension item beyond the nodes it runs (the charge's own cost)
PASS_COST = 4


class PolicyError(Exception):
    """The program uses a construct outside the allow-list (outcome `forbidden`)."""


class TooLarge(PolicyError):
    """The program holds a literal over a budget (outcome `budget`): an integer literal of more than
    MAX_INT_BITS bits would reach operators the integer cap is meant to bound (90,000 hex digits did)."""


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
    # breadth first, the order of ast.walk (the first node refused gives the reason), without its generators: a
    # list that grows while it is read
    AST, nodes = ast.AST, [tree]
    for node in nodes:
        for name in node._fields:
            if name in _ANNOTATION_FIELDS and type(node) in _ANNOTATED:
                _check_annotation(getattr(node, name, None))
                continue  # never evaluated (`instrument` drops it): `tuple[int, ...]` or `object` are fine there
            value = getattr(node, name, None)
            if type(value) is list:
                nodes.extend(v for v in value if isinstance(v, AST))
            elif isinstance(value, AST):
                nodes.append(value)
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
            if type(v) is int and v.bit_length() > MAX_INT_BITS:
                raise TooLarge(f"line {node.lineno}: an integer literal over {MAX_INT_BITS} bits")
        elif kind is ast.FormattedValue:
            if node.format_spec is not None and not _static_spec(node.format_spec):
                raise PolicyError(f"line {node.lineno}: computed format specs are not allowed")


#: the nodes whose annotation fields are never evaluated, and those fields
_ANNOTATED = frozenset({ast.AnnAssign, ast.arg, ast.FunctionDef})
_ANNOTATION_FIELDS = frozenset({"annotation", "returns"})


def _check_annotation(node: ast.AST | None) -> None:
    """What CPython 3.14 refuses in an annotation even though it is not evaluated (a SyntaxError there): a named
    expression, yield and await. Said as a syntax error (issue 42's attack: `x: (y := 5) = 3` ran)."""
    if node is None:
        return
    for n in ast.walk(node):
        if isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)):
            what = {ast.NamedExpr: "named expression", ast.Await: "await expression"}.get(type(n), "yield expression")
            raise AnnotationSyntax(f"line {getattr(n, 'lineno', '?')}: {what} cannot be used within an annotation")


class AnnotationSyntax(SyntaxError):
    """A construct CPython refuses inside an annotation (outcome `syntax`)."""


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


_NOT_COUNTED = (ast.expr_context, ast.operator, ast.cmpop, ast.boolop, ast.unaryop)
#: nodes that cost a Python-level call (a helper of the meter, or the program's own call): units each
_CALL_NODES = (ast.Call, ast.BinOp, ast.Compare, ast.AugAssign, ast.FormattedValue, ast.Subscript)
#: (4 left `i = (i * 7 + 3) % 1000003` in a loop at 0.52-0.78 s of CPU at the full budget, over the 0.6 s that
#: perf/bench_meter.py allows: each operator is a call of the meter's helper, 250-350 ns)
CALL_NODE_UNITS = 6
#: an `if` body or `else` of at least this many units is charged when it runs, not with its loop pass
BRANCH_UNITS = 12


def _weight(nodes: list[ast.AST]) -> int:
    """AST nodes one pass over `nodes` evaluates at most, not counting code charged on its own: the
    bodies of functions, lambdas, loops and comprehensions (each of their passes charges itself)."""
    count, stack = 0, list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, _NOT_COUNTED):
            continue
        count += CALL_NODE_UNITS if isinstance(n, _CALL_NODES) or (
            isinstance(n, ast.UnaryOp) and not isinstance(n.op, ast.Not) and not isinstance(n.operand, ast.Constant)) else 1
        if isinstance(n, ast.Compare):
            # a chain is one helper call per comparison (issue 32): `0 <= x < 24 != x` in a loop measured 0.90 s of
            # CPU at the full budget charged as one
            count += CALL_NODE_UNITS * (len(n.ops) - 1)
        if isinstance(n, (ast.FunctionDef, ast.Lambda)):
            stack.extend(n.args.defaults)
            stack.extend(d for d in n.args.kw_defaults if d is not None)
        elif isinstance(n, ast.For):
            stack.append(n.iter)
            stack.extend(n.orelse)
        elif isinstance(n, ast.While):
            stack.append(n.test)
            stack.extend(n.orelse)
        elif isinstance(n, ast.If):
            stack.append(n.test)
            count += sum(w for w in _branch_weights(n) if w < BRANCH_UNITS)  # heavier ones charge themselves
        elif isinstance(n, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            stack.append(n.generators[0].iter)
        else:
            stack.extend(ast.iter_child_nodes(n))
    return count


def _branch_weights(node: ast.If) -> tuple[int, int]:
    """The weights of an `if`'s body and `else`, computed once per node (an `elif` chain is an `if` in
    each `else`: recomputing them at every level made instrumenting a 26-branch chain take 2 s)."""
    cached = getattr(node, "_ambench_weights", None)
    if cached is None:
        cached = (_weight(node.body), _weight(node.orelse))
        node._ambench_weights = cached  # type: ignore[attr-defined]
    return cached
