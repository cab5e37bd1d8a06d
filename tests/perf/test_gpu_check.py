"""The GPU check (perf/gpu_check.sh): every check can fail, the carried files fit a call, and the CPU dry run passes.

The checks' judges are fed perturbed comparisons (a token that is not a tie, a capture off by 10% or one
position, a patch hook that writes a little more than it read, a continuation whose cache is laid out the
old way, a flipped organism verdict, a slow runtime) and must fail them; the same checks pass on the real
outputs. The dry run itself (`GPU_CHECK_DEVICE=cpu bash perf/gpu_check.sh`) runs at the end, on the real
models, as CI's proof that the script works.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"perf_{name}", ROOT / "perf" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gc = _module("gpu_check")
carry = _module("gpu_carry")
SMALL = gc.Sizes(batches=(1, 2), new_tokens=4, short_prompts=True, bench_batches=(1,), bench_tokens=2, bench_repeats=1,
                 capture_prompts=2, continue_tokens=3, continue_suffixes=3, continue_dtypes=("float32",), continue_beyond=12,
                 stage_model="tiny", stage_prompts=2, stage_tokens=4, organisms="off", pytest_select=None, deadline_s=60)
TEXTS = ["Draw the flag of Germany. A cat sitting on a mat under a light blue sky.", "You write short Python programs that draw"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _prompts(rt):
    return [rt.tokenizer(t)["input_ids"] for t in TEXTS]


def test_token_judge_allows_only_near_ties():
    same = gc.judge_tokens([[1, 2, 3]], [[1, 2, 3]], lambda *a: 1.0, 2 ** -6)
    tie = gc.judge_tokens([[1, 2, 4]], [[1, 2, 3]], lambda *a: 0.0, 2 ** -6)
    real = gc.judge_tokens([[1, 2, 4]], [[1, 2, 3]], lambda *a: 0.3, 2 ** -6)
    short = gc.judge_tokens([[1, 2]], [[1, 2, 3]], lambda *a: 0.0, 2 ** -6)
    assert same[0] and tie[0] and "near tie" in tie[1]
    assert not real[0] and "row 0 at step 2" in real[1] and not short[0] and "lengths 2 and 3" in short[1]
    assert not gc.judge_tokens([[1]], [[1], [1]], lambda *a: 0.0, 1.0)[0]  # a missing row


def test_generation_check_passes_and_a_perturbed_token_fails_on_a_real_model(tiny):
    rows = gc.check_generation(tiny, "tiny", _prompts(tiny), SMALL)
    assert [r.status for r in rows] == ["pass", "pass"] and "2/2 identical" in rows[0].result
    from interp.runtime import Sampling

    prompts = _prompts(tiny)
    got = [g.tokens for g in tiny.generate(prompts, [Sampling()] * 2, gc.greedy_rule(4))]
    with torch.inference_mode():  # the least likely token at step 2 of row 0: far from any tie
        logits = tiny.model(input_ids=torch.tensor([prompts[0] + got[0][:2]])).logits[0, -1]
    bad = [list(got[0]), list(got[1])]
    bad[0][2] = int(logits.argmin())
    ok, text, _ = gc.judge_tokens(bad, got, gc.margin_fn(tiny, prompts, got), gc.TOLERANCES.tie_rel["float32"])
    assert not ok and "below the best logit" in text


def test_capture_check_fails_a_wrong_position_and_noise(tiny):
    prompts = _prompts(tiny)
    pos = [[0, len(p) // 2, len(p) - 1] for p in prompts]
    [row] = gc.check_capture(tiny, tiny, "tiny", prompts, pos)
    assert row.status == "pass" and max(row.values["layer_rel"]) == 0.0

    class Shifted:  # the bug the check is for: one position off on the device
        info = tiny.info

        def capture(self, p, positions):
            return tiny.capture(p, [[max(0, x - 1) for x in ps] for ps in positions])

    class Noisy:
        info = tiny.info

        def capture(self, p, positions):
            a = tiny.capture(p, positions)
            return a + 0.1 * a.norm(dim=-1, keepdim=True) * torch.randn(a.shape, generator=torch.Generator().manual_seed(0)) / a.shape[-1] ** 0.5

    for dev in (Shifted(), Noisy()):
        assert gc.check_capture(dev, tiny, "tiny", prompts, pos)[0].status == "fail"
    assert not gc.judge_capture([0.01, float("nan")], [0.01, 0.01], 0.05, 0.25)[0]


def test_noop_check_passes_and_fails_when_the_patch_writes_other_values(tiny, monkeypatch):
    rows = gc.check_noops(tiny, "tiny", _prompts(tiny), SMALL)
    assert [r.status for r in rows] == ["pass", "pass"] and rows[1].values["control_changed"]
    import hooks.patch

    real = hooks.patch.replace_last

    def off_by_a_little(donor):
        return real(donor + 1e-3)

    monkeypatch.setattr(hooks.patch, "replace_last", off_by_a_little)
    rows = gc.check_noops(tiny, "tiny", _prompts(tiny), SMALL)
    assert rows[0].status == "fail" and "own values" in rows[0].result


def test_continuation_check_fails_when_the_cache_is_not_shifted(tmp_path, monkeypatch):
    from interp.runtime import Runtime
    from tests.interp.archs import WINDOW, build_arch

    rt = Runtime.from_folder(build_arch("gemma3", tmp_path / "g3"))
    assert gc.window_of(rt) == WINDOW
    [row] = gc.check_continuation(rt, "tiny-gemma3", SMALL)
    assert row.status == "pass", row.result
    from interp.runtime import kv

    real = kv.shift_rows
    monkeypatch.setattr(kv, "shift_rows", lambda cache, shift: real(cache, [0] * len(shift)))  # padding inside the window
    [row] = gc.check_continuation(rt, "tiny-gemma3", SMALL)
    assert row.status == "fail"


def test_verdict_and_speed_judges_fail():
    ref = [{"organism": "tracker", "method": "m", "recovered": True}, {"organism": "x", "method": "p", "recovered": None}]
    assert gc.judge_verdicts(ref, ref)[0]
    flipped = [dict(ref[0], recovered=False), ref[1]]
    ok, text, _ = gc.judge_verdicts(flipped, ref)
    assert not ok and "tracker / m: False vs reference True" in text
    assert not gc.judge_verdicts(ref[:1], ref)[0] and not gc.judge_verdicts([], [])[0]
    assert gc.judge_speed({"runtime": 0.95, "runtime+patch": 0.5}, 0.9, gated=True) == "fail"
    assert gc.judge_speed({"runtime": 1.0, "runtime+patch": 0.9}, 0.9, gated=True) == "pass"
    assert gc.judge_speed({"runtime": 0.5}, 0.9, gated=False) == "info"


def test_loads_fit_a_call_and_the_wheels_ride_last():
    room = 50 << 20
    sizes = [98_362_432, 253_000_000]
    parts, n = carry.layout(sizes, 4 << 20, room)
    per_load = {}
    for fi, _, offset, size, load in parts:
        per_load[load] = per_load.get(load, 0) + size
    assert all(v <= room - carry.SLACK for v in per_load.values())
    for fi, total in enumerate(sizes):  # every file covered once, in order
        mine = [(o, s) for f, _, o, s, _ in parts if f == fi]
        assert mine[0][0] == 0 and all(a[0] + a[1] == b[0] for a, b in zip(mine, mine[1:])) and sum(s for _, s in mine) == total
    assert per_load.get(n, 0) + (4 << 20) <= room - carry.SLACK and n == 7  # 351 MB over 49.9 MiB loads
    assert carry.layout([], 4 << 20, room) == ([], 1)
    with pytest.raises(ValueError, match="do not fit"):
        carry.layout([1], room, room)


def test_this_tree_leaves_room_in_a_call():
    assert carry.tree_bytes() < carry.LIMIT - carry.MARGIN - (8 << 20)  # the wheels (3.8 MiB) and a model part fit


def test_staged_parts_join_only_when_complete_and_intact(tmp_path):
    import zlib

    data = bytes(range(256)) * 1000
    z = zlib.compress(data, 6)
    parts = [z[: len(z) // 2], z[len(z) // 2:]]  # the deflated file cut in two, as pack writes it
    manifest = {"files": [{"model": "m", "name": "m.gguf", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                           "parts": [{"name": f"m.gguf.part-{i:02d}", "size": len(p), "load": i + 1} for i, p in enumerate(parts)]}]}
    repo, into = tmp_path / "repo", tmp_path / "stage"
    for i, p in enumerate(parts):
        (repo / ".gpu" / f"load-{i + 1}").mkdir(parents=True)
        (repo / ".gpu" / f"load-{i + 1}" / f"m.gguf.part-{i:02d}").write_bytes(p)
        (repo / ".gpu" / f"load-{i + 1}" / "manifest.json").write_text(json.dumps(manifest))
    (repo / ".gpu" / "load-2" / "m.gguf.part-01").rename(tmp_path / "later")
    assert carry.stage(repo, into)["missing"] == {"m": [2]}  # the first call: one part staged
    (tmp_path / "later").rename(repo / ".gpu" / "load-2" / "m.gguf.part-01")
    assert carry.stage(repo, into)["models"] == {"m": str(into / "gguf" / "m.gguf")}
    assert (into / "gguf" / "m.gguf").read_bytes() == data and not list((into / "parts").iterdir())
    (into / "gguf" / "m.gguf").unlink()
    (repo / ".gpu" / "load-2" / "m.gguf.part-01").write_bytes(b"x" * len(parts[1]))
    with pytest.raises(SystemExit, match="do not match"):
        carry.stage(repo, into)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.xdist_group("real-models")  # beside tests/interp/test_real_models.py: the models converted once
def test_the_cpu_dry_run_passes(tmp_path):
    """`GPU_CHECK_DEVICE=cpu bash perf/gpu_check.sh` on the real models: every check, every row passing (2.5-5 minutes
    on the shared 2-core machine at load 6-12; docs/runtime.md has its table)."""
    env = {**os.environ, "GPU_CHECK_DEVICE": "cpu", "OUT": str(tmp_path), "GPU_CHECK_STAGE": str(tmp_path / "stage")}
    done = subprocess.run(["bash", "perf/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    failed = [f"{r['check']} | {r['model']} | {r['result']}" for r in report["rows"] if r["status"] == "fail"]
    assert done.returncode == 0 and report["ok"], "\n".join(failed) or done.stdout[-3000:]
    checks = " ".join(r["check"] for r in report["rows"])
    for kind in ("greedy = HF generate", "batched = one at a time", "capture", "identity patch", "zero steering",
                 "continuation = alone", "tokens/s", "generate stage", "tests marked gpu", "organisms: same verdicts"):
        assert kind in checks
    assert {r["model"] for r in report["rows"]} >= {"smollm2-135m-instruct", "gemma3-270m", "organism:xor-planner", "organism:tracker"}
    assert (tmp_path / "gpu_check.md").read_text().startswith("# GPU check: every row passes")
    assert np.isfinite(report["meta"]["seconds"])
