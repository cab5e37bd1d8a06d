#!/usr/bin/env bash
# The README's second command: set up .venv/ and run the test suite.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
# Python may cache the bytecode of what a run imports beyond what setup warmed (scripts/setup.sh, "Bytecode")
unset PYTHONDONTWRITEBYTECODE
# headless Chromium for the report test (Debian package; optional: the test skips without it)
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "test.sh: installing chromium (Debian) for the report test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "test.sh: chromium could not be installed; the report rendering test will be skipped" >&2
fi
# two workers (pytest-xdist), each computing on one thread (tests/conftest.py); docs/study.md has the measurements.
# AMBENCH_TEST_WORKERS=0 runs it in one process, =N on N workers. loadgroup: tests are dealt one at a time as with
# `load`, but a module marked xdist_group (test_golden.py: its module fixture is a whole study) stays on one worker,
# which builds it once
WORKERS="${AMBENCH_TEST_WORKERS:-2}"
if [ "$WORKERS" = 0 ]; then
  exec .venv/bin/python -m pytest -q "$@"
fi
exec .venv/bin/python -m pytest -q -n "$WORKERS" --dist loadgroup "$@"
