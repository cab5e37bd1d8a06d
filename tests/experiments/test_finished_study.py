"""A finished study is never silently damaged (issue 20): side commands, torn units and damaged stores.

The promise, tried from outside as a user would: a command either does what it says and leaves every
other result as it was, or refuses in one sentence and changes nothing. Each test starts from a copy of
one small finished study on the tiny model (`tests.experiments.runs.run_small_study`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli import app
from experiments.rundir import RunDir, RunError, encode_row, read_rows
from tests.experiments.runs import append, copy_run, run_small_study, snapshot

ROOT = Path(__file__).resolve().parents[2]
#: the files an uninterrupted study writes whose bytes a recomputation must reproduce
RESULTS = ["generations.jsonl", "translation_scores.jsonl", "layout_table.json", "probes.jsonl", "summary.json",
           "interventions.jsonl", "intervention_cuts.jsonl", "patching.jsonl", "interventions_table.json", "report/index.html"]


#: one worker runs this module and the other that reads the same finished study (tests/experiments/conftest.py)
pytestmark = pytest.mark.xdist_group("small-study")


@pytest.fixture(scope="module")
def study(small_study):
    return small_study


@pytest.fixture
def run(study, tmp_path):
    return copy_run(study, tmp_path / "run")


def refused(args: list[str], *says: str) -> str:
    """Run `ambench ARGS` in-process; it must exit 2 with one sentence (no traceback) holding every `says`."""
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    for s in says:
        assert s in res.output, (s, res.output)
    return res.output


# --------------------------------------------------------------------------- loss or mixing without a message


@pytest.mark.parametrize("args, says", [
    (["probe", "--task", "bogus"], "--task"),
    (["selectivity", "--task", "bogus"], "--task"),
    (["trajectory", "--task", "bogus", "--model", "{model}"], "--task"),
    (["patch", "--layers", "99", "--model", "{model}"], "--layers"),
    (["patch", "--layers", "-1", "--model", "{model}"], "--layers"),
])
def test_a_side_command_with_a_bad_argument_changes_nothing(run, tiny_folder, args, says):
    """`probe --task bogus` once exited 0 and wrote an empty probes.jsonl over the study's; `patch --layers 99`
    emptied patching.jsonl, then ended in a ValueError traceback."""
    before = snapshot(run)
    refused([a.replace("{model}", str(tiny_folder)) for a in args] + ["--run", str(run)], says)
    assert snapshot(run) == before


@pytest.mark.parametrize("command", ["intervene", "patch"])
def test_a_side_command_with_other_settings_is_refused_naming_them(run, tiny_folder, command):
    """`ambench intervene` with its own defaults once dropped the study's continuations as stale and wrote its own."""
    before = snapshot(run)
    refused([command, "--run", str(run), "--model", str(tiny_folder), "--continuations", "1"], "continuations")
    assert snapshot(run) == before


def test_generate_of_another_arm_into_a_study_is_refused(run, tiny_folder):
    """`ambench generate --samples 6 --out RUN` on a finished study was accepted (another protocol), and the next
    `ambench run` drew most of its intervention cuts from that arm."""
    before = snapshot(run)
    refused(["generate", "--model", str(tiny_folder), "--task", "layout", "--limit", "2", "--samples", "6", "--max-new-tokens", "4",
             "--out", str(run)], "few-shot-2")
    assert snapshot(run) == before


def test_a_study_refuses_a_directory_holding_an_arm_it_does_not_name(run, tiny_folder):
    rows = [r for r in read_rows(run / RunDir.GENERATIONS) if r["task"] == "layout"][:2]
    append(run, [dict(r, protocol="zero-shot") for r in rows])
    before = snapshot(run)
    with pytest.raises(RunError, match=r"zero-shot.*another --out"):
        run_small_study(tiny_folder, run)
    assert snapshot(run) == before


