#!/usr/bin/env bash
# The API reference generated from the docstrings: docs/api/index.html (not committed: rebuild it any time).
#   bash scripts/api_docs.sh [OUT]        # default OUT=docs/api; open OUT/index.html
# Why pdoc (16.x, PyPI: pdoc): it reads the docstrings and signatures as they are (our docstrings are plain
# text with `code` in backticks, read as Markdown), needs no configuration files, no .rst stubs and no build tree,
# installs as one package (plus markdown2) in a few seconds, and writes a static, searchable site in one command.
# Sphinx with autodoc would need a conf.py, stub pages and a docstring convention (numpy/google) that ours do not
# follow; mkdocs + mkdocstrings needs a mkdocs.yml, a theme and a page per module. Nothing here is lost by the
# lighter tool: the hand-written guides stay in docs/*.md, the reference is the docstrings.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-docs/api}"
if ! .venv/bin/python -c "import pdoc" 2>/dev/null; then
  echo "installing pdoc into .venv/ (PyPI: pdoc)"
  if [ -x .venv/bin/uv ]; then .venv/bin/uv pip install --python .venv/bin/python "pdoc>=15,<17"
  else .venv/bin/python -m pip install "pdoc>=15,<17"; fi
fi
# every package of the toolkit; pdoc imports each module (the runtime's torch imports included), so a module that
# does not import is reported and left out rather than stopping the build
.venv/bin/python -m pdoc --docformat markdown --no-show-source -o "$OUT" bench interp hooks activations experiments
echo "API reference: $OUT/index.html"
