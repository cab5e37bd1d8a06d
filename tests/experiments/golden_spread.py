"""Measure how far the golden study's values move across CPU instruction sets (issue 29).

The float32 forward pass runs different kernels on different CPUs (PyTorch's ATen picks AVX-512, AVX2 or default
code, MKL and oneDNN pick their own, OpenBLAS picks by core type), so activations differ in the last bits and every
value computed from them carries that noise. The golden test's tolerances (tests/experiments/test_golden.py,
TOLERANCES) are derived from the spread this script prints: it runs the golden study under each emulated CPU (the
environment variables below, set for the study's subprocess only), and for every field prints the largest difference
from the machine's native run, and whether any selection, count, outcome or string differs.

    .venv/bin/python -m tests.experiments.golden_spread --out /tmp/spread      # all variants (~80 s each, 2 cores)
    .venv/bin/python -m tests.experiments.golden_spread --out /tmp/spread --only native avx2

Variants whose instruction set the CPU lacks are skipped (ATen would fall back silently and measure nothing new).
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

import numpy as np

#: numpy's own SIMD loops (reductions among them) dispatched above its x86-64-v2 baseline: disabled, numpy runs as on
#: an old CPU (numpy 2.x names; an unknown name is refused by numpy at import, so the variant fails loudly)
NUMPY_ABOVE_BASELINE = "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"
#: emulated CPUs: the environment of the study's subprocess. ATEN_CPU_CAPABILITY caps PyTorch's own kernels,
#: MKL_ENABLE_INSTRUCTIONS and ONEDNN_MAX_CPU_ISA cap the GEMM and oneDNN libraries it calls, OPENBLAS_CORETYPE picks
#: numpy/scipy's BLAS kernel (issue 19's case: an AMD EPYC ran the Haswell kernel)
VARIANTS: dict[str, dict[str, str]] = {
    "native": {},
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
    "aten-avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
    "openblas-haswell": {"OPENBLAS_CORETYPE": "Haswell"},
    "aten-avx2+openblas-haswell": {"ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell"},
    "aten-default+openblas-haswell": {"ATEN_CPU_CAPABILITY": "default", "OPENBLAS_CORETYPE": "Haswell"},
    "avx2-machine": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                     "OPENBLAS_CORETYPE": "Haswell"},
    "sse-machine": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41",
                    "OPENBLAS_CORETYPE": "Nehalem"},
    "numpy-baseline": {"NPY_DISABLE_CPU_FEATURES": NUMPY_ABOVE_BASELINE},
    "oldest-machine": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41",
                       "OPENBLAS_CORETYPE": "Nehalem", "NPY_DISABLE_CPU_FEATURES": NUMPY_ABOVE_BASELINE},
}


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    return set(m.group(1).split()) if m else set()


def supported(env: dict[str, str], flags: set[str] | None = None) -> bool:
    """Whether this CPU runs the capability `env` asks ATen for (asking for more than the CPU has falls back)."""
    flags = cpu_flags() if flags is None else flags
    cap = env.get("ATEN_CPU_CAPABILITY", "default")
    need = {"default": set(), "avx2": {"avx2", "fma"}, "avx512": {"avx512f", "avx512bw", "avx512vl", "avx512dq"}}[cap]
    return need <= flags


def flatten(tree, path: str = "") -> dict[str, object]:
    """Leaf values by path; the report's text split into its words with every number a leaf of its own."""
    if isinstance(tree, dict):
        return {k: v for key in sorted(tree) for k, v in flatten(tree[key], f"{path}.{key}").items()}
    if isinstance(tree, list):
        return {k: v for i, x in enumerate(tree) for k, v in flatten(x, f"{path}[{i}]").items()}
    return {path: tree}


def field(path: str) -> str:
    """A leaf's field: its path without list indices or render keys (probes[3].chosen[1].inner_r2 ->
    probes.chosen.inner_r2)."""
    return re.sub(r"\[\d+\]", "", re.sub(r'^\.renders\.\[.*\]\.', ".renders.", path))


