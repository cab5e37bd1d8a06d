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
`instrument()` then inserts the work-unit charges (bench.sandbox.meter): a tick of the code's static
size at every loop pass, function entry and comprehension item, and routes every binary operator,
comparison, allowed method, slice, `*args` and f-string value through checked helpers that charge the
elements and bits they touch, so a program's work is metered deterministically, without tracing. A chained
comparison becomes single comparisons joined by `and` (with `:=` temporaries, or thunks inside a comprehension's
iterable), so it meets the same rules as one (issue 32); every generator expression is checked against the
meter's depth bound when it is made.
Private names cannot be written by the program, so it cannot touch them.
"""

from __future__ import annotations

import ast
import math
import re
from typing import Any

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


_MISSING = object()
_POSITION_NAMES = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def _position(node: ast.AST) -> tuple[Any, ...] | None:
    """A node's (lineno, col_offset, end_lineno, end_col_offset), or None when it has none (or no end)."""
    if not node._attributes:
        return None
    end = getattr(node, "end_col_offset", None)
    if end is None or getattr(node, "end_lineno", None) is None:
        return None
    return node.lineno, node.col_offset, node.end_lineno, end


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


#: nodes with nothing below them to charge: the meter does not visit them
_LEAVES = (*_NOT_COUNTED, ast.Constant, ast.Name)
#: the position of a node without one and without a parent that has one (ast.fix_missing_locations's start)
_START = (1, 0, 1, 0)


