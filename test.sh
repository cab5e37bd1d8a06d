#!/usr/bin/env bash
# The README's second command: set up .venv/ and run the test suite.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
