#!/usr/bin/env bash
# The README's first command: set up .venv/ and run the main job (what exists of the study so far).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
# Python may cache the bytecode of what a run imports beyond what setup warmed (scripts/setup.sh, "Bytecode")
unset PYTHONDONTWRITEBYTECODE
exec bash scripts/main_job.sh "$@"