def test_a_torn_intervention_unit_is_redone(study, run, tiny_folder):
    """Truncating interventions.jsonl inside a cut once left it short of rows with no message: a cut counted as
    done when any of its rows was present."""
    path = run / RunDir.INTERVENTIONS
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-3]))  # the last cut loses 3 of its rows
    run_small_study(tiny_folder, run)
    for f in RESULTS:
        assert (run / f).read_bytes() == (study / f).read_bytes(), f


def test_a_row_without_its_checksum_is_an_edited_row(run):
    """Deleting `_crc` and editing the row was accepted, and probes and interventions changed."""
    path = run / RunDir.GENERATIONS
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    row = json.loads(lines[3])
    del row["_crc"]
    row["text"] = "fill('red')"
    lines[3] = json.dumps(row) + "\n"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(RunError, match=r"line 4 has no checksum"):
        read_rows(path)
    before = snapshot(run)
    refused(["probe", "--run", str(run)], "line 4", f"ambench repair {run}")
    assert snapshot(run) == before


def test_a_recomputed_activation_part_gives_identical_results(study, run, tiny_folder):
    """A deleted activation part is recomputed at the end of the store; probes once followed the order of parts."""
    (store,) = RunDir(run).activation_stores()
    (store / "part-000000.h5").unlink()
    run_small_study(tiny_folder, run)
    for f in RESULTS:
        assert (run / f).read_bytes() == (study / f).read_bytes(), f


def test_a_damaged_render_part_is_said_and_recomputed_to_identical_results(study, run, tiny_folder, capsys):
    part = run / RunDir.RENDERS / "part-000000.h5"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF
    part.write_bytes(bytes(data))
    run_small_study(tiny_folder, run)
    assert "part-000000.h5" in capsys.readouterr().err  # moved aside with a message, as activation parts are
    for f in RESULTS:
        assert (run / f).read_bytes() == (study / f).read_bytes(), f


# --------------------------------------------------------------------------- dead ends and silence


def test_a_deleted_activation_meta_is_rebuilt_and_changes_nothing(study, run, tiny_folder):
    """A deleted meta.json once hid the store: `ambench run` exited 0 with "probes skipped" and kept the old
    probes in the report, and `ambench capture` then failed with "no activation store"."""
    (store,) = RunDir(run).activation_stores()
    (store / "meta.json").unlink()
    said: list[str] = []
    run_small_study(tiny_folder, run, say=said.append)
    assert any("rebuilt" in m for m in said) and (store / "meta.json").is_file()
    for f in RESULTS:
        assert (run / f).read_bytes() == (study / f).read_bytes(), f


def test_an_edited_row_names_the_repair_and_the_repair_recomputes_it(study, run, tiny_folder):
    """An edited middle row was reported with its file and line, but no way out."""
    gens, inter = run / RunDir.GENERATIONS, run / RunDir.INTERVENTIONS
    for path, n in ((gens, 1), (inter, 4)):  # a translation attempt (the model makes it again) and a continuation
        lines = path.read_bytes().splitlines(keepends=True)
        row = json.loads(lines[n])
        row["seed"] = row["seed"] + 1  # an edit: the checksum no longer holds
        lines[n] = json.dumps(row, sort_keys=True, ensure_ascii=False).encode() + b"\n"
        path.write_bytes(b"".join(lines))
    with pytest.raises(RunError, match=rf"line 2 fails its checksum.*ambench repair {run}"):
        run_small_study(tiny_folder, run)
    res = CliRunner().invoke(app, ["repair", str(run)])
    assert res.exit_code == 0, res.output
    assert "generations.jsonl: dropped line 2 (fails its checksum)" in res.output
    assert "interventions.jsonl: dropped line 5 (fails its checksum)" in res.output
    run_small_study(tiny_folder, run)
    for f in RESULTS:
        assert (run / f).read_bytes() == (study / f).read_bytes(), f
    res = CliRunner().invoke(app, ["repair", str(run)])
    assert res.exit_code == 0 and "nothing to repair" in res.output


