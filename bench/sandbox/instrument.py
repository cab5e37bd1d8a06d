"""The instrumenter: inserts the work-unit charges into a program that passed the allow-list (bench.sandbox.policy).

`instrument()` inserts the work-unit charges (bench.sandbox.meter): a tick of the code's static
size at every loop pass, function entry and comprehension item, and routes every binary operator,
comparison, allowed method, slice, `*args` and f-string value through checked helpers that charge the
elements and bits they touch, so a program's work is metered deterministically, without tracing. A chained
comparison becomes single comparisons joined by `and` (with `:=` temporaries, or thunks inside a comprehension's
iterable), so it meets the same rules as one (issue 32); every generator expression is checked against the
meter's depth bound when it is made. Private names cannot be written by the program, so it cannot touch them.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from bench.sandbox.policy import (ATTR, AUG_KEY, AUG_OBJ, BINOP, BRANCH_UNITS, CHAIN, CMP, COPIED, GENERIC, HASHED,
                                  KEY, METHOD_NAMES, NESTED, PASS_COST, RENDERED, SLICE, SOURCED, TEMP, TICK, UNARY,
                                  UNPACKED, WRAPPED_TYPE_NAMES, _NOT_COUNTED, _branch_weights, _weight)


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
