"""experiments/consistency.py and `ambench consistency` on synthetic run directories with constructed answers."""

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.rundir import RunDir, read_rows
from experiments.stages.consistency import (CONSISTENCY, ConsistencySettings, analysis_set, consistency_stage,
                                            dino_consistency, entropy_confound)
from experiments.stages.render import render_input, row_key
from tests.interp.tiny_dino import build_tiny_dino

# two prompts per tier from the real prompt set, so tiers and subcategories come from bench.layout
PROMPTS = ["1A-00", "1C-03", "1E-01", "2A-00", "2C-04", "2E-02", "3A-00", "3B-01", "3E-05"]
COLOURS = np.array([(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180), (0, 0, 0)], np.uint8)


def picture(rng, n=24):
    """A white canvas with three to six random coloured rectangles (non-trivial)."""
    px = np.full((n, n, 3), 255, np.uint8)
    for _ in range(rng.integers(3, 7)):
        r, c = rng.integers(0, n - 4, 2)
        h, w = rng.integers(3, 10, 2)
        px[r:r + h, c:c + w] = COLOURS[rng.integers(len(COLOURS))]
    return px


def noisy(px, rng, share):
    """`px` with a share of its cells repainted at random (0: identical attempts)."""
    out = px.copy()
    mask = rng.random(px.shape[:2]) < share
    out[mask] = COLOURS[rng.integers(len(COLOURS), size=int(mask.sum()))]
    return out


def write_run(run: Path, attempts):
    """generations.jsonl and the render store (as `experiments.stages.render.render_stage` fills it) from
    (model, prompt_id, sample, pixels, outcome, trivial, mean_entropy) tuples."""
    from activations.renders import RenderStore
    from bench.layout.scoring import TRIVIAL_SHARE

    rows = [{"task": "layout", "prompt_id": pid, "model": model, "protocol": "few-shot-2", "medium": "v1", "sample": k,
             "seed": k, "temperature": 0.7, "prefix": "", "text": "fill('white')", "code": "fill('white')", "n_tokens": 3,
             "stop": "eos", "entropy": None if ent is None else [ent] * 3, "mean_entropy": ent}
            for model, pid, k, _, _, _, ent in attempts]
    with RunDir.writer(run) as rd:
        rd.write_rows(RunDir.GENERATIONS, rows)
        store = RenderStore(rd.file(RunDir.RENDERS), 24, {"medium": "v1", "trivial_share": TRIVIAL_SHARE})
        n = len(attempts)
        store.append({"key": [row_key(r) for r in rows], "input": [render_input(r) for r in rows],
                      "outcome": [a[4] for a in attempts], "reason": ["" for _ in attempts],
                      "pixels": np.stack([a[3] for a in attempts]).astype(np.uint8), "dominant_share": np.full(n, 0.5),
                      "trivial": [a[5] for a in attempts], "background": np.full((n, 3), 255, np.uint8)})
    return run


def model_attempts(model, seed, share, attempts=4, entropy=0.5, prompts=PROMPTS):
    """`attempts` renders per prompt: a base picture per prompt, each attempt repainting `share` of its cells
    (share=None: every attempt a fresh picture, nothing kept of the prompt)."""
    rng = np.random.default_rng(seed)
    out = []
    for pid in prompts:
        base = picture(rng)
        for k in range(attempts):
            px = picture(rng) if share is None else noisy(base, rng, share)
            out.append((model, pid, k, px, "ok", False, entropy))
    return out


@pytest.fixture(scope="module")
def dino_folder(tmp_path_factory):
    return build_tiny_dino(tmp_path_factory.mktemp("dino") / "dinov2", layers=2)


@pytest.fixture(scope="module")
def dino(dino_folder):
    from interp.dino import load_dino

    return load_dino(dino_folder)


TSNE = ConsistencySettings(projection="tsne")


def by(rows, kind, **kw):
    return [r for r in rows if r.get("kind") == kind and all(r.get(k) == v for k, v in kw.items())]


def tight(r):
    """The check a prompt-consistent model passes."""
    return r["ratio"] < 0.05 and r["silhouette"] > 0.95 and r["local_distance"] < 1e-4


