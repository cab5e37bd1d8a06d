"""The golden study: one `ambench run` on two tiny models whose result values are pinned.

Pinned before the run directory and the stages were restructured (issue 13), so that a restructure
that changes any result value fails here. The only changes allowed since are the integrity fields
(row checksums, input hashes), which are not part of the pinned values.

Two copies of one tiny random Llama under two names. A random tiny model writes no valid program, so
their layout and translation attempts are pre-written as the very rows the generate stage writes (the
stage then finds them done); every later stage runs for real: capture, interventions (continuations
sampled from the tiny model), patching, renders, translation scores, layout tables, probes with the
headline test, intervention tables, the report. The second model's programs coincide with the
first's on most prompts (the audit's case) and differ on some (so shared and specific differ).

What is pinned how (issue 29: on an Intel Xeon with AVX-512 this test failed with 463 values ~1e-5 apart, no
selection different). The float32 forward pass runs other kernels on other CPUs (ATen's AVX-512, AVX2 or default code,
MKL's and oneDNN's own), so the activations differ in their last bits and every probe statistic computed from them
carries that noise; the probe stage itself adds none (tests/experiments/test_probe_exactness.py). So:
- exactly: every selection (layer, k, alpha as the same grid point), count, outcome, string, verdict, render hash,
  and every value that does not depend on the forward pass (renders, translation scores, layout table, summary,
  lexical baselines) and the interventions' sampled outcomes (measured identical under every variant below); a
  sampled continuation's text exactly but for at most BRANCHES of them (a draw at a boundary, see BRANCHES);
- the probe statistics and the activations' per-layer mean and std to TOLERANCES, the report's numbers to
  `_report_close`: ten times the largest spread measured, rounded up to a power of ten.
Measured with `python -m tests.experiments.golden_spread` (the study in a subprocess under each emulated CPU) on an
Intel Xeon with AVX-512 (2 cores, under load), against the run with the environment as it is (ATen AVX512, OpenBLAS
SkylakeX): ATEN_CPU_CAPABILITY=default, =avx2, =avx512; OPENBLAS_CORETYPE=Haswell; an AVX2 machine (ATen avx2, MKL and
oneDNN capped at AVX2, OpenBLAS Haswell); the oldest (ATen default, MKL SSE4_2, oneDNN SSE41, OpenBLAS Nehalem, numpy's
SIMD at its x86-64-v2 baseline); numpy at its baseline alone; and the pinned values themselves (made on the
developers' machine). Largest differences: raw activations 7.5e-9; R^2, Delta R^2, se 2.0e-5; interval ends 6.9e-5;
permutation-null means 9.0e-5; inner-fold R^2 6.1e-5; p and q 0.001 (one permutation of 999); the report's numbers one
unit of their last printed digit; alpha 5.7e-14 (numpy baseline); everything else, and every selection: identical.
OPENBLAS_CORETYPE alone moves nothing but inner-fold R^2 by 4e-15.
On an AMD EPYC with AVX-512 (2026-12-05, ATen default, avx2 and avx512 against native, two threads): raw activations
7.5e-9; R^2, Delta R^2 3.1e-5; interval ends 5.9e-5; inner-fold R^2 4.4e-5; permutation-null means 3.9e-4 (so their
tolerance is 1e-2); p 0.001 and q 0.002 (P_VALUE is 5 times that); the report's numbers 2 units of their last digit;
no exact value. In the suite (one thread, ATen default) one sampled continuation branched there (BRANCHES). tests/experiments/test_cross_cpu.py reruns the
forward pass under each ATen level this CPU has and checks these tolerances hold.

Regenerate (only for an intended change of results, said in the commit):
    AMBENCH_GOLDEN=update .venv/bin/python -m pytest tests/experiments/test_golden.py
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.interp.tiny import build_tiny

GOLDEN = Path(__file__).parent / "golden" / "study.json"
PROGRAMS = [
    "```python\nfill('white')\nrect(2, 2, 4, 4, 'red')\nrect(12, 10, 6, 6, 'blue')\n```",
    "```python\nfill('navy')\ncircle(12, 12, 3, 'gold')\nrect(2, 14, 4, 4, 'red')  # a small box\n```",
    "```python\nfill('white')\nrect(14, 2, 8, 8, 'green')\nline(0, 0, 5, 20, 'black')\n```",
    "```python\nfill('black')\nfor i in range(3):\n    rect(2 + 6 * i, 3, 3, 3, 'orange')\npoly([(10, 10), (20, 10), (20, 20)], 'red')\n```",
]
ARGS = ["--translation-prompts", "3", "--layout-per-subcategory", "1", "--samples", "1", "--translation-samples", "1",
        "--max-new-tokens", "8", "--batch-size", "8"]  # the batches the golden values were made with


def _rows(models: list[str]) -> list[dict]:
    from bench.translation.references import canonical_program, reference_by_id
    from experiments.study import StudyConfig, prompt_sets

    cfg = StudyConfig.from_preset("quick", translation_prompts=3, layout_per_subcategory=1, samples=1, translation_samples=1)
    sets = prompt_sets(cfg)
    rows = []
    for mi, m in enumerate(models):
        for it in sets["translation"]:
            for k in range(2):
                text = "```python\n" + canonical_program(reference_by_id(it.id)) + "```" if k == 0 else PROGRAMS[0]
                rows.append(_row(m, "translation", it.id, k, text))
        for i, it in enumerate(sets["layout"]):
            for k in range(2):
                j = (i + k + (mi if i % 4 == 0 else 0)) % len(PROGRAMS)  # the second model differs on every 4th prompt
                rows.append(_row(m, "layout", it.id, k, PROGRAMS[j]))
    return rows


def _row(model: str, task: str, pid: str, k: int, text: str) -> dict:
    return {"task": task, "prompt_id": pid, "model": model, "protocol": "few-shot-2", "medium": "v1", "sample": k,
            "seed": 0, "temperature": 0.0 if k == 0 else 0.7, "prefix": "", "text": text, "code": None, "n_tokens": 1,
            "stop": "eos", "entropy": [0.1], "mean_entropy": 0.1}


def _values(run: Path, names: dict[str, str]) -> dict:
    """The run's result values, model paths replaced by stable names, integrity fields left out."""
    from activations.store import ActivationStore

    def clean(obj):
        if isinstance(obj, dict):
            return {k: clean(v) for k, v in sorted(obj.items()) if k not in ("_crc", "input", "perm_seed")}
        if isinstance(obj, list):
            return [clean(v) for v in obj]
        if isinstance(obj, str):
            return names.get(obj, obj)
        return obj

    def rows(name):
        from experiments.rundir import read_rows

        return clean(read_rows(run / name))

    out: dict = {}
    out["translation_scores"] = rows("translation_scores.jsonl")
    out["layout_table"] = clean(json.loads((run / "layout_table.json").read_text()))
    out["probes"] = rows("probes.jsonl")
    out["interventions"] = rows("interventions.jsonl")
    out["cuts"] = rows("intervention_cuts.jsonl")
    out["patching"] = rows("patching.jsonl")
    out["interventions_table"] = clean(json.loads((run / "interventions_table.json").read_text()))
    out["summary"] = clean(json.loads((run / "summary.json").read_text()))
    renders = _renders(run)
    out["renders"] = {clean(k): {"outcome": v["outcome"], "reason": clean(v["reason"]), "trivial": v["trivial"],
                                 "dominant_share": round(v["dominant_share"], 6), "background": [int(x) for x in v["background"]],
                                 "pixels_sha": hashlib.sha256(np.ascontiguousarray(v["pixels"]).tobytes()).hexdigest()[:16]}
                      for k, v in sorted(renders.items())}
    acts = {}
    for path, name in names.items():
        st = ActivationStore(_activation_path(run, path))
        acts[name] = {"prompt_ids": st.prompt_ids, "tasks": st.tasks, "token_positions": st.token_positions.tolist(),
                      "layers": [[round(float(st.layer(L).mean()), 6), round(float(st.layer(L).std()), 6)]
                                 for L in range(st.shape[1])]}
    out["activations"] = acts
    page = (run / "report" / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"<img[^>]*>", "[img]", page)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = re.sub(r"\s+", " ", text).strip()
    # results only: the settings table is metadata (its heading is the page's last "Configuration": the table of contents
    # at the top names it too, and cutting there would keep nothing of the results)
    out["report_text"] = clean(text[: text.rfind("Configuration")])
    return out


