"""The import graph of the project's modules, and its cycles: exit status 1 and each cycle printed when there is one.

    .venv/bin/python scripts/import_cycles.py          # from the repository root

A deferred import inside a function is still a dependency (STYLE.md), so every `import`/`from ... import`
anywhere in a module counts, functions included; only imports under `if TYPE_CHECKING:` are left out (they
never run). An edge goes to the most specific project module named: `from interp.organisms import zoo` is
an edge to `interp.organisms.zoo` when that is a module, else to `interp.organisms`. A submodule's implicit
import of its parent package is not an edge (it would make every package that imports its own parts a
cycle), which is how import checkers such as grimp/import-linter count too. The packages are the ones
pyproject.toml installs: bench, interp, hooks, activations, experiments.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "interp", "hooks", "activations", "experiments")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project's packages: dotted name -> file (a package is its __init__.py)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, here: str, is_pkg: bool, mods: dict[str, Path]) -> set[str]:
    """The project modules imported anywhere in `tree` (TYPE_CHECKING blocks left out)."""
    found: set[str] = set()

    def module_of(dotted: str) -> str | None:  # the longest prefix of `dotted` that is a project module
        while dotted and dotted not in mods:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(m for a in node.names if (m := module_of(a.name)))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against this module's package
                pkg = here.split(".") if is_pkg else here.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                m = sub if sub in mods else module_of(base)  # `from pkg import mod` names the module, not pkg
                if m:
                    found.add(m)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(here)
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the project modules it imports."""
    mods = modules(root)
    return {name: _imports(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), name,
                           path.name == "__init__.py", mods) for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = [0]

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return [_one_cycle(edges, set(c)) for c in comps]


def _one_cycle(edges: dict[str, set[str]], comp: set[str]) -> list[str]:
    """A shortest cycle inside one strongly connected component, as a list of modules ending where it starts."""
    best: list[str] | None = None
    for start in sorted(comp):
        prev = {start: None}
        queue = [start]
        found = None
        while queue and found is None:
            v = queue.pop(0)
            for w in sorted(edges[v] & comp):
                if w == start:
                    found = v
                    break
                if w not in prev:
                    prev[w] = v
                    queue.append(w)
        if found is None:
            continue
        path = [found]
        while prev[path[-1]] is not None:
            path.append(prev[path[-1]])
        path = list(reversed(path)) + [start]
        if best is None or len(path) < len(best):
            best = path
    return best or sorted(comp)


def main() -> int:
    found = cycles(graph())
    for c in found:
        print("import cycle: " + " -> ".join(c))
    if not found:
        print(f"no import cycle among {len(modules())} modules")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
