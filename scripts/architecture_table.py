"""Run the architecture matrix (tests/interp/test_architectures.py) and write its table into docs/runtime.md.

    PYTHONPATH=$PWD .venv/bin/python scripts/architecture_table.py

Each matrix case appends its results as a JSON line (AMBENCH_ARCH_MATRIX); a case that fails writes
nothing, so its features read "no". The table replaces the block between the two
`<!-- architecture-table -->` markers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "runtime.md"
MARK = "<!-- architecture-table -->"
FEATURES = ("load", "generate", "capture", "patch", "steer", "continue")


def render(rows: list[dict]) -> str:
    sys.path.insert(0, str(ROOT))
    from tests.interp.archs import ARCHS, PAPER_MODELS

    by = {(r["arch"], r["dtype"]): r for r in rows}
    head = ["architecture", "paper models", "attention", "window", *FEATURES, "bridge = hooks", "seconds (f32 / bf16)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for arch in ARCHS:
        f32, bf16 = by.get((arch, "float32"), {}), by.get((arch, "bfloat16"), {})
        any_row = f32 or bf16
        paper = ", ".join(k for k, v in PAPER_MODELS.items() if v == arch) or ""
        cells = [any_row.get("architecture", arch) + (" (remote code)" if arch == "custom" else ""), paper,
                 any_row.get("attention", "?"), str(any_row.get("window") or "")]
        for feat in FEATURES:
            cells.append("yes" if f32.get(feat) and bf16.get(feat) else "**no**")
        bridge = f32.get("bridge", False)
        cells.append("n/a (no adapter)" if bridge is None else ("yes" if bridge else "**no**"))
        cells.append(f"{f32.get('seconds', '-')} / {bf16.get('seconds', '-')}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "matrix.jsonl"
        env = {**os.environ, "AMBENCH_ARCH_MATRIX": str(out), "PYTHONPATH": str(ROOT)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/interp/test_architectures.py::test_architecture"], cwd=ROOT, env=env)
        rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    table = render(rows)
    text = DOC.read_text()
    start, end = text.index(MARK), text.rindex(MARK)
    DOC.write_text(text[: start + len(MARK)] + "\n" + table + "\n" + text[end:])
    print(table)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
