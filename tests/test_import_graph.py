"""No import circle among the project's modules (scripts/import_cycles.py, which anyone can run): a deferred import
inside a function counts, an import under TYPE_CHECKING does not; the checker finds a constructed circle."""

import importlib.util
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _checker():
    spec = importlib.util.spec_from_file_location("import_cycles", ROOT / "scripts" / "import_cycles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_import_circle_among_the_projects_modules():
    ic = _checker()
    edges = ic.graph()
    assert len(edges) > 100 and "interp.runtime" in edges
    assert ic.cycles(edges) == []


def _write(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_checker_finds_a_circle_hidden_in_a_function(tmp_path, monkeypatch):
    ic = _checker()
    monkeypatch.setattr(ic, "PACKAGES", ("pkg",))
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import f\n",
        "pkg/b.py": "def f():\n    from pkg import c\n    return c\n",
        "pkg/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import f\n",
        "pkg/d.py": "import pkg.a\n",
    })
    edges = ic.graph(tmp_path)
    assert edges["pkg.b"] == {"pkg.c"} and edges["pkg.c"] == set() and edges["pkg.d"] == {"pkg.a"}
    assert ic.cycles(edges) == []  # c's import of b only runs under a type checker
    (tmp_path / "pkg/c.py").write_text("def g():\n    from pkg.a import f\n")  # a -> b -> c -> a, deferred in c
    assert ic.cycles(ic.graph(tmp_path)) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


#: issue 43's room sizes: one job per module; a module that outgrows its limit is split by job, not left to grow
LINE_LIMITS = {"experiments": 450, "bench": 600}


def oversized(root: Path, limits: dict[str, int]) -> list[str]:
    """Every module under each package of `limits` longer than its package's limit, as `path (lines > limit)`."""
    out = []
    for package, limit in limits.items():
        for path in sorted((root / package).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > limit:
                out.append(f"{path.relative_to(root)} ({n} lines > {limit})")
    return out


def test_no_module_outgrows_its_room(tmp_path):
    assert oversized(ROOT, LINE_LIMITS) == []
    # the check can fail: a module one line over its package's limit is named
    (tmp_path / "experiments" / "stages").mkdir(parents=True)
    (tmp_path / "experiments" / "stages" / "big.py").write_text("x = 1\n" * 451)
    (tmp_path / "experiments" / "small.py").write_text("x = 1\n" * 450)
    assert oversized(tmp_path, {"experiments": 450}) == ["experiments/stages/big.py (451 lines > 450)"]
