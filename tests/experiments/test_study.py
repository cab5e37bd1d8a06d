"""`ambench run` on the tiny model: end to end, deterministic, resumable after SIGKILL at several points,
sharded + merged equal to one machine (both model phases, locally and on Ray), and a report that renders
in headless Chromium.

The random tiny model writes no valid program, so its layout attempts are pre-written (valid canvas
programs, the rows the generate stage writes) in every run directory before the run: generation of the
translation attempts, capture, interventions and patching then run for real, and every identity check
covers the intervention and patching rows too."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.experiments.runs import ambench
from tests.interp.tiny import build_tiny

RESULTS = ["generations.jsonl", "translation_scores.jsonl", "layout_table.json", "probes.jsonl", "summary.json",
           "interventions.jsonl", "intervention_cuts.jsonl", "patching.jsonl", "interventions_table.json", "report/index.html"]
PROGRAMS = [
    "```python\nfill('white')\nrect(2, 2, 4, 4, 'red')\nrect(12, 10, 6, 6, 'blue')\n```",
    "```python\nfill('navy')\ncircle(12, 12, 3, 'gold')\nrect(2, 14, 4, 4, 'red')\n```",
    "```python\nfill('white')\nrect(14, 2, 8, 8, 'green')\nline(0, 0, 5, 20, 'black')\n```",
]


#: one worker runs this module (test.sh: --dist loadgroup): all but one of its tests compare with the module fixture
#: `reference` (a whole `ambench run`, ~16 CPU s), which was built again on the second worker whenever they were dealt to both
pytestmark = pytest.mark.xdist_group("study")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("study") / "tiny")


def _cmd(model, out, *extra):
    # 19 permutations (the fewest the options allow): what these tests compare is files across resumes, shards and
    # backends, for which the counts are settings like any other; the probe stage took 6.7 of a run's 12 CPU seconds
    # at the defaults (999, 49) and 2.9 at 19
    return [sys.executable, "-m", "experiments.cli", "run", "--model", str(model), "--out", str(out),
            "--translation-prompts", "3", "--layout-per-subcategory", "1", "--samples", "1", "--translation-samples", "2", "--batch-size", "8",
            "--max-new-tokens", "12",
            "--continuations", "2", "--intervene-tokens", "10", "--n-perm", "19", "--n-perm-layers", "19", *extra]


def _prepare(model, out):
    """The layout attempts as valid programs, pre-written (see the module docstring)."""
    from experiments.rundir import RunDir
    from experiments.study import StudyConfig, prompt_sets

    if (out / "generations.jsonl").exists():
        return
    sets = prompt_sets(StudyConfig.from_preset("quick", layout_per_subcategory=1))
    rows = [{"task": "layout", "prompt_id": it.id, "model": str(model), "protocol": "few-shot-2", "medium": "v1", "sample": k,
             "seed": 0, "temperature": 0.0 if k == 0 else 0.7, "prefix": "", "text": PROGRAMS[(i + k) % len(PROGRAMS)],
             "code": None, "n_tokens": 1, "stop": "eos", "entropy": [0.1], "mean_entropy": 0.1}
            for i, it in enumerate(sets["layout"]) for k in range(2)]
    with RunDir.writer(out, "test") as rd:
        rd.append(RunDir.GENERATIONS, rows)


def _run(model, out, *extra, timeout=600, prepare=True):
    if prepare:
        _prepare(model, out)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    res = subprocess.run(_cmd(model, out, *extra), capture_output=True, text=True, timeout=timeout, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _acts(run):
    (path,) = sorted(p for p in (run / "activations").iterdir() if p.is_dir())
    return path


def _acts_equal(a, b):
    """The same stored activations, prompt for prompt and layer for layer (checksums verified on read)."""
    import numpy as np

    from activations.store import ActivationStore

    sa, sb = ActivationStore(a), ActivationStore(b)
    assert sa.prompt_ids == sb.prompt_ids and sa.tasks == sb.tasks and sa.inputs == sb.inputs and sa.shape == sb.shape
    assert np.array_equal(sa.token_positions, sb.token_positions)
    for layer in range(sa.shape[1]):
        assert np.array_equal(sa.layer(layer), sb.layer(layer)), layer


def _renders_equal(a, b):
    import numpy as np

    from experiments.stages.render import read_renders

    ra, rb = read_renders(a), read_renders(b)
    assert list(ra) == list(rb)
    for k in ra:
        for field in ra[k]:
            assert np.array_equal(ra[k][field], rb[k][field]), (k, field)


@pytest.fixture(scope="module")
def reference(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    _run(model, out)
    return out


def test_run_end_to_end_and_deterministic(model, reference, tmp_path):
    for f in RESULTS:
        assert (reference / f).is_file(), f
    cfg = json.loads((reference / "config.json").read_text())
    study = cfg["stages"]["study"]
    assert study["config"]["preset"] == "quick" and study["versions"]["torch"]
    assert (study["config"]["n_perm"], study["config"]["n_perm_layers"]) == (19, 19)  # --n-perm, --n-perm-layers
    probes = [json.loads(x) for x in (reference / "probes.jsonl").read_text().splitlines()]
    assert any(r.get("n_perm") == 19 for r in probes), sorted({k for r in probes for k in r if "perm" in k})
    again = tmp_path / "run"
    _run(model, again)
    for f in RESULTS:
        assert (again / f).read_bytes() == (reference / f).read_bytes(), f
    _renders_equal(again, reference)
    _acts_equal(_acts(again), _acts(reference))


#: where the SIGKILLs land, in the order a run reaches them: each is a change in the run directory, watched every 20 ms,
#: and the kill comes right after it (mid-stage, while the next row is being computed). Events, not delays: a kill
#: after N seconds landed at a different stage on every machine and load, and waited out seconds of startup.
KILL_POINTS = (
    ("a translation attempt written", lambda out, start: (out / "generations.jsonl").stat().st_size > start),
    ("capture begun", lambda out, start: any((out / "activations").rglob("*")) if (out / "activations").is_dir() else False),
    ("an intervention row written", lambda out, start: (out / "interventions.jsonl").is_file()),
    ("a patching row written", lambda out, start: (out / "patching.jsonl").is_file()),
)


def test_sigkill_at_several_points_then_resume(model, reference, tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    _prepare(model, out)
    start = (out / "generations.jsonl").stat().st_size
    for what, reached in KILL_POINTS:
        p = subprocess.Popen(_cmd(model, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 300
        while not reached(out, start) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert p.poll() is None, f"the run ended before {what}: the kill point is never reached"
        assert reached(out, start), f"no {what} within 300 s"
        p.send_signal(signal.SIGKILL)
        p.wait()
    _run(model, out)
    for f in RESULTS:
        assert (out / f).read_bytes() == (reference / f).read_bytes(), f
    _acts_equal(_acts(out), _acts(reference))


def _run_here(model, out, *extra):
    """_run in this process: the same command line (_cmd), the same pre-written attempts."""
    _prepare(model, out)
    return ambench(_cmd(model, out, *extra)[3:])  # without `python -m experiments.cli`


def _merge(parts, out):
    ambench(["merge", *parts, "--out", out])


def test_other_settings_are_refused(model, reference, tmp_path):
    """In this process (the exit status and the message are the command's, not the interpreter's:
    tests.experiments.runs.ambench)."""
    shutil.copytree(reference, tmp_path / "run")
    res = ambench(_cmd(model, tmp_path / "run", "--seed", "5")[3:], code=None)
    assert res.exit_code == 2 and "other settings" in res.stderr


def test_shards_merge_to_the_same_files(model, reference, tmp_path):
    """Both model phases sharded as a batch scheduler would run them: the first phase (generation, capture)
    in fresh shard directories, merged; the second (interventions, patching) in copies of that merge, merged. In this
    process (_run_here): what is compared is the files, against the reference made by `ambench run` in a subprocess."""
    _run_here(model, tmp_path / "s0", "--shard", "0/2")
    _run_here(model, tmp_path / "s1", "--shard", "1/2")
    _merge([tmp_path / "s0", tmp_path / "s1"], tmp_path / "m1")
    assert (tmp_path / "m1" / "generations.jsonl").read_bytes() == (reference / "generations.jsonl").read_bytes()
    assert not (tmp_path / "m1" / "interventions.jsonl").exists()  # the second phase waited for every attempt
    for i in range(2):
        shutil.copytree(tmp_path / "m1", tmp_path / f"t{i}", ignore=shutil.ignore_patterns(".lock"))
        res = _run_here(model, tmp_path / f"t{i}", "--shard", f"{i}/2")
        assert "interventions:" in res.stderr
    merged = tmp_path / "merged" / "run"  # the report names its run directory: the reference's is "run"
    _merge([tmp_path / "t0", tmp_path / "t1"], merged)
    for f in ("interventions.jsonl", "patching.jsonl", "intervention_cuts.jsonl"):
        assert (merged / f).read_bytes() == (reference / f).read_bytes(), f
    _run_here(model, merged)
    for f in RESULTS:
        assert (merged / f).read_bytes() == (reference / f).read_bytes(), f
    _acts_equal(_acts(merged), _acts(reference))


def test_report_renders_in_headless_chromium(reference, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it when apt-get is available)")
    from tests.experiments.runs import append
    from experiments.stages.layout import layout_table
    from experiments.stages.render import render_stage
    from experiments.stages.report import write_report

    run = tmp_path / "run"
    shutil.copytree(reference, run)
    # a second "model" with valid programs of its own, so there are mosaics of both
    programs = ["fill('white')\nrect(4, 4, 10, 10, 'red')", "fill('navy')\ncircle(12, 12, 7, 'gold')",
                "fill('white')\nline(0, 0, 23, 23, 'black')\nrect(16, 2, 6, 20, 'green')"]
    rows = [{"task": "layout", "prompt_id": pid, "model": "demo", "protocol": "few-shot-2", "sample": k, "seed": k,
             "temperature": 0.7, "prefix": "", "text": programs[(i + k) % 3], "code": None, "n_tokens": 1, "stop": "eos",
             "entropy": [0.1], "mean_entropy": 0.1} for i, pid in enumerate(["1A-00", "2A-00", "3A-00"]) for k in range(3)]
    append(run, rows)
    render_stage(run, workers=1)
    (run / "layout_table.json").write_text(json.dumps(layout_table(run)))
    page_path = write_report(run)
    page = page_path.read_text()
    assert page.count("data:image/png;base64,") >= 9 and "Layout mosaics" in page
    assert "https://" not in page and "http://" not in page  # self-contained: nothing fetched
    shot = tmp_path / "shot.png"
    res = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                          "--window-size=1200,12000", page_path.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 10_000, res.stderr[-2000:]
    from PIL import Image

    import numpy as np

    from tests.experiments.test_report import any_pixel

    pixels = np.asarray(Image.open(shot).convert("RGB"))
    # the mosaics' colours (gold, red, navy) are on the screenshot: the images rendered
    assert any_pixel(pixels, lambda r, g, b: (r > 200) & (g < 60) & (b < 60))
    assert any_pixel(pixels, lambda r, g, b: (r < 10) & (g < 10) & (100 < b) & (b < 150))


def test_ray_backend_shards_and_merges_to_the_same_files(model, reference, tmp_path):
    pytest.importorskip("ray")
    res = _run(model, tmp_path / "run", "--backend", "ray", "--shards", "2")
    assert "ray: 2 shard tasks for model phase a" in res.stderr and "model phase b" in res.stderr
    assert (tmp_path / "run" / "interventions.jsonl").read_bytes() == (reference / "interventions.jsonl").read_bytes()
    for f in RESULTS:
        assert (tmp_path / "run" / f).read_bytes() == (reference / f).read_bytes(), f
    _acts_equal(_acts(tmp_path / "run"), _acts(reference))


def test_presets_and_the_svg_arm(model, tmp_path):
    from experiments.study import StudyConfig, prompt_sets

    paper = StudyConfig.from_preset("paper")
    sets = prompt_sets(paper)
    assert (len(sets["translation"]), len(sets["layout"]), paper.samples, paper.continuations, paper.svg) == (145, 150, 10, 9, True)
    quick = prompt_sets(StudyConfig.from_preset("quick"))
    # two per subcategory (issue 30: one gave 8 layout prompts with a valid attempt, and the headline needs 10)
    assert (len(quick["translation"]), len(quick["layout"])) == (20, 30)
    assert len({p.id[:2] for p in quick["layout"]}) == 15 and StudyConfig.from_preset("quick").samples == 1
    with pytest.raises(ValueError, match="unknown preset"):
        StudyConfig.from_preset("huge")
    out = tmp_path / "svg"
    _run_here(model, out, "--svg", "--translation-prompts", "1")  # what the SVG arm writes: in this process
    from experiments.rundir import read_rows
    from experiments.stages.render import read_renders

    rows = read_rows(out / "generations.jsonl")
    svg_rows = [r for r in rows if r["medium"] == "svg"]
    assert len(svg_rows) == 15 * 2 and all(r["task"] == "layout" for r in svg_rows)
    renders = read_renders(out)
    assert len(renders) == len(rows) and (out / "report" / "index.html").is_file()

