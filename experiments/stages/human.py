"""Human validation kit: pairwise comparisons a person clicks through, and agreement statistics.

`export_kit(run, out, n_pairs, seed)` picks pairs of valid layout renders for the same prompt (two
different arms, model x protocol, when the run has them; otherwise two samples of one arm), seeded,
and writes `out/index.html` (one self-contained static page: both mosaics inline as PNG, the prompt,
buttons "left", "right", "tie", and a button that downloads the answers as JSON; no server, no
network) and `out/pairs.json` (which attempt is left and right, the seed).

`import_answers(kit, files, run, judge)` reads the annotators' JSON files and reports
Krippendorff's alpha (nominal) between annotators (the `krippendorff` package), and judge-vs-human
agreement on *separated* pairs: pairs whose two judge overall scores differ by at least `margin`
(default 1.0), where agreement is the share whose human majority picks the judge's higher one.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bench.canvas.png import png_bytes, scale_for
from bench.layout.prompts import by_id
from experiments.rundir import AttemptKey, arm_of
from experiments.rundir import RunDir, reading
from experiments.stages.render import read_renders, row_key

CHOICES = ("left", "right", "tie")


def make_pairs(run: Path, n_pairs: int, seed: int) -> list[dict[str, Any]]:
    # renders are made by the caller (the CLI renders missing attempts under the run lock first)
    prompts = by_id()
    renders = read_renders(run)
    valid: dict[str, list[dict[str, Any]]] = {}
    for r in reading(run).rows(RunDir.GENERATIONS):
        x = renders.get(row_key(r))
        if r["task"] == "layout" and r["prompt_id"] in prompts and x is not None and x["outcome"] == "ok":
            valid.setdefault(r["prompt_id"], []).append(r)
    rng = np.random.default_rng(seed)
    pairs = []
    for pid in sorted(valid):
        rows = valid[pid]
        if len(rows) < 2:
            continue
        arms = sorted({(r["model"], arm_of(r)) for r in rows})
        if len(arms) >= 2:
            a1, a2 = (arms[i] for i in rng.choice(len(arms), 2, replace=False))
            left = [r for r in rows if (r["model"], arm_of(r)) == a1]
            right = [r for r in rows if (r["model"], arm_of(r)) == a2]
            pick = (left[int(rng.integers(len(left)))], right[int(rng.integers(len(right)))])
        else:
            i, j = rng.choice(len(rows), 2, replace=False)
            pick = (rows[int(i)], rows[int(j)])
        if rng.random() < 0.5:  # counterbalance sides
            pick = (pick[1], pick[0])
        pairs.append({"pair": f"q{len(pairs):03d}", "prompt_id": pid, "prompt": prompts[pid].text,
                      "left": row_key(pick[0]), "right": row_key(pick[1])})
    order = rng.permutation(len(pairs))[:n_pairs]
    return [pairs[int(i)] for i in sorted(order)]


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>AM-Bench pairwise comparisons</title>
<style>
body {{ font-family: sans-serif; max-width: 900px; margin: 2em auto; }}
.pair {{ border-top: 1px solid #ccc; padding: 1em 0; }}
.imgs {{ display: flex; gap: 2em; }}
img {{ width: 288px; height: 288px; image-rendering: pixelated; border: 1px solid #999; }}
label {{ margin-right: 1.5em; }}
</style></head><body>
<h1>Which picture answers the request better?</h1>
<p>Name: <input id="annotator" placeholder="your name or initials"></p>
{items}
<p><button onclick="save()">Download answers</button> <span id="status"></span></p>
<script>
function save() {{
  const answers = {{}};
  document.querySelectorAll("input[type=radio]:checked").forEach(r => answers[r.name] = r.value);
  const data = {{annotator: document.getElementById("annotator").value || "anonymous", kit: {kit}, answers: answers}};
  const blob = new Blob([JSON.stringify(data, null, 1)], {{type: "application/json"}});
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = "answers-" + data.annotator + ".json";
  a.click();
  document.getElementById("status").textContent = Object.keys(answers).length + " of {n} answered";
}}
</script></body></html>
"""

ITEM = """<div class="pair" id="{pair}"><p><b>{num}.</b> {prompt}</p>
<div class="imgs"><img alt="left" src="data:image/png;base64,{left}"><img alt="right" src="data:image/png;base64,{right}"></div>
<p>{radios}</p></div>"""