def test_identical_attempts_are_tight_random_ones_are_not_and_mislabelled_ones_fail(tmp_path, dino):
    same = model_attempts("same", 1, 0.0)
    rand = model_attempts("random", 2, None)
    # the broken variant: the very renders of "same", with the prompt ids dealt round-robin across its attempts
    broken = [("mislabelled", PROMPTS[i % len(PROMPTS)], i // len(PROMPTS), px, "ok", False, 0.5)
              for i, (_, _, _, px, _, _, _) in enumerate(same)]
    run = write_run(tmp_path / "run", same + rand + broken)
    rows = dino_consistency(run, dino, TSNE)
    s = by(rows, "coherence", model="same", tier="all")[0]
    r = by(rows, "coherence", model="random", tier="all")[0]
    b = by(rows, "coherence", model="mislabelled", tier="all")[0]
    assert (s["n_renders"], s["n_prompts"], s["prompts_dropped"]) == (36, 9, 0)
    assert s["ratio"] == pytest.approx(0.0, abs=1e-3) and s["silhouette"] > 0.99 and s["local_distance"] < 1e-4
    assert tight(s)
    assert r["ratio"] == pytest.approx(1.0, abs=0.25) and r["silhouette"] < 0.1 and r["local_distance"] > 0.01
    assert not tight(r)
    assert b["ratio"] > 0.5 and b["silhouette"] < 0.2 and not tight(b)
    # every tier has its row, with its three prompts
    for tier in ("T1", "T2", "T3"):
        t = by(rows, "coherence", model="same", tier=tier)[0]
        assert t["n_prompts"] == 3 and t["n_renders"] == 12 and tight(t)
    maps = by(rows, "map", model="same")
    assert len(maps) == 1 and len(maps[0]["points"]) == 36 and maps[0]["projection"] == "tsne"
    assert set(maps[0]["tiers"]) == {"T1", "T2", "T3"} and "1A" in maps[0]["subcategories"]


def test_local_distance_grows_with_the_share_of_cells_repainted(tmp_path, dino):
    attempts = []
    for i, share in enumerate([0.0, 0.05, 0.2, 0.5]):
        attempts += model_attempts(f"m{i}", 10 + i, share)
    rows = dino_consistency(write_run(tmp_path / "run", attempts), dino, TSNE)
    local = [by(rows, "coherence", model=f"m{i}", tier="all")[0]["local_distance"] for i in range(4)]
    assert local == sorted(local) and local[0] < 1e-4 < local[1]


def test_entropy_confound_recovers_a_planted_monotone_relation(tmp_path, dino):
    """Models whose attempts are noisier also sample with more entropy: rho must be 1 and the line and
    residuals must reproduce the local distances."""
    attempts = []
    shares, entropies = [0.0, 0.05, 0.1, 0.2, 0.4], [0.1, 0.3, 0.5, 0.9, 1.6]
    for i, (share, ent) in enumerate(zip(shares, entropies)):
        attempts += model_attempts(f"m{i}", 20 + i, share, entropy=ent)
    run = write_run(tmp_path / "run", attempts)
    rows = dino_consistency(run, dino, TSNE)
    conf = entropy_confound(run, rows, TSNE)
    c = by(conf, "confound")[0]
    assert c["n_models"] == 5 and c["rho"] == pytest.approx(1.0) and c["p"] == pytest.approx(2 / 120, abs=1e-6)
    ent = by(conf, "entropy")
    assert [e["mean_entropy"] for e in ent] == pytest.approx(entropies)
    for e in ent:
        assert e["fitted"] + e["residual"] == pytest.approx(e["local_distance"], abs=1e-5)
        assert e["fitted"] == pytest.approx(c["intercept"] + c["slope"] * e["mean_entropy"], abs=1e-5)
    assert sum(e["residual"] for e in ent) == pytest.approx(0.0, abs=1e-5)
    # the broken variant: the entropies dealt to the wrong models (the renders, hence the local
    # distances in `rows`, unchanged) break the relation
    shuffled = [a[:6] + (entropies[(int(a[0][1:]) + 2) % 5],) for a in attempts]
    c2 = by(entropy_confound(write_run(tmp_path / "run2", shuffled), rows, TSNE), "confound")[0]
    assert c2["rho"] < 0.9


def test_fewer_than_three_models_report_a_note(tmp_path, dino):
    run = write_run(tmp_path / "run", model_attempts("a", 1, 0.0, entropy=0.2) + model_attempts("b", 2, 0.3, entropy=0.6))
    conf = entropy_confound(run, dino_consistency(run, dino, TSNE), TSNE)
    c = by(conf, "confound")[0]
    assert c["rho"] is None and c["slope"] is None and "at least 3 models" in c["note"]
    assert all(e["residual"] is None for e in by(conf, "entropy"))


def test_invalid_trivial_unrendered_and_single_attempt_prompts_are_left_out(tmp_path, dino):
    rng = np.random.default_rng(3)
    attempts = model_attempts("m", 4, 0.0, prompts=PROMPTS[:3])
    attempts += [("m", "3E-05", 0, picture(rng), "ok", False, 0.5)]  # one attempt only: no pair
    attempts += [("m", "2A-00", 0, picture(rng), "timeout", False, 0.5), ("m", "2A-00", 1, picture(rng), "ok", True, 0.5)]
    run = write_run(tmp_path / "run", attempts)
    # a generation without a render (the render stage has not reached it)
    with RunDir.writer(run) as rd:
        rd.append(RunDir.GENERATIONS, [{**read_rows(run / RunDir.GENERATIONS)[0], "sample": 9}])
    groups, counts = analysis_set(run, TSNE)
    assert counts == {"attempts": 16, "invalid": 1, "trivial": 1, "not_rendered": 1, "used": 13}
    rows = dino_consistency(run, dino, TSNE)
    a = by(rows, "coherence", model="m", tier="all")[0]
    assert (a["n_prompts"], a["n_renders"], a["prompts_dropped"]) == (3, 12, 1)
    assert by(rows, "map", model="m")[0]["n_renders"] == 13  # the map shows every valid non-trivial render
    assert not by(rows, "coherence", model="m", tier="T2")  # no usable T2 render at all


def test_stage_writes_checked_rows_and_plots(tmp_path, dino):
    run = write_run(tmp_path / "run", model_attempts("a", 1, 0.0, entropy=0.2) + model_attempts("b", 2, 0.1, entropy=0.4)
                    + model_attempts("c", 3, 0.3, entropy=0.9))
    with RunDir.writer(run) as rd:
        result = consistency_stage(rd, "unused", TSNE, dino=dino)
    rows = read_rows(run / CONSISTENCY)  # checksummed rows
    assert rows[0]["kind"] == "settings" and rows[0]["dino"]["model_type"] == "dinov2"
    assert rows[0]["settings"]["projection"] == "tsne" and rows[0]["counts"]["used"] == 108
    assert len(rows) == len(result["rows"])
    names = sorted(p.name for p in result["plots"])
    assert names == ["entropy-few-shot-2.png", "map-a-few-shot-2.png", "map-b-few-shot-2.png", "map-c-few-shot-2.png"]
    assert all(p.stat().st_size > 1000 and p.read_bytes()[:4] == b"\x89PNG" for p in result["plots"])
    # the confound reads the written file when given no rows
    assert by(entropy_confound(run, None, TSNE), "confound")[0]["rho"] == by(rows, "confound")[0]["rho"]


def test_settings_are_checked():
    from experiments.rundir import RunError

    for bad in ({"projection": "pca"}, {"min_attempts": 1}, {"batch_size": 0}):
        with pytest.raises(RunError):
            ConsistencySettings(**bad)


def _cli(*args):
    """`ambench consistency ARGS` in this process (tests.experiments.runs.ambench)."""
    from tests.experiments.runs import ambench

    return ambench(["consistency", *args], code=None)


def program(rng):
    shapes = ["fill('white')"]
    for _ in range(3):
        r, c, h, w = (int(v) for v in rng.integers(0, 14, 4) + (0, 0, 3, 3))
        shapes.append(f"rect({r}, {c}, {h}, {w}, '{['red', 'blue', 'green', 'black'][int(rng.integers(4))]}')")
    return "\n".join(shapes)


def test_cli_renders_a_fresh_run_through_the_sandbox_and_writes_rows(tmp_path, dino_folder):
    """End to end: generations only (real canvas programs); the command renders them in the sandbox,
    then analyses. Model a repeats one program per prompt, model b writes a new one every attempt."""
    rng = np.random.default_rng(0)
    rows = []
    for model in ("a", "b"):
        for pid in PROMPTS[::2]:
            fixed = program(rng)
            for k in range(3):
                code = fixed if model == "a" else program(rng)
                rows.append({"task": "layout", "prompt_id": pid, "model": model, "protocol": "few-shot-2", "medium": "v1",
                             "sample": k, "seed": k, "temperature": 0.7, "prefix": "", "text": code, "code": code,
                             "n_tokens": 3, "stop": "eos", "entropy": [0.1, 0.2], "mean_entropy": 0.15})
    run = tmp_path / "run"
    with RunDir.writer(run) as rd:
        rd.write_rows(RunDir.GENERATIONS, rows)
    p = _cli("--run", str(run), "--dino-folder", str(dino_folder), "--projection", "tsne", "--device", "cpu")
    assert p.exit_code == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert "entropy confound, arm few-shot-2: 2 models" in p.stdout and "at least 3 models" in p.stdout
    out = read_rows(run / CONSISTENCY)
    assert out[0]["counts"] == {"attempts": 30, "invalid": 0, "trivial": 0, "not_rendered": 0, "used": 30}
    a = by(out, "coherence", model="a", tier="all")[0]
    b = by(out, "coherence", model="b", tier="all")[0]
    assert a["n_prompts"] == 5 and a["ratio"] < 1e-3 and a["local_distance"] < 1e-4 and tight(a)
    assert b["ratio"] > 0.3 and b["local_distance"] > 0.01 and not tight(b)
    assert (run / "consistency" / "map-a-few-shot-2.png").is_file()


@pytest.mark.parametrize("case", ["missing", "not a dino", "no run", "no generations"])
def test_cli_bad_input_is_one_sentence_and_exit_2(tmp_path, dino_folder, case):
    run = write_run(tmp_path / "run", model_attempts("a", 1, 0.0))
    folder = dino_folder
    if case == "missing":
        folder = tmp_path / "nowhere"
    elif case == "not a dino":
        folder = tmp_path / "llm"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    elif case == "no run":
        run = tmp_path / "empty-run"
    else:
        (run / "generations.jsonl").unlink()
    p = _cli("--run", str(run), "--dino-folder", str(folder), "--projection", "tsne", "--device", "cpu")
    assert p.exit_code == 2, (p.stdout, p.stderr)
    err = p.stderr.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    assert not (run / CONSISTENCY).exists()


#: the study's map is UMAP, whose numba kernels compile once per process (~25 CPU s, umap-learn caches none of them):
#: one worker runs both tests that call it (tests/interp/test_consistency_stats.py), so the suite compiles them once
@pytest.mark.xdist_group("umap")
def test_study_runs_the_stage_when_given_a_folder_and_the_report_has_its_section(tmp_path, dino_folder):
    """`ambench run --dino-folder` adds the stage to the study's finish; the report gets the section and its
    summary answer (the constructed case: model a repeats its picture per prompt, c repaints a third)."""
    from experiments.study import StudyConfig, finish

    run = write_run(tmp_path / "run", model_attempts("a", 1, 0.0, entropy=0.2) + model_attempts("b", 2, 0.1, entropy=0.4)
                    + model_attempts("c", 3, 0.3, entropy=0.9))
    with RunDir.writer(run) as rd:
        finish(StudyConfig(dino_folder=str(dino_folder), device="cpu", n_boot=50), rd, {}, say=lambda m: None)
    rows = read_rows(run / CONSISTENCY)
    assert tight(by(rows, "coherence", model="a", tier="all")[0]) and not tight(by(rows, "coherence", model="c", tier="all")[0])
    page = (run / RunDir.REPORT).read_text()
    assert "concept consistency (DINO)" in page and "Spearman rho between mean token entropy" in page
    assert "over 3 models = 1.00 (p = 0.333)" in page  # entropy rises with the repainted share: a monotone relation
    # (rho to the report's 3 significant digits; p = 1/3! * 2: the exact two-sided p of a perfect rank order of 3)
    assert page.count("alt=\"DINO map of") == 3


def test_study_without_a_folder_has_no_section(tmp_path):
    """No DINO folder: no stage, and the report says the section was not computed and how to compute it (issue 21:
    the page names what it lacks) rather than showing any DINO number."""
    from experiments.study import StudyConfig, finish

    run = write_run(tmp_path / "run", model_attempts("a", 1, 0.0))
    with RunDir.writer(run) as rd:
        finish(StudyConfig(n_boot=50), rd, {}, say=lambda m: None)
    page = (run / RunDir.REPORT).read_text()
    assert not (run / CONSISTENCY).exists()
    assert "DINO concept consistency: not computed" in page and "--dino-folder" in page
    assert "Spearman rho between mean token entropy" not in page and "DINO map of" not in page


def test_run_refuses_a_bad_dino_folder_before_any_work(tmp_path):
    from tests.experiments.runs import ambench

    p = ambench(["run", "--out", tmp_path / "run", "--dino-folder", tmp_path / "nowhere"], code=2)
    assert "Traceback" not in p.stderr
    assert "the DINO folder" in p.stderr and "does not exist" in p.stderr
    assert not (tmp_path / "run").exists()