def _renders(run: Path) -> dict:
    from experiments.stages.render import read_renders

    return read_renders(run)


def _activation_path(run: Path, model: str) -> Path:
    from experiments.rundir import RunDir

    return RunDir(run).activations(model)


#: selections are pinned exactly: a chosen layer, PCA size or ridge penalty may never move with the machine. A penalty
#: is a point of the grid np.logspace makes, whose last bits follow numpy's SIMD loops (5.7e-14 measured with them
#: capped at x86-64-v2): the same point is the same float to SAME_POINT (relative; the grid's points are 3.2x apart)
SELECTIONS = ("k", "alpha", "layer", "chosen_layers", "best_layer")
SAME_POINT = 1e-12
#: the values computed from the activations, which carry the forward pass's instruction-set noise: field -> absolute
#: tolerance, ten times the largest spread measured (module docstring) rounded up to a power of ten. Any other float
#: (renders, translation scores, layout and intervention tables, lexical baselines, ceilings: measured identical) to
#: EXACT; every selection, count, outcome, string and verdict exactly.
STATISTIC = 1e-3  # measured: R^2, Delta, se 2.0e-5; interval ends 6.9e-5; permutation-null means 9.0e-5; inner R^2 6.1e-5
P_VALUE = 1e-2  # measured 0.001 (p), 0.002 (q): a p moves by whole permutations (1/(n+1)), a q with its p
TOLERANCES = {
    "layers": 1e-5,  # activations' per-layer mean and std (6 decimals): spread 0 measured (7.5e-9 in the raw values)
    **dict.fromkeys(("r2", "r2_mean", "se", "r2_resid", "delta_r2", "delta_mean", "delta_beyond", "ci", "delta_ci",
                     "text_readable", "inner_r2", "r2_of_residual"), STATISTIC),  # r2_of_residual: 8e-6 measured
    "null_mean": 1e-2,  # the permutation null's mean: 9.0e-5 on the Xeon, 3.9e-4 on the EPYC (docstring)
    **dict.fromkeys(("p_perm", "p_fl", "p_fl_delta", "p_fl_residual", "q_bh"), P_VALUE),
}
#: the other floats: measured identical; sums in another order (numpy's SIMD loops differ by CPU) could leave the last
#: bits, so 1e-9, far below any change of a result
EXACT = 1e-9
#: a number in the report's text, printed to 3 significant digits (experiments/numbers.py)
NUMBER = re.compile(r"-?\d+(?:\.(\d+))?(?:e([-+]?\d+))?")
#: a number in the report may move by its value's tolerance (STATISTIC; a p's P_VALUE is 10 units of the 3 decimals it
#: is printed with) plus REPORT_UNITS of its last printed digit, as the value can round either way (measured: 1 unit);
#: a number printed without decimals (a count) exactly
REPORT_UNITS = 2
#: a continuation the tiny model samples (144 rows, temperature 0.7, each with its recorded seed) draws each token by
#: comparing a seeded uniform with the cumulative probabilities, which carry the forward pass's noise: a draw that
#: lands within that noise of a boundary takes the neighbouring token on another CPU, and the text branches from there.
#: Measured: 0 of 144 on the Intel Xeon's variants (module docstring); 1 of 144 on an AMD EPYC with AVX-512 under
#: ATEN_CPU_CAPABILITY=default (issue 29), its outcomes (continued, code_after, overlap, ...) unchanged. So at most
#: BRANCHES texts may differ, and every other field of their rows, and the tables built from them, exactly.
BRANCHES = 3


