#!/usr/bin/env bash
# The main job until `ambench run` exists (issue 8).
#  1. the sandbox over the benign and hostile corpora (renders + outcome kinds)
#  2. the translation task: references + prompts, the canonical transcriptions scored through the
#     sandbox (an oracle "model": must pass the gate at PIoU 1.000), and the null baseline
#  3. the embedded model (SmolLM2 135M Instruct, few-shot): 1 greedy + 2 sampled attempts on 30
#     translation prompts and 15 layout prompts (one per subcategory), rendered, scored (PIoU;
#     validity and triviality per tier), the residual stream captured at every layer, and
#     occupancy probes per layer and position with their controls
#  Every model stage resumes: rerunning the command continues where a killed run stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/quick}"
AMB=.venv/bin/ambench
mkdir -p "$OUT/renders"
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
print(f"[1/3] sandbox: benign corpus {ok}/{len(benign)} rendered to {out}/renders; hostile corpus {right}/{len(hostile)} got the expected outcome")
PY
$AMB translation refs --set all --out "$OUT/translation_refs.jsonl" >/dev/null
.venv/bin/python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
with open(f"{out}/translation_refs.jsonl") as f, open(f"{out}/translation_oracle_attempts.jsonl", "w") as g:
    for line in f:
        r = json.loads(line)
        g.write(json.dumps({"ref_id": r["id"], "model": "oracle-canonical", "sample": 0, "text": "```python\n" + r["canonical"] + "```"}) + "\n")
PY
rm -f "$OUT/translation_oracle_scores.jsonl"
echo "[2/3] translation: scoring the canonical transcriptions of all references through the sandbox"
$AMB translation score --refs "$OUT/translation_refs.jsonl" --attempts "$OUT/translation_oracle_attempts.jsonl" --out "$OUT/translation_oracle_scores.jsonl"
$AMB translation baseline --draws 20 --seed 0 | tee "$OUT/translation_null.txt"
MODEL="${AMBENCH_MODEL:-smollm2-135m-instruct}"
RUN="$OUT/model"
echo "[3/3] model stages on $MODEL into $RUN"
$AMB translation prompts --set sampled --out "$OUT/prompts_translation_all.jsonl" >/dev/null
$AMB layout prompts --out "$OUT/prompts_layout_all.jsonl" >/dev/null
.venv/bin/python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/prompts_translation_all.jsonl")][:30]
lay = [json.loads(l) for l in open(f"{out}/prompts_layout_all.jsonl") if json.loads(l)["id"].endswith("-00")]
with open(f"{out}/prompts_quick.jsonl", "w") as f:
    for r in rows + lay:
        f.write(json.dumps(r) + "\n")
print(f"      {len(rows)} translation + {len(lay)} layout prompts (one per subcategory)")
PY
GEN="--model $MODEL --prompts $OUT/prompts_quick.jsonl --out $RUN --protocol few-shot --shots 2 --samples 2 --max-new-tokens 128 --seed 0"
$AMB generate $GEN --no-check
$AMB renders --run "$RUN"
$AMB translation score --refs "$OUT/translation_refs.jsonl" --attempts "$RUN/generations.jsonl" --out "$RUN/translation_scores.jsonl" | tee "$RUN/translation_summary.json"
$AMB layout table --run "$RUN" | tee "$RUN/layout_table.txt"
$AMB capture --model $MODEL --prompts "$OUT/prompts_quick.jsonl" --out "$RUN" --protocol few-shot --shots 2
# probes need >= 10 prompts with targets; a weak model leaves few: 2 valid non-trivial attempts suffice here
$AMB probe --run "$RUN" --min-attempts 2 --n-perm 5 --n-boot 500
echo "done: results in $OUT"
