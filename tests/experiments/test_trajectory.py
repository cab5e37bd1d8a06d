"""Plan or state along the generation (experiments/stages/trajectory.py) on constructed answers.

1. The statistics: synthetic attempts (final canvas = four rectangles drawn one per statement) with
   activations built to hold either the final canvas at every boundary (a planner) or only the canvas
   drawn so far (a tracker). The planner's final canvas is decodable at boundary 0 and beyond the drawn
   state; the tracker's is not. A broken capture (activations one statement ahead of their boundary)
   makes the tracker look like a planner, so the check can fail.
2. The capture: on the tiny model, the residual at each boundary of the full sequence equals the
   residual at the last token of the sequence cut at that boundary (what the model had when it wrote the
   next statement), and the boundary tokens close the statements' lines.
3. The stage on a run directory: rows, counts, plot, one-sentence errors, and the report section.
"""

from __future__ import annotations

import numpy as np
import pytest

from experiments.rundir import AttemptKey, RunDir, read_rows
from experiments.stages.trajectory import (Attempt, TrajectorySettings, boundary_tokens, capture_boundaries,
                                           probe_boundaries, trajectory_stage, verdict)
from tests.experiments.runs import append

S = TrajectorySettings(boundaries=4)


def rect_mask(r, c, h, w):
    m = np.zeros((24, 24), bool)
    m[r: r + h, c: c + w] = True
    return m


def occ(mask):
    return mask.reshape(6, 4, 6, 4).mean(axis=(1, 3)).ravel()