def report_numbers(text: str) -> tuple[str, list[str]]:
    """The report's words with each number replaced by '#', and the numbers as printed: the words (every verdict) are
    compared exactly, the numbers within REPORT_UNITS of their last printed digit."""
    return NUMBER.sub("#", text), [m.group(0) for m in NUMBER.finditer(text)]


def _unit(token: str) -> float:
    """The value of one unit in the last printed digit of a number ('0.0031' -> 1e-4, '1.2e-05' -> 1e-6, '30' -> 1)."""
    m = NUMBER.fullmatch(token)
    return 10.0 ** (-len(m.group(1) or "") + int(m.group(2) or 0))


def _report_close(a: str, b: str) -> list[str]:
    (wa, na), (wb, nb) = report_numbers(a), report_numbers(b)
    if wa != wb:
        i = next((i for i, (x, y) in enumerate(zip(wa, wb)) if x != y), min(len(wa), len(wb)))
        return [f".report_text: the words differ at {i}: {wa[max(0, i - 60):i + 60]!r} vs {wb[max(0, i - 60):i + 60]!r}"]
    out = []
    for i, (x, y) in enumerate(zip(na, nb)):
        integral = "." not in x + y and "e" not in x + y
        allowed = STATISTIC + REPORT_UNITS * max(_unit(x), _unit(y))
        if integral and x != y or not integral and abs(float(x) - float(y)) > allowed * (1 + 1e-9):
            out.append(f".report_text number {i}: {x} vs {y}")
    return out


def _name(path: str) -> str:
    """A leaf's field name: the last key of its path, list indices dropped (.probes[3].ci[0] -> ci)."""
    return re.sub(r"\[\d+\]", "", path.rsplit(".", 1)[-1])


