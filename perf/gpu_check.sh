#!/usr/bin/env bash
# The study's code path checked on a GPU, in one run (docs/runtime.md, "Checked on a GPU").
#
#   on the device machine, from the repository root (perf/gpu_pack.sh prints the calls):
#     bash perf/gpu_check.sh --stage     a staging call: keep this call's carried model parts, then stop
#     bash perf/gpu_check.sh             the last call: stage, install the carried wheels, run every check
#   here, the dry run on the CPU (smaller sizes, ~2 minutes on 2 idle cores):
#     GPU_CHECK_DEVICE=cpu bash perf/gpu_check.sh
#
# Writes $OUT/gpu_check.json and $OUT/gpu_check.md (OUT unset: runs/gpu_check/, ignored by git) and exits 0
# only if every row passes. Settings: GPU_CHECK_DEVICE (cuda | cpu), GPU_CHECK_MODELS (comma-separated; default
# smollm2-135m-instruct, gemma3-270m, organism:xor-planner, organism:tracker), GPU_CHECK_ORGANISMS (full |
# reduced | off), GPU_CHECK_DEADLINE (seconds before checks not yet started are failed rows), GPU_CHECK_STAGE
# (where carried parts are kept between calls, default /tmp/ambench-gpu), GPU_CHECK_PYTHON.
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
export GPU_CHECK_STAGE="${GPU_CHECK_STAGE:-/tmp/ambench-gpu}"
if [ -n "${GPU_CHECK_PYTHON:-}" ]; then PY="$GPU_CHECK_PYTHON"
elif [ "$DEVICE" = cpu ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3; fi

# the parts this call carried (.gpu/load-N) join those of earlier calls; complete GGUF files are checked and joined
"$PY" perf/gpu_carry.py stage || { echo "gpu_check: staging the carried files failed" >&2; exit 1; }
[ "${1:-}" = "--stage" ] && exit 0

if [ "$DEVICE" != cpu ] && ls "$GPU_CHECK_STAGE"/wheels/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$GPU_CHECK_STAGE/site" \
      "$GPU_CHECK_STAGE"/wheels/*.whl || { echo "gpu_check: the carried wheels did not install" >&2; exit 1; }
  SITE="$GPU_CHECK_STAGE/site:"
fi
if [ "$DEVICE" = cpu ]; then
  # the dry run sees only what the device has: its image lacks these and they are not carried (perf/gpu_carry.py)
  export GPU_CHECK_BLOCK="${GPU_CHECK_BLOCK-transformer_lens,umap,pynndescent,ray}"
  BLOCK="$PWD/perf/gpu_block:"
fi
[ -d "$GPU_CHECK_STAGE/gguf" ] && export AMBENCH_GGUF_DIR="$GPU_CHECK_STAGE/gguf"
export PYTHONPATH="${BLOCK:-}${SITE:-}$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
OUT="${OUT:-$PWD/runs/gpu_check}"
mkdir -p "$OUT"
# a backstop past the script's own deadline: whatever it wrote under $OUT stays
timeout --kill-after=15 "${GPU_CHECK_TIMEOUT:-1500}" "$PY" perf/gpu_check.py --device "$DEVICE" --out "$OUT" 2>&1 \
  | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