@pytest.mark.parametrize("args", [
    ["probe"], ["selectivity"], ["intervene", "--model", "{model}"], ["patch", "--model", "{model}"],
    ["trajectory", "--model", "{model}"], ["attention", "--model", "{model}"], ["steer", "--layer", "0", "--model", "{model}"],
    ["renders"], ["judge", "--judge", "j", "--base-url", "http://127.0.0.1:9/v1", "--judge-model", "x"], ["layout", "table"],
    ["repair"],
])
def test_a_command_that_needs_a_run_never_creates_one(tmp_path, tiny_folder, args):
    """`probe --run /typo` once created the folder and a lock."""
    typo = tmp_path / "typo"
    args = [a.replace("{model}", str(tiny_folder)) for a in args]
    refused(args + ([str(typo)] if args == ["repair"] else ["--run", str(typo)]), str(typo))
    assert not typo.exists()


def test_generate_checks_the_lock_before_it_loads_the_model(tmp_path, tiny_folder):
    run = tmp_path / "run"
    code = ("import sys, time; from experiments.rundir import RunDir; rd = RunDir.writer(sys.argv[1], 'ambench run --out X'); "
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        assert holder.stdout.readline().strip() == "held"
        out = refused(["generate", "--model", str(tiny_folder), "--task", "layout", "--limit", "1", "--out", str(run)],
                      f"in use by process {holder.pid}")
        assert "loading" not in out
    finally:
        holder.kill()
        holder.wait()


def test_the_study_records_its_thread_count(study):
    import torch

    assert json.loads((study / RunDir.CONFIG).read_text())["stages"]["study"]["threads"] == torch.get_num_threads()


def test_merge_names_its_shards_refuses_duplicates_and_run_names_the_missing(tmp_path, tiny_folder):
    from experiments.study import merge_runs, run_study
    from tests.experiments.runs import study_config

    c = study_config(tiny_folder, translation_prompts=1, samples=0, translation_samples=0, max_new_tokens=4,
                     batch_size=8)  # 16 attempts: two work units, one per shard
    for i in range(2):
        run_study(c, tmp_path / f"s{i}", (i, 2), say=lambda m: None)
    assert merge_runs([tmp_path / "s0", tmp_path / "s1"], tmp_path / "whole")["missing"] == []
    copy_run(tmp_path / "s0", tmp_path / "s0-again")
    with pytest.raises(RunError, match=r"both shard 0/2"):
        merge_runs([tmp_path / "s0", tmp_path / "s0-again"], tmp_path / "twice")
    assert not (tmp_path / "twice").exists()
    res = CliRunner().invoke(app, ["merge", str(tmp_path / "s0"), "--out", str(tmp_path / "half")])
    assert res.exit_code == 0 and "holds shards 0/2 (phase a); missing 1/2" in res.output
    said: list[str] = []
    run_study(c, tmp_path / "half", say=said.append)
    assert any("without 1/2" in m for m in said), said


def test_layout_tables_cover_a_custom_prompt_set(tmp_path):
    """A run on a custom prompt file once had "no layout attempts" in `layout table` and `"layout": []` in its summary."""
    from experiments.stages.render import render_stage
    from interp.prompts import PromptItem
    from tests.experiments.runs import PROGRAMS

    run = tmp_path / "run"
    items = [PromptItem(f"my-{i}", "layout", f"Draw thing {i}.", f"thing {i}") for i in range(3)]
    with RunDir.writer(run, "test") as rd:
        rd.record_prompts(items)
        rd.append(RunDir.GENERATIONS, [{"task": "layout", "prompt_id": it.id, "model": "m", "protocol": "zero-shot", "medium": "v1",
                                        "sample": 0, "seed": 0, "temperature": 0.0, "prefix": "", "text": PROGRAMS[i],
                                        "code": None, "n_tokens": 1, "stop": "eos", "entropy": [0.1], "mean_entropy": 0.1}
                                       for i, it in enumerate(items)])
    render_stage(run, workers=1)
    res = CliRunner().invoke(app, ["layout", "table", "--run", str(run), "--json"])
    assert res.exit_code == 0, res.output
    assert {(r["tier"], r["attempts"]) for r in json.loads(res.output)} == {("custom", 3), ("all", 3)}
