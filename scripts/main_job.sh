#!/usr/bin/env bash
# The main job until `ambench run` exists: render the benign and hostile corpora through the sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/quick}"
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
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
print(f"benign corpus: {ok}/{len(benign)} rendered to {out}/renders; hostile corpus: {right}/{len(hostile)} got the expected outcome")
PY
