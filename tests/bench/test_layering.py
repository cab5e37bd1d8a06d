"""`bench/` stands alone: no module of it imports torch or another package of ours, not even inside a function."""

import ast
from pathlib import Path

import bench

FORBIDDEN = {"interp", "hooks", "activations", "experiments", "torch", "transformers", "transformer_lens"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            # a dotted path handed to importlib ("interp.vlm_judge:TransformersJudge") is an import too
            head = node.value.split(":")[0]
            if head.count(".") >= 1 and head.replace(".", "").replace("_", "").isalnum() and head.split(".")[0] in FORBIDDEN:
                out.add(head.split(".")[0])
    return out


def test_bench_imports_nothing_of_ours_outside_bench():
    root = Path(bench.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 20
    bad = {str(p.relative_to(root)): sorted(_imports(p) & FORBIDDEN) for p in files if _imports(p) & FORBIDDEN}
    assert not bad, bad


def test_the_check_sees_a_lazy_import(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f():\n    from interp.vlm_judge import TransformersJudge\n    return TransformersJudge\n")
    assert "interp" in _imports(p)
    p.write_text("import importlib\nX = importlib.import_module('interp.vlm_judge')\n")
    assert "interp" in _imports(p)
