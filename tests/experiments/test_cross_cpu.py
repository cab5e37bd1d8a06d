"""The forward pass under other CPUs' kernels: results within the stated tolerance, the same selections (issue 29).

PyTorch picks its CPU kernels by instruction set (ATen: AVX-512, AVX2 or default code; MKL and oneDNN their own), so
the float32 activations differ in the last bits from one CPU to the next, and so does every value computed from them.
The golden test (tests/experiments/test_golden.py) allows for that with tolerances measured across instruction sets;
this test checks that claim on the machine it runs on: the capture stage runs in a subprocess under each
ATEN_CPU_CAPABILITY level this CPU has (the variable is set for the subprocess only, to emulate another CPU; a level
the CPU lacks is skipped, as ATen would fall back to a lower one), on the golden run's prompts and models, and
- its activations agree with the committed ones (tests/experiments/golden/probe_inputs.npz) to ACTIVATIONS;
- the probe stage on them gives rows that agree with the pinned rows on the committed activations
  (golden/probes_on_stored.json) to the golden test's TOLERANCES, every selection and count identical.
And, as issue 19 did for numpy's BLAS: under OPENBLAS_CORETYPE=Haswell the capture is identical (torch does not use
OpenBLAS; the probe stage's own exactness under that kernel is tests/experiments/test_probe_exactness.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.experiments.golden_spread import supported
from tests.experiments.test_golden import STATISTIC, _close
from tests.experiments.test_probe_exactness import EXPECTED, INPUTS, MODELS, build_run, probes_file, rows_of

ROOT = Path(__file__).resolve().parents[2]
#: the activations' tolerance (absolute; the tiny model's activations are ~0.02 in size): measured across
#: ATEN_CPU_CAPABILITY default/avx2/avx512 with MKL and oneDNN capped at AVX2 or SSE4.2 (golden_spread.py), 7.5e-9 at most
ACTIVATIONS = 1e-6
LEVELS = ["default", "avx2", "avx512"]

CAPTURE = """
import sys
from pathlib import Path
from experiments.rundir import RunDir
from experiments.stages.capture import CaptureSettings, capture_stage
from interp.runtime import Runtime
run = Path(sys.argv[1])
rd = RunDir(run)
order = rd.prompt_order()
items = [rd.prompts()[k] for k in sorted(order, key=order.get)]
for m in sys.argv[2:]:
    rt = Runtime.from_folder(run.parent / m, name=m)
    capture_stage(rt, items, run, CaptureSettings("few-shot", 2, batch_size=8), model=m)  # the golden study's settings
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """The golden study's two models (one tiny random Llama under two names), beside which each run is made."""
    from tests.interp.tiny import build_tiny

    root = tmp_path_factory.mktemp("cross-cpu")
    build_tiny(root / "a")
    shutil.copytree(root / "a", root / "b")
    return root


def capture(models: Path, name: str, env: dict[str, str]) -> Path:
    """The golden prompts captured in a subprocess under `env`; the run (generations, prompts, activations)."""
    run = build_run(INPUTS, models / name, activations=False)
    res = subprocess.run([sys.executable, "-c", CAPTURE, str(run), *MODELS], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), **env), cwd=ROOT, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return run


def stored(run: Path, model: str) -> dict[str, np.ndarray]:
    from activations.store import ActivationStore
    from experiments.rundir import RunDir

    st = ActivationStore(RunDir(run).activations(model), RunDir(run).prompt_order())
    return {"resid": np.stack([st.layer(L) for L in range(st.shape[1])], axis=1), "prompt_ids": np.array(st.prompt_ids),
            "token_positions": st.token_positions, "digest": np.array(st.meta["model"]["weights_digest"])}


def committed(model: str) -> dict[str, np.ndarray]:
    z = np.load(INPUTS)
    return {"resid": z[f"{model}/resid"], "prompt_ids": z[f"{model}/prompt_ids"], "token_positions": z[f"{model}/token_positions"],
            "digest": np.array(json.loads(str(z[f"{model}/meta"]))["model"]["weights_digest"])}


def activation_differences(a: dict[str, np.ndarray], b: dict[str, np.ndarray], tol: float) -> list[str]:
    out = [f"{k} differs" for k in ("prompt_ids", "token_positions", "digest") if not np.array_equal(a[k], b[k])]
    if not out:
        worst = float(np.abs(a["resid"].astype(np.float64) - b["resid"]).max())
        if not worst <= tol:
            out.append(f"activations differ by {worst:.3g} (tolerance {tol:g})")
    return out


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_capture_under_each_cpu_capability_agrees(models, level):
    if not supported({"ATEN_CPU_CAPABILITY": level}):
        pytest.skip(f"this CPU lacks {level}")
    run = capture(models, level, {"ATEN_CPU_CAPABILITY": level})
    for m in MODELS:
        diffs = activation_differences(committed(m), stored(run, m), ACTIVATIONS)
        assert not diffs, f"{m} under ATEN_CPU_CAPABILITY={level}: " + "; ".join(diffs)
    got = rows_of(probes_file(run))
    diffs = _close({"probes": json.loads(EXPECTED.read_text(encoding="utf-8"))}, {"probes": got})
    assert not diffs, f"{len(diffs)} probe values beyond the tolerances under {level}:\n" + "\n".join(diffs[:30])


@pytest.mark.slow
@pytest.mark.skipif(not supported({"ATEN_CPU_CAPABILITY": "avx2"}), reason="OpenBLAS's Haswell kernel needs AVX2")
def test_capture_is_identical_under_another_openblas_kernel(models):
    native = capture(models, "native", {})
    haswell = capture(models, "haswell", {"OPENBLAS_CORETYPE": "Haswell"})
    for m in MODELS:
        assert not activation_differences(stored(native, m), stored(haswell, m), 0.0)


def test_the_comparisons_can_fail():
    """A selection that moved, a value beyond its tolerance and an activation beyond ACTIVATIONS are each reported."""
    want = json.loads(EXPECTED.read_text(encoding="utf-8"))
    row = next(i for i, r in enumerate(want) if r.get("chosen"))
    moved = json.loads(json.dumps(want))
    moved[row]["chosen"][0]["k"] += 1
    assert any("selection" in d for d in _close({"probes": want}, {"probes": moved}))
    r2 = next(i for i, r in enumerate(want) if isinstance(r.get("r2"), float))
    moved = json.loads(json.dumps(want))
    moved[r2]["r2"] += 2 * STATISTIC
    assert _close({"probes": want}, {"probes": moved})
    moved[r2]["r2"] -= 1.5 * STATISTIC  # within the tolerance
    assert not _close({"probes": want}, {"probes": moved})
    a = committed("a")
    b = dict(a, resid=a["resid"] + np.float32(2e-6))
    assert activation_differences(a, b, ACTIVATIONS) and not activation_differences(a, a, 0.0)