def _close(a, b, path="") -> list[str]:
    """Differences between two value trees: selections (SELECTIONS) and everything but floats exactly; the floats
    computed from the activations (in `probes` and `activations`) to TOLERANCES, every other float to EXACT; the
    report's text by `_report_close`."""
    name = _name(path)
    if name in SELECTIONS:
        same = a == b or (isinstance(a, float) and isinstance(b, float) and abs(a - b) <= SAME_POINT * abs(a))
        return [] if same else [f"{path}: selection {a!r} vs {b!r}"]
    if path == ".report_text" and isinstance(a, str) and isinstance(b, str):
        return _report_close(a, b)
    if name == "continuation" and path.startswith(".interventions[") and isinstance(a, str) and isinstance(b, str):
        return [] if a == b else [f"branch {path}: {a[:60]!r} vs {b[:60]!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{path}.{k}: only in {'golden' if k in a else 'this run'}")
            else:
                out += _close(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _close(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        section = path.split(".")[1].split("[")[0] if path.count(".") else ""
        tol = TOLERANCES.get(name, EXACT) if section in ("probes", "activations") else EXACT
        return [] if abs(a - b) <= tol * (1 + 1e-9) else [f"{path}: {a} vs {b} (tolerance {tol:g})"]
    return [] if a == b else [f"{path}: {str(a)[:120]!r} vs {str(b)[:120]!r}"]


def run_golden(root: Path, env: dict[str, str] | None = None) -> tuple[Path, dict[str, str]]:
    """The golden study run in `root` by `ambench run` in a subprocess (whose environment `env` extends: how
    tests/experiments/golden_spread.py emulates other CPUs), with the models named by relative paths from the run's
    parent folder: an attempt's key (and so every derived seed) holds the model name, which must not depend on where
    the test runs."""
    from experiments.rundir import RunDir

    build_tiny(root / "a")
    shutil.copytree(root / "a", root / "b")
    out = root / "run"
    with RunDir.writer(out, "golden test") as rd:
        rd.append(RunDir.GENERATIONS, _rows(["a", "b"]))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), **(env or {}))
    res = subprocess.run([sys.executable, "-m", "experiments.cli", "run", "--model", "a", "--model", "b", "--out", "run", *ARGS],
                         capture_output=True, text=True, env=env, timeout=900, cwd=root)
    assert res.returncode == 0, res.stderr[-3000:]
    return out, {"a": "model-a", "b": "model-b"}


#: one worker runs this module (test.sh: --dist loadgroup): its module fixture is a whole study (~60 CPU s), which
#: `--dist load` built again on the second worker whenever the module's tests were dealt to both
pytestmark = pytest.mark.xdist_group("golden")


@pytest.fixture(scope="module")
def golden_run(tmp_path_factory):
    return run_golden(tmp_path_factory.mktemp("golden"))


def test_the_study_gives_the_pinned_values(golden_run):
    run, names = golden_run
    got = _values(run, names)
    if os.environ.get("AMBENCH_GOLDEN") == "update":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
        pytest.skip("golden values written")
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    diffs = golden_differences(want, got)
    assert not diffs, f"{len(diffs)} values differ from the golden study:\n" + "\n".join(diffs[:40])


def golden_differences(want: dict, got: dict) -> list[str]:
    """`_close`'s differences, a sampled continuation that branched counted as one only past BRANCHES of them."""
    diffs = _close(want, got)
    branched = [d for d in diffs if d.startswith("branch ")]
    rest = [d for d in diffs if not d.startswith("branch ")]
    if len(branched) > BRANCHES:
        rest.append(f"{len(branched)} sampled continuations branched (at most {BRANCHES} may): " + "; ".join(branched[:5]))
    return rest


def test_a_branched_continuation_is_allowed_only_alone_and_with_its_outcomes_unchanged():
    """The comparison can fail: one branched text passes; more than BRANCHES fail, and so does a branched row whose
    outcome changed, and any other string."""
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = json.loads(json.dumps(want))
    got["interventions"][130]["continuation"] += " and then some"
    assert golden_differences(want, got) == []
    for r in got["interventions"][:BRANCHES]:
        r["continuation"] = "x" + r["continuation"]
    assert any("branched" in d for d in golden_differences(want, got))
    got = json.loads(json.dumps(want))
    got["interventions"][130]["continuation"] += " and then some"
    got["interventions"][130]["continued"] = not got["interventions"][130]["continued"]
    assert [d.split(":")[0] for d in golden_differences(want, got)] == [".interventions[130].continued"]
    got = json.loads(json.dumps(want))
    got["interventions"][130]["statement"] += "x"
    assert golden_differences(want, got)


def test_both_models_get_interventions_and_patching(golden_run):
    """The audit's failure: the second model, whose programs mostly coincide with the first's, got 0
    continuations and 0 patching rows while the summary looked complete."""
    from experiments.rundir import AttemptKey, read_rows

    run, names = golden_run
    inter = read_rows(run / "interventions.jsonl")
    patch = read_rows(run / "patching.jsonl")
    counts = json.loads((run / "summary.json").read_text())["interventions"]
    for m in names:
        mine = [r for r in inter if r["model"] == m]
        assert len({(AttemptKey.of(r), r["cut"]) for r in mine}) == 6 and any(r["model"] == m for r in patch)
        assert {c["model"]: c["continuations"] for c in counts}[m] == len(mine)
    page = (run / "report" / "index.html").read_text()
    assert page.index("Summary") < page.index("Exp. 3, stage 2") < page.index("Configuration")
