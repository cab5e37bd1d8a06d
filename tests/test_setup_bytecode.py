"""scripts/setup.sh compiles the bytecode of what it installs (issue 29): these machines set PYTHONDONTWRITEBYTECODE=1,
so without it every process compiles torch, transformers and scikit-learn from source again (importing that stack:
8.7 s without the .pyc files, 4.3 s with them, on 2 cores)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(), reason="runs in the .venv setup.sh made")
@pytest.mark.parametrize("module", ["torch", "transformers", "sklearn", "transformer_lens", "interp"])
def test_the_packages_bytecode_is_compiled(module):
    source = Path(importlib.util.find_spec(module).origin)
    assert Path(importlib.util.cache_from_source(str(source))).is_file(), f"no .pyc for {source}"