def export_kit(run: Path, out: Path, n_pairs: int = 40, seed: int = 0) -> dict[str, Any]:
    pairs = make_pairs(run, n_pairs, seed)
    if not pairs:
        raise ValueError(f"{run} has no prompt with two valid layout renders")
    renders = read_renders(run)
    kit_id = f"{run.name}-seed{seed}-{len(pairs)}"
    items = []
    for k, p in enumerate(pairs, 1):
        imgs = {s: base64.b64encode(png_bytes(px, scale_for(px, 288))).decode()
                for s, px in ((s, renders[p[s]]["pixels"]) for s in ("left", "right"))}
        radios = "".join(f'<label><input type="radio" name="{p["pair"]}" value="{c}"> {c}</label>' for c in CHOICES)
        items.append(ITEM.format(pair=p["pair"], num=k, prompt=html.escape(p["prompt"]), radios=radios, **imgs))
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.html").write_text(PAGE.format(items="\n".join(items), kit=json.dumps(kit_id), n=len(pairs)), encoding="utf-8")
    meta = {"kit": kit_id, "seed": seed, "run": str(run), "pairs": pairs}
    (out / "pairs.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return meta


def _json_object(path: Path, what: str, keys: Sequence[str]) -> dict[str, Any]:
    """A JSON object with these keys, read from `path`; one sentence for anything else."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what} {path} is {'a folder' if path.is_dir() else 'not there'}: give the file "
                         + ("`ambench human export` wrote" if what == "kit" else "the page saved"))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{what} {path} is not a JSON file") from None
    if not isinstance(data, dict) or any(k not in data for k in keys):
        raise ValueError(f"{what} {path} is not {'a kit' if what == 'kit' else 'an answer file'} (it needs {', '.join(keys)})")
    return data


def import_answers(kit: Path, files: Sequence[Path], run: Path | None = None, judge: str | None = None,
                   margin: float = 1.0) -> dict[str, Any]:
    import krippendorff

    meta = _json_object(Path(kit) / "pairs.json", "kit", ("kit", "pairs"))
    pair_ids = [p["pair"] for p in meta["pairs"]]
    sheets = []
    for f in files:
        data = _json_object(Path(f), "answers", ("kit", "annotator", "answers"))
        if not isinstance(data["answers"], dict):
            raise ValueError(f"answers {f}: 'answers' is not an object of pair -> left, right or tie")
        if data.get("kit") != meta["kit"]:
            raise ValueError(f"{f} answers kit {data.get('kit')!r}, not {meta['kit']!r}")
        bad = {v for v in data["answers"].values() if v not in CHOICES}
        if bad:
            raise ValueError(f"{f}: unknown answers {sorted(bad)}")
        sheets.append(data)
    code = {c: i for i, c in enumerate(CHOICES)}
    matrix = np.array([[code.get(s["answers"].get(p), np.nan) if p in s["answers"] else np.nan for p in pair_ids] for s in sheets],
                      dtype=float)
    out: dict[str, Any] = {"kit": meta["kit"], "annotators": [s["annotator"] for s in sheets], "pairs": len(pair_ids),
                           "answered": int(np.sum(~np.isnan(matrix)))}
    out["alpha_nominal"] = float(krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal")) if len(sheets) >= 2 else None
    if run is not None and judge is not None:
        scores = {}
        for r in reading(run).rows(RunDir.JUDGE_SCORES):
            if r["judge"] == judge:
                scores[AttemptKey.of({**r, "task": r.get("task", "layout")}).json] = r["overall"]
        agree = total = 0
        for j, p in enumerate(meta["pairs"]):
            sl, sr = scores.get(p["left"]), scores.get(p["right"])
            if sl is None or sr is None or abs(sl - sr) < margin:
                continue
            votes = [CHOICES[int(v)] for v in matrix[:, j] if not np.isnan(v)]
            lefts, rights = votes.count("left"), votes.count("right")
            if lefts == rights:
                continue  # no human majority
            total += 1
            agree += (lefts > rights) == (sl > sr)
        out["judge"] = judge
        out["separated_pairs"] = total
        out["judge_human_agreement"] = agree / total if total else None
    return out