def synthetic(n=60, seed=0, kind="planner", ahead=0):
    """Attempts of four random rectangles each, with activations [5 boundaries, 3 sites, 48]: site 0 noise,
    sites 1-2 a random linear map of the planner's final occupancy or the tracker's drawn occupancy at
    boundary k + `ahead` (ahead=1: the broken capture)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(36, 48))
    attempts, acts = [], []
    for i in range(n):
        masks = [rect_mask(*rng.integers(0, 18, 2), *rng.integers(3, 7, 2)) for _ in range(4)]
        drawn = [occ(np.logical_or.reduce(masks[:k])) if k else np.zeros(36) for k in range(5)]
        final = drawn[4]
        key = AttemptKey("m", "layout", "few-shot-2", "v1", f"p{i}", 0)
        attempts.append(Attempt(key, {}, "", [1, 2, 3, 4], 4, 0, final, drawn))
        a = np.empty((5, 3, 48))
        for k in range(5):
            src = final if kind == "planner" else drawn[min(4, k + ahead)]
            a[k, 0] = rng.normal(size=48)
            a[k, 1:] = src @ w + rng.normal(scale=0.05, size=48)
        acts.append(a)
    return attempts, acts


def by(rows, k, probe):
    return next(r for r in rows if r.get("boundary") == k and r.get("probe") == probe)


def test_a_planner_leads_its_drawing_and_a_tracker_follows_it():
    planner = probe_boundaries(*synthetic(kind="planner"), S, {"model": "m"})
    tracker = probe_boundaries(*synthetic(kind="tracker"), S, {"model": "m"})
    # the planner: the final canvas is there before any code, beyond anything the drawn code could tell
    assert by(planner, 0, "final")["r2"] > 0.8 and by(planner, 0, "final")["layers"] != [0]
    for k in range(4):
        assert by(planner, k, "final-state")["ci"][0] > 0.1
    assert "a plan ahead of the state" in verdict(planner)
    # the tracker: nothing of the final canvas before drawing; afterwards only what the drawn code holds
    assert by(tracker, 0, "final")["r2"] < 0.1
    for k in range(1, 5):
        assert by(tracker, k, "drawn")["r2"] > 0.8
        assert by(tracker, k, "final-state")["ci"][0] < 0.05
    assert "at no boundary" in verdict(tracker)
    # the final canvas becomes decodable as it is drawn
    r = [by(tracker, k, "final")["r2"] for k in range(5)]
    assert r[1] < r[2] < r[3] < r[4] and r[4] > 0.9


def test_a_capture_one_statement_late_makes_a_tracker_look_like_a_planner():
    """The broken variant: activations taken one statement after their boundary. The check that passes on
    the right capture fails here, so it can catch that bug."""
    broken = probe_boundaries(*synthetic(kind="tracker", ahead=1), S, {"model": "m"})
    assert by(broken, 0, "final-state")["ci"][0] > 0.05 or by(broken, 1, "final-state")["ci"][0] > 0.05
    assert "a plan ahead of the state" in verdict(broken)


def test_too_few_attempts_skip_a_boundary_with_a_reason():
    attempts, acts = synthetic(n=12)
    for a in attempts[:5]:
        a.ends, a.drawn = a.ends[:2], a.drawn[:3]
    rows = probe_boundaries(attempts, acts, TrajectorySettings(boundaries=4), {"model": "m"})
    skipped = [r for r in rows if "skipped" in r]
    assert [r["boundary"] for r in skipped] == [3, 4] and "7 attempts reach boundary 3" in skipped[0]["skipped"]


PROGRAMS = [
    "fill('white')\nrect(2, 3, 4, 5, 'red')\ncircle(12, 12, 4, 'blue')\nline(0, 0, 23, 23, 'black')\n",
    "```python\nfill('navy')\nrect(10, 10, 6, 6, 'red')\nrect(1, 1, 3, 3, 'white')\n```",
]


def test_boundaries_are_statement_line_ends_and_equal_the_cut_sequence(tiny):
    from experiments.stages.trajectory import plan_attempts
    from interp.prompts import items_by_id

    item = items_by_id()["1A-00"]
    for text in PROGRAMS:
        from bench.intervene.splice import statements

        ends = [st.line_end for st in statements(text)]
        a = Attempt(AttemptKey("tiny", "layout", "zero-shot", "v1", "1A-00", 0), {"prefix": ""}, text, ends, len(ends), 0,
                    np.zeros(36), [np.zeros(36)])
        seq, pos = boundary_tokens(tiny, item, a)
        assert len(pos) == len(ends) + 1 and pos == sorted(pos)
        decoded = [tiny.tokenizer.decode(seq[: p + 1]) for p in pos[1:]]
        for d, e in zip(decoded, ends):  # the text up to the boundary token ends exactly at the statement's line end
            assert d.endswith(text[:e]) and not d.endswith(text[: e + 1]) or e == len(text)
        full = tiny.capture([seq], [pos]).numpy()[0]  # [sites, boundaries, d]
        for k, p in enumerate(pos):
            cut = tiny.capture([seq[: p + 1]], [[p]]).numpy()[0, :, 0]
            np.testing.assert_allclose(full[:, k], cut, atol=2e-5)


def _run(tmp_path, texts, model="tiny"):
    run = tmp_path / "run"
    rows = [{"task": "layout", "prompt_id": pid, "model": model, "protocol": "zero-shot", "medium": "v1", "sample": 0,
             "seed": 0, "temperature": 0.0, "prefix": "", "text": t, "n_tokens": 5, "stop": "eos", "entropy": [0.1],
             "mean_entropy": 0.1} for pid, t in texts]
    append(run, rows)
    return run


def test_stage_writes_rows_plot_and_counts(tmp_path, tiny):
    from interp.prompts import layout_items

    rng = np.random.default_rng(0)
    pids = [i.id for i in layout_items()][:14]
    texts = []
    for pid in pids:
        lines = ["fill('white')"] + [f"rect({rng.integers(0, 18)}, {rng.integers(0, 18)}, {rng.integers(2, 6)}, "
                                     f"{rng.integers(2, 6)}, 'red')" for _ in range(3)]
        texts.append((pid, "\n".join(lines)))
    texts += [("3E-05", "assert False"), ("3E-04", "x = 1")]  # invalid; valid with nothing to cut
    run = _run(tmp_path, texts)
    with RunDir.writer(run) as rd:
        out = trajectory_stage(tiny, rd, "tiny", TrajectorySettings(boundaries=3))
    assert out["counts"] == {"attempts": 16, "invalid": 1, "no statement": 1, "used": 14}
    rows = read_rows(run / RunDir.TRAJECTORY)
    assert rows[0]["kind"] == "settings" and rows[0]["n_sites"] == tiny.info.n_layers + 1
    pts = [r for r in rows if r.get("probe")]
    assert {(r["boundary"], r["probe"]) for r in pts} == {(k, p) for k in range(4) for p in ("drawn", "final", "state", "final-state")}
    assert all(r["n"] == 14 for r in pts)
    assert by(pts, 3, "drawn")["fully_drawn"] == 0  # four statements each: boundary 3 is before the last one
    assert (run / RunDir.TRAJECTORY_PLOTS / "tiny-layout.png").read_bytes()[:4] == b"\x89PNG"
    # a rerun replaces this model's rows instead of adding to them
    with RunDir.writer(run) as rd:
        trajectory_stage(tiny, rd, "tiny", TrajectorySettings(boundaries=3))
    assert len(read_rows(run / RunDir.TRAJECTORY)) == len(rows)
    # the report's section and summary answer
    from experiments.stages.report import write_report

    page = write_report(run).read_text()
    assert "a plan ahead of the drawing, or a state that follows it?" in page
    assert "Do models hold the final canvas before they draw it?" in page and 'alt="plan or state: tiny"' in page


def test_cli_runs_the_stage_and_bad_input_is_one_sentence(tmp_path, tiny_folder):
    from tests.experiments.runs import ambench

    def cli(*args):  # in this process: the command's exit status and messages (tests.experiments.runs.ambench)
        return ambench(["trajectory", *args], code=None)

    p = cli("--run", str(tmp_path / "nothing"), "--model", str(tiny_folder))
    assert p.exit_code == 2 and "Traceback" not in p.stderr and "has no generations.jsonl" in p.stderr
    run = _run(tmp_path, [("1A-00", "fill('white')\nrect(1, 1, 3, 3, 'red')")], model=str(tiny_folder))
    p = cli("--run", str(run), "--model", str(tiny_folder), "--boundaries", "2")
    assert p.exit_code == 0, p.stderr
    assert "boundary 0: skipped, 1 attempts reach boundary 0" in p.stdout and "too few attempts" in p.stdout


def test_settings_are_checked():
    from experiments.rundir import RunError

    for bad in ({"boundaries": 0}, {"min_attempts": 4}, {"batch_size": 0}):
        with pytest.raises(RunError):
            TrajectorySettings(**bad)
