#!/usr/bin/env bash
# The main job (the README's first command).
#  1. `ambench run --preset organisms`: the same study on the model organisms (small models trained
#     here whose plans were constructed, docs/organisms.md), and OUT/organisms/known_answers.md saying
#     per method whether it recovered the constructed answer (a method that misses it there is not to be
#     trusted on a real model)
#  2. `ambench run --preset quick`: SmolLM2 135M Instruct, few-shot, 1 greedy + 1 sampled attempt on
#     20 translation prompts and 1 greedy + 1 sampled on 30 layout prompts (two per subcategory, so that the paper's
#     headline, the layout Delta R^2, has the 10 prompts with a valid attempt it needs); renders, PIoU, layout validity and
#     triviality, the residual stream at every layer, probes with controls, the four intervention
#     arms, activation patching (the first cut that aligns), readable or used (the causal test at the layout
#     probe's best site: SmolLM2's probe reads nothing there, so nothing is moved), steering along the probe's
#     direction on 6 prompts
#  3. the sandbox over the benign and hostile corpora (renders + outcome kinds)
#  4. the translation task: references, the canonical transcriptions scored through the sandbox (an
#     oracle "model": must pass the gate at PIoU 1.000), and the null baseline
#  5. `ambench report OUT/organisms OUT/study --out OUT/report`: the one page to open, the methods
#     validated on the organisms first, then SmolLM2's results
#  Steps 1 and 2 run beside each other, each study with one thread (OMP_NUM_THREADS=1): on a 2-core machine
#  the two studies then share the cores instead of taking turns (the organisms are tiny models that gain
#  nothing from a second thread), and the main job takes about the time of the longer side. (Two threads for
#  the SmolLM2 study were slower: 11.1 against 10.3 minutes, because while the organisms run its two threads
#  wait on a busy core.) Steps 3 and 4 (12 s) run after whichever study ends first (on a fresh clone of an
#  idle AMD EPYC: SmolLM2's 269 s against the organisms' 305 s); their output is printed when both sides are done.
#  Every stage resumes: rerunning the command continues where a killed run stopped.
#  At the end it prints the time of each step and of each stage of the two studies (wall and CPU
#  seconds, with the 1-minute load average), also kept in OUT/timings.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/quick}"
AMB=.venv/bin/ambench
mkdir -p "$OUT/renders"
TIMES="$OUT/timings.jsonl"
: > "$TIMES"
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }
step() {  # step NAME COMMAND...: run it and append its wall and CPU seconds and the load at its start
  local name="$1" w0 c0 c1 l0
  shift
  w0=$(date +%s.%N); l0=$(cut -d' ' -f1 /proc/loadavg)
  # in a subshell, whose children are this step's processes only (the shell's own `times` would also count a
  # step running beside it that ended meanwhile: the organisms' CPU was once counted in the quick study's)
  ( "$@"; rc=$?; times > "$OUT/.times.$name"; exit $rc ) || return $?
  c1=$(awk 'NR == 2 { split($1, u, "m"); split($2, s, "m"); printf "%.2f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$OUT/.times.$name")
  rm -f "$OUT/.times.$name"
  printf '{"step": "%s", "stage": "(whole step)", "wall_s": %.2f, "cpu_s": %.2f, "load": %s}\n' "$name" \
    "$(minus "$(date +%s.%N)" "$w0")" "$c1" "$l0" >> "$TIMES"
}
sandbox() {
.venv/bin/python - "$OUT" <<'PY'
import json, sys
from pathlib import Path
from bench.canvas.png import save_png
from bench.sandbox.pool import SandboxPool
out = Path(sys.argv[1])
corpus = Path("tests/corpus")
benign = [json.loads(l) for l in open(corpus / "benign.jsonl")]
hostile = [json.loads(l) for l in open(corpus / "hostile.jsonl")]
with SandboxPool() as pool:
    rb = pool.run([b["text"] for b in benign])
    rh = pool.run([h["text"] for h in hostile])
ok = 0
for b, r in zip(benign, rb):
    if r.valid:
        ok += 1
        save_png(r.pixels, out / "renders" / f"{b['id']}.png", scale=8)
right = sum(r.outcome == h["expect"] for h, r in zip(hostile, rh))
summary = {"benign_rendered": ok, "benign_total": len(benign), "hostile_right_outcome": right, "hostile_total": len(hostile)}
(out / "sandbox_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(f"[3/5] sandbox: benign corpus {ok}/{len(benign)} rendered to {out}/renders; hostile corpus {right}/{len(hostile)} got the expected outcome")
PY
}
translation() {  # each command ends the step if it fails (a step's subshell runs with errexit off)
$AMB translation refs --set all --out "$OUT/translation_refs.jsonl" >/dev/null || return $?
.venv/bin/python - "$OUT" <<'PY' || return $?
import json, sys
out = sys.argv[1]
with open(f"{out}/translation_refs.jsonl") as f, open(f"{out}/translation_oracle_attempts.jsonl", "w") as g:
    for line in f:
        r = json.loads(line)
        g.write(json.dumps({"ref_id": r["id"], "model": "oracle-canonical", "sample": 0, "text": "```python\n" + r["canonical"] + "```"}) + "\n")
PY
rm -f "$OUT/translation_oracle_scores.jsonl"
echo "[4/5] translation: scoring the canonical transcriptions of all references through the sandbox"
$AMB translation score --refs "$OUT/translation_refs.jsonl" --attempts "$OUT/translation_oracle_attempts.jsonl" \
  --out "$OUT/translation_oracle_scores.jsonl" || return $?
$AMB translation baseline --draws 20 --seed 0 > "$OUT/translation_null.txt" || return $?
cat "$OUT/translation_null.txt"
}
steps_3_4() {  # the sandbox and translation steps, on the side whose study ends first (mkdir claims them atomically)
  mkdir "$OUT/.steps-3-4" 2>/dev/null || return 0
  step sandbox sandbox >"$OUT/sandbox.log" 2>&1 || return $?
  step translation translation >"$OUT/translation.log" 2>&1
}
JOB0=$(date +%s.%N)
echo "[1/5] the study on the model organisms, beside step 2: ambench run --preset organisms --out $OUT/organisms (log: $OUT/organisms.log)"
rm -f "$OUT/organisms.log" "$OUT/sandbox.log" "$OUT/translation.log"  # no log of an earlier run is shown
rm -rf "$OUT/.steps-3-4"
(
  OMP_NUM_THREADS=1 step organisms $AMB run --preset organisms --out "$OUT/organisms" --timings "$TIMES" >"$OUT/organisms.log" 2>&1
  steps_3_4
) &
BESIDE=$!
kill_tree() {  # a process and every process below it (pkill -P reaches the children only)
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
stop_beside() {  # a failed or interrupted step stops the steps beside it too (they resume on the next run)
  if kill -0 "$BESIDE" 2>/dev/null; then kill_tree "$BESIDE"; fi
}
trap stop_beside EXIT
echo "[2/5] the study on the embedded model: ambench run --preset quick --out $OUT/study"
OMP_NUM_THREADS=1 step quick $AMB run --preset quick --out "$OUT/study" --timings "$TIMES" ${AMBENCH_MODEL:+--model "$AMBENCH_MODEL"}
if ! steps_3_4; then
  for log in sandbox translation; do
    if [ -s "$OUT/$log.log" ]; then echo "--- $OUT/$log.log" >&2; tail -20 "$OUT/$log.log" >&2; fi
  done
  echo "step 3 or 4 failed (logs above)" >&2
  exit 1
fi
if ! wait "$BESIDE"; then
  for log in organisms sandbox translation; do
    if [ -s "$OUT/$log.log" ]; then echo "--- $OUT/$log.log" >&2; tail -20 "$OUT/$log.log" >&2; fi
  done
  echo "a step beside the embedded model's study failed (logs above)" >&2
  exit 1
fi
cat "$OUT/organisms/known_answers.md"
cat "$OUT/sandbox.log" "$OUT/translation.log"
echo "[5/5] the report: ambench report $OUT/organisms $OUT/study --out $OUT/report"
step report $AMB report "$OUT/organisms" "$OUT/study" --out "$OUT/report"
echo "time per step and stage (wall and CPU seconds; load = 1-minute load average when it started or ended):"
.venv/bin/python - "$TIMES" "$(minus "$(date +%s.%N)" "$JOB0")" <<'PY'
import json, sys
from experiments.study.timing import format_table
rows = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in rows if r["stage"] == "(whole step)"]
table = []
for s in steps:
    table.append({**s, "stage": f"[{s['step']}]"})
    table += [{**r, "stage": "  " + r["stage"]} for r in rows if r["step"] == s["step"] and r["stage"] != "(whole step)"]
print(format_table(table, total=steps))  # the stages are inside their steps: the total is the steps'
print(f"the whole job: {float(sys.argv[2]) / 60:.1f} minutes of wall time (the organisms ran beside the embedded model, the sandbox and the translation scoring after the study that ended first)")
PY
echo "report: $OUT/report/index.html"
echo "done: results in $OUT"
