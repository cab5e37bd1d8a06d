#!/usr/bin/env bash
# Prepare here what perf/gpu_check.sh needs on the device machine: writes .gpu/ (ignored by git) with the wheels
# the device image lacks and the embedded models' GGUF files cut into one folder per call (.gpu/load-N, each
# within the 64 MiB a call may send with the working tree), and prints the calls to make (perf/gpu_carry.py).
#   bash perf/gpu_pack.sh                                              # organisms + SmolLM2 135M (2 calls)
#   bash perf/gpu_pack.sh --models smollm2-135m-instruct,gemma3-270m   # + Gemma 3 270M (7 calls)
#   bash perf/gpu_pack.sh --models ''                                  # organisms only (1 call)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
exec .venv/bin/python perf/gpu_carry.py pack "$@"