def compare(base: dict, other: dict) -> tuple[dict[str, float], list[str]]:
    """The largest absolute difference per float field, and every non-float leaf that differs."""
    from tests.experiments.test_golden import _unit, report_numbers

    a = flatten({k: v for k, v in base.items() if k != "report_text"})
    b = flatten({k: v for k, v in other.items() if k != "report_text"})
    spread: dict[str, float] = {}
    exact: list[str] = []
    for p in sorted(set(a) | set(b)):
        x, y = a.get(p), b.get(p)
        if isinstance(x, float) and isinstance(y, (int, float)) and not isinstance(y, bool):
            f = field(p)
            spread[f] = max(spread.get(f, 0.0), abs(x - y))
        elif x != y:
            exact.append(f"{p}: {x!r} vs {y!r}")
    (ta, na), (tb, nb) = report_numbers(base["report_text"]), report_numbers(other["report_text"])
    if ta != tb or len(na) != len(nb):
        exact.append("report_text: the words differ")
    else:
        spread["report_text.numbers (units of the last printed digit)"] = max(
            (abs(float(x) - float(y)) / max(_unit(x), _unit(y)) for x, y in zip(na, nb)), default=0.0)
    return spread, exact


def activation_spread(run_a: Path, run_b: Path) -> float:
    """The largest absolute difference between the two runs' stored activations (every model, layer, position)."""
    from activations.store import ActivationStore
    from experiments.rundir import RunDir

    worst = 0.0
    for m in ("a", "b"):
        sa, sb = ActivationStore(RunDir(run_a).activations(m)), ActivationStore(RunDir(run_b).activations(m))
        for L in range(sa.shape[1]):
            worst = max(worst, float(np.abs(np.asarray(sa.layer(L), np.float64) - np.asarray(sb.layer(L), np.float64)).max()))
    return worst


def main() -> None:
    from tests.experiments.test_golden import _values, run_golden

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="folder for the runs and each variant's values (default: a temp folder)")
    ap.add_argument("--only", nargs="*", default=None, help="variant names (default: all)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="golden-spread-"))
    names = [n for n in (args.only or VARIANTS) if n in VARIANTS]
    if "native" not in names:
        names.insert(0, "native")
    runs: dict[str, Path] = {}
    values: dict[str, dict] = {}
    for n in names:
        if not supported(VARIANTS[n]):
            print(f"{n}: skipped, this CPU lacks {VARIANTS[n]['ATEN_CPU_CAPABILITY']}")
            continue
        root = out / n
        done = root / "values.json"
        if done.exists():
            values[n] = json.loads(done.read_text())
            runs[n] = root / "run"
        else:
            root.mkdir(parents=True, exist_ok=True)
            run, stable = run_golden(root, VARIANTS[n])
            values[n], runs[n] = _values(run, stable), run
            done.write_text(json.dumps(values[n], sort_keys=True))
        print(f"{n}: done ({VARIANTS[n] or 'the environment as it is'})", flush=True)
    from tests.experiments.test_golden import GOLDEN

    # the pinned values, made on the developers' machine (another CPU): one more variant
    values["pinned golden.json"] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    worst: dict[str, float] = {}
    for n in values:
        if n == "native":
            continue
        spread, exact = compare(values["native"], values[n])
        act = activation_spread(runs["native"], runs[n]) if n in runs else float("nan")
        moved = sum(1 for v in spread.values() if v > 0)
        print(f"\n== {n}: activations max |diff| {act:.3g}; {moved} float fields moved; {len(exact)} exact values differ")
        for e in exact[:20]:
            print("   EXACT", e)
        for f, v in spread.items():
            worst[f] = max(worst.get(f, 0.0), v)
    print("\n== the largest difference from 'native' per float field, over all variants")
    for f, v in sorted(worst.items(), key=lambda kv: -kv[1]):
        if v > 0:
            print(f"{v:12.3g}  {f}")
    print(f"{'0':>12}  the other {sum(1 for v in worst.values() if v == 0)} float fields")


if __name__ == "__main__":
    main()