class _Meter(ast.NodeTransformer):
    """Insert the work-unit charges (see module docstring and bench.sandbox.meter).

    The nodes a visit makes get their positions as it returns (`_place`), as `ast.fix_missing_locations`
    would give them: a walk of the whole tree afterwards took a sixth of preparing a typical program."""

    #: (meter class, node class) -> its visit_ method, or None for generic_visit (NodeVisitor.visit builds the
    #: method's name and looks it up on every node)
    _methods: dict[tuple[type, type], Any] = {}

    def __init__(self) -> None:
        self._deferred: list[tuple[Any, tuple[Any, ...]]] | None = None  #: placements held back (an AugAssign's target)
        self._after: list[tuple[Any, tuple[Any, ...]]] = []  #: those to make once its statements are placed
        self._temps = 0  #: chained comparisons' temporaries made so far
        self._in_iterable = 0  #: > 0 while visiting a comprehension's iterable (where `:=` is not allowed)

    def visit(self, node: ast.AST) -> Any:
        key = (type(self), type(node))
        method = self._methods.get(key, _MISSING)
        if method is _MISSING:
            method = self._methods[key] = getattr(type(self), "visit_" + type(node).__name__, None)
        if method is None:
            return self.generic_visit(node)
        out = method(self, node)
        pos = _position(node) or _START
        made = out if type(out) is list else (out,)
        if self._deferred is not None:
            self._deferred.extend((new, pos) for new in made)
            return out
        for new in made:
            self._place(new, pos)
        if self._after:
            after, self._after = self._after, []
            for new, at in after:
                self._place(new, at)
        return out

    def generic_visit(self, node: ast.AST) -> ast.AST:
        """NodeTransformer.generic_visit without visiting leaves, and without its generators."""
        AST = ast.AST
        for name in node._fields:
            old = getattr(node, name, None)
            if type(old) is list:
                if not old:
                    continue
                new: list[Any] = []
                for value in old:
                    if isinstance(value, AST) and not isinstance(value, _LEAVES):
                        value = self.visit(value)
                        if value is None:
                            continue
                        if not isinstance(value, AST):
                            new.extend(value)
                            continue
                    new.append(value)
                old[:] = new
            elif isinstance(old, AST) and not isinstance(old, _LEAVES):
                value = self.visit(old)
                if value is None:
                    delattr(node, name)
                else:
                    setattr(node, name, value)
        return node

    def _place(self, root: ast.AST | None, pos: tuple[Any, ...]) -> None:
        """Give every node the meter made under `root` (those without a position) the position of its nearest
        ancestor that has one, `pos` being `root`'s parent's: what ast.fix_missing_locations gives them. The walk
        stops at nodes below `root` that have a position: the program's own, whose subtrees were placed when they
        were visited, and the meter's copy_location'd nodes, which are only ever a visit's result."""
        if root is None:
            return
        stack = [(root, pos)]
        first = True
        while stack:
            node, pos = stack.pop()
            if node._attributes:
                if not first and getattr(node, "lineno", None) is not None:
                    continue
                here = list(pos)
                for slot, name in enumerate(_POSITION_NAMES):
                    value = getattr(node, name, None)
                    if value is None:
                        setattr(node, name, here[slot])
                    else:
                        here[slot] = value
                pos = tuple(here)
            first = False
            for name in node._fields:
                value = getattr(node, name, None)
                if type(value) is list:
                    stack.extend((v, pos) for v in value if isinstance(v, ast.AST) and not isinstance(v, _NOT_COUNTED))
                elif isinstance(value, ast.AST) and not isinstance(value, _NOT_COUNTED):
                    stack.append((value, pos))

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return node  # nothing inside to charge (NodeVisitor's own visit_Constant looks for obsolete handlers)

    def _tick(self, node: ast.AST, units: int) -> ast.stmt:
        # no position of its own: `_place` gives it `node`'s, its parent's (what copy_location gave it before)
        return ast.Expr(value=_call(TICK, ast.Constant(units + PASS_COST)))

    def visit_For(self, node: ast.For) -> ast.AST:
        units = _weight(node.body) + _weight([node.target])
        self.generic_visit(node)
        node.body.insert(0, self._tick(node, units))
        return node

    def visit_While(self, node: ast.While) -> ast.AST:
        units = _weight(node.body) + _weight([node.test])
        self.generic_visit(node)
        node.body.insert(0, self._tick(node, units))
        return node

    def visit_If(self, node: ast.If) -> ast.AST:
        units = _branch_weights(node)
        self.generic_visit(node)
        for branch, u in zip((node.body, node.orelse), units):
            if branch and u >= BRANCH_UNITS:  # the same threshold `_weight` leaves out
                branch.insert(0, self._tick(node, u - PASS_COST))
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        units = _weight(node.body) + len(node.args.args) + len(node.args.kwonlyargs)
        if node.returns is not None:  # annotations are not evaluated (`instrument`): done here, in the one walk
            node.returns = ast.copy_location(ast.Constant(value=None), node.returns)
        self.generic_visit(node)
        node.body.insert(0, self._tick(node, units))
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        if node.annotation is not None:
            node.annotation = ast.copy_location(ast.Constant(value=None), node.annotation)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        node.annotation = ast.copy_location(ast.Constant(value=None), node.annotation)
        return self.generic_visit(node)

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        # a lambda is a scope of its own: `:=` is allowed in its body wherever the lambda stands
        outer, self._in_iterable = self._in_iterable, 0
        try:
            return self._lambda(node)
        finally:
            self._in_iterable = outer

    def _lambda(self, node: ast.Lambda) -> ast.AST:
        units = _weight([node.body]) + len(node.args.args)
        self.generic_visit(node)
        node.body = ast.BoolOp(op=ast.And(), values=[_call(TICK, ast.Constant(units + PASS_COST)), node.body])
        return node

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> ast.AST:
        gens = node.generators
        elt = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        units = []
        for i, g in enumerate(gens):
            u = _weight([g.target, *g.ifs])
            u += _weight([gens[i + 1].iter]) if i + 1 < len(gens) else _weight(elt)
            units.append(u)
        self.generic_visit(node)
        for g, u in zip(node.generators, units):
            g.ifs.insert(0, _call(TICK, ast.Constant(u + PASS_COST)))  # tick() returns True
        if isinstance(node, ast.GeneratorExp):
            # a generator over a generator is one more level of C recursion when it is iterated (a 200,000-deep
            # chain overflowed the C stack): its depth is checked when it is made (Meter.nested)
            node.generators[0].iter = _call(SOURCED, node.generators[0].iter)
            self._place(node, _position(node) or _START)  # its ticks: `visit` places only what is outside it
            return ast.copy_location(_call(NESTED, node), node)
        if isinstance(node, ast.SetComp):  # each element is hashed
            node.elt = _call(KEY, node.elt)
        elif isinstance(node, ast.DictComp):
            node.key = _call(KEY, node.key)
        return node

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self._in_iterable += 1
        try:
            node.iter = self.visit(node.iter) if not isinstance(node.iter, _LEAVES) else node.iter
        finally:
            self._in_iterable -= 1
        node.target = self.visit(node.target) if not isinstance(node.target, _LEAVES) else node.target
        node.ifs = [self.visit(i) if not isinstance(i, _LEAVES) else i for i in node.ifs]
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) or isinstance(node.operand, ast.Constant):
            return node  # `not x` makes nothing; `-1` is a literal
        return ast.copy_location(_call(UNARY, ast.Constant(type(node.op).__name__), node.operand), node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        call = _call(BINOP, ast.Constant(type(node.op).__name__), node.left, node.right)
        return ast.copy_location(call, node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST | list[ast.stmt]:
        # the target's parts move into the statements built below: what its visit made is placed after those
        # statements, so a node that moved takes its new parent's position (as fix_missing_locations gives it)
        self._deferred = []
        node.target = self.visit(node.target)
        deferred, self._deferred = self._deferred, None
        node.value = self.visit(node.value)
        self._after = deferred
        op = ast.Constant(type(node.op).__name__)
        t = node.target
        if isinstance(t, ast.Subscript):
            # obj[key] op= value in Python's order, obj and key evaluated once, through two reserved
            # temporaries: o = obj; k = key; o[k] = binop(op, o[k], value) (the value runs last, in the
            # program's own scope, so a walrus in it binds where the program expects)
            def name(n: str, ctx: ast.expr_context) -> ast.Name:
                return ast.Name(id=n, ctx=ctx)

            key = t.slice
            if isinstance(key, ast.Slice):
                none = ast.Constant(None)
                key = _call(SLICE, key.lower or none, key.upper or none, key.step or none)
            read: ast.expr = ast.Subscript(value=name(AUG_OBJ, ast.Load()), slice=name(AUG_KEY, ast.Load()), ctx=ast.Load())
            store_obj: ast.expr = name(AUG_OBJ, ast.Load())
            if isinstance(t.slice, ast.Slice):  # a copy of the slice is read, and assigning it back moves the rest
                read = _call(COPIED, read)
                store_obj = _call(COPIED, store_obj)
            stmts = [
                ast.Assign(targets=[name(AUG_OBJ, ast.Store())], value=t.value),
                ast.Assign(targets=[name(AUG_KEY, ast.Store())], value=key),
                ast.Assign(targets=[ast.Subscript(value=store_obj, slice=name(AUG_KEY, ast.Load()), ctx=ast.Store())],
                           value=_call(BINOP, op, read, node.value, ast.Constant(True))),
            ]
            return [ast.copy_location(st, node) for st in stmts]
        if isinstance(t, ast.Attribute):
            # obj.attr op= value: obj evaluated once, as Python (`g().e += 1` called g twice)
            read_attr: ast.expr = ast.Attribute(value=ast.Name(id=AUG_OBJ, ctx=ast.Load()), attr=t.attr, ctx=ast.Load())
            if t.attr in METHOD_NAMES:
                read_attr = _call(ATTR, ast.Name(id=AUG_OBJ, ctx=ast.Load()), ast.Constant(t.attr))
            stmts = [
                ast.Assign(targets=[ast.Name(id=AUG_OBJ, ctx=ast.Store())], value=t.value),
                ast.Assign(targets=[ast.Attribute(value=ast.Name(id=AUG_OBJ, ctx=ast.Load()), attr=t.attr, ctx=ast.Store())],
                           value=_call(BINOP, op, read_attr, node.value, ast.Constant(True))),
            ]
            return [ast.copy_location(st, node) for st in stmts]
        # x op= y  ->  x = binop(op, x, y, inplace): a name
        value = _call(BINOP, op, _as_load(t), node.value, ast.Constant(True))
        return ast.copy_location(ast.Assign(targets=[t], value=value), node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if len(node.ops) == 1:
            call = _call(CMP, ast.Constant(type(node.ops[0]).__name__), node.left, node.comparators[0])
            return ast.copy_location(call, node)
        # a chain is its comparisons, each through the same helper as a single one (issue 32: `-1 in map(abs, big)
        # != 7` skipped the `in` rules): a op1 b op2 c -> cmp(op1, a, (t := b)) and cmp(op2, t, c), which evaluates
        # each operand once, in order, and stops at the first false comparison, returning it, as the chain does
        ops = [ast.Constant(type(op).__name__) for op in node.ops]
        if self._in_iterable:  # `:=` is refused there: the later operands become thunks of a helper
            thunks = [ast.Lambda(args=_NO_ARGS(), body=c) for c in node.comparators]
            return ast.copy_location(_call(CHAIN, ast.Tuple(elts=ops, ctx=ast.Load()), node.left, *thunks), node)
        values, left = [], node.left
        for i, (op, right) in enumerate(zip(ops, node.comparators)):
            if i + 1 < len(node.comparators):
                self._temps += 1
                name = f"{TEMP}{self._temps}"
                right = ast.NamedExpr(target=ast.Name(id=name, ctx=ast.Store()), value=right)
                values.append(_call(CMP, op, left, right))
                left = ast.Name(id=name, ctx=ast.Load())
            else:
                values.append(_call(CMP, op, left, right))
        return ast.copy_location(ast.BoolOp(op=ast.And(), values=values), node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.slice, ast.Slice):
            if isinstance(node.ctx, ast.Load):
                return ast.copy_location(_call(COPIED, node), node)
            node.value = _call(COPIED, node.value)  # x[i:j] = y moves the rest of x
            return node
        if isinstance(node.ctx, ast.Load) and isinstance(node.value, ast.Name) and node.value.id in WRAPPED_TYPE_NAMES:
            # `tuple[int, int]`: the builtins table's tuple is a wrapper, not a type; a generic alias of it
            return ast.copy_location(_call(GENERIC, node.value, node.slice), node)
        if not isinstance(node.slice, ast.Constant):
            node.slice = _call(KEY, node.slice)  # a tuple key is hashed in full on every access
        return node

    def visit_Set(self, node: ast.Set) -> ast.AST:
        self.generic_visit(node)
        for e in node.elts:
            if isinstance(e, ast.Starred):  # {*x}: every element of x is hashed, not only copied
                e.value = _call(HASHED, e.value.args[0])  # type: ignore[attr-defined]  # was COPIED(x)
                self._place(e.value, _position(e) or _START)  # under `e` (placed already), so `e`'s position
        node.elts = [e if isinstance(e, (ast.Constant, ast.Starred)) else _call(KEY, e) for e in node.elts]
        return node

    def visit_Starred(self, node: ast.Starred) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load):
            node.value = _call(UNPACKED, node.value)  # C makes the elements of a range or of non-ASCII text
        return node

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        self.generic_visit(node)
        if node.arg is None:
            node.value = _call(COPIED, node.value)
        return node

    def visit_Dict(self, node: ast.Dict) -> ast.AST:
        self.generic_visit(node)
        node.values = [_call(COPIED, v) if k is None else v for k, v in zip(node.keys, node.values)]
        node.keys = [k if k is None or isinstance(k, ast.Constant) else _call(KEY, k) for k in node.keys]
        return node

    def visit_FormattedValue(self, node: ast.FormattedValue) -> ast.AST:
        self.generic_visit(node)
        # a static spec's largest number bounds what it adds (a width or a precision: {x:>100000000})
        spec = "".join(str(v.value) for v in node.format_spec.values) if node.format_spec is not None else ""
        width = max((int(d) for d in re.findall(r"\d+", spec)), default=0)
        # the helper applies the conversion itself (a value that is not a number or a string comes back as
        # text without heap addresses), so the interpreter only applies the spec
        node.value = _call(RENDERED, node.value, ast.Constant(width), ast.Constant(node.conversion),
                           ast.Constant(bool(spec)))
        node.conversion = -1
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.ctx, ast.Load) and node.attr in METHOD_NAMES:
            return ast.copy_location(_call(ATTR, node.value, ast.Constant(node.attr)), node)
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        self.generic_visit(node)
        unpacks = any(isinstance(n, ast.Starred) for t in node.targets for n in ast.walk(t))
        slices = any(isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Slice) for t in node.targets)
        if unpacks:  # a, *b = big: C pulls every element (a range's ints are made)
            node.value = _call(UNPACKED, node.value)
        elif slices:  # x[i:j] = big copies the value
            node.value = _call(COPIED, node.value)
        return node


def _NO_ARGS() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def _as_load(target: ast.AST) -> ast.expr:
    import copy

    t = copy.deepcopy(target)
    for n in ast.walk(t):
        if hasattr(n, "ctx"):
            n.ctx = ast.Load()
    return t  # type: ignore[return-value]


def instrument(tree: ast.Module) -> ast.Module:
    """Return the metered version of an already checked tree. Every annotation becomes `None` on the way (the
    visitors of AnnAssign, arg and FunctionDef), so none is evaluated: CPython 3.14's semantics (PEP 649: an
    annotation runs only when `__annotations__` is read, which a program cannot name), on every Python. Before issue
    42 the programs inherited `from __future__ import annotations` from the module that compiled them (annotations
    kept as strings, never run) by accident; a generic alias such as `tuple[int, int]`, refused where it runs, stays
    writable where models write it, in an annotation."""
    return _Meter().visit(tree)
