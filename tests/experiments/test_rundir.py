"""The run directory, tried as a new user would (issue 13): one lock, content-keyed resume, read-only
commands that never write, torn and corrupt files repaired or reported, one sentence instead of a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli import app
from experiments.rundir import RunDir, RunError, encode_row, read_rows
from tests.experiments.runs import GENERATIONS, ambench, append

ROOT = Path(__file__).resolve().parents[2]


def _row(pid, sample, text, model="m"):
    return {"task": "layout", "prompt_id": pid, "model": model, "protocol": "zero-shot", "medium": "v1", "sample": sample,
            "seed": 1, "temperature": 0.0, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos",
            "entropy": [0.1], "mean_entropy": 0.1}


def _hold_lock(run: Path) -> subprocess.Popen:
    """Another process that holds the run's lock (as a running `ambench run` does)."""
    code = ("import sys, time; from experiments.rundir import RunDir; rd = RunDir.writer(sys.argv[1], 'ambench run --out X'); "
            "print('held', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_writer_is_refused_with_one_sentence_naming_the_holder(tmp_path):
    """Two `ambench run` on one directory once gave an h5py BlockingIOError traceback in one and 72 rows
    (36 duplicated keys) in the other."""
    run = tmp_path / "run"
    append(run, [_row("1A-00", 0, "fill('red')")])
    holder = _hold_lock(run)
    try:
        with pytest.raises(RunError, match=rf"in use by process {holder.pid} .*ambench run"):
            RunDir.writer(run)
        res = CliRunner().invoke(app, ["renders", "--run", str(run)])
        assert res.exit_code == 2 and f"in use by process {holder.pid}" in res.output
    finally:
        holder.kill()
        holder.wait()
    # the kernel released the lock with the process: no stale lock
    with RunDir.writer(run) as rd:
        assert rd.writable


def test_ambench_run_refuses_a_run_in_use(tmp_path, tiny_folder):
    run = tmp_path / "run"
    holder = _hold_lock(run)
    try:
        # the refused command in this process (tests.experiments.runs.ambench), the lock held by another
        res = ambench(["run", "--model", tiny_folder, "--out", run, "--translation-prompts", "1", "--layout-per-subcategory",
                       "1", "--samples", "0"], code=None)
    finally:
        holder.kill()
        holder.wait()
    assert res.exit_code == 2 and "is in use by process" in res.stderr and "Traceback" not in res.stderr
    assert not (run / GENERATIONS).exists()


def test_a_read_only_command_never_writes(tmp_path):
    """`ambench layout table` once cut a complete last row without its newline off generations.jsonl."""
    append(tmp_path, [_row(f"1A-0{i}", 0, "fill('white')\nrect(1, 1, 5, 5, 'red')") for i in range(3)])
    from experiments.stages.render import render_stage

    render_stage(tmp_path, workers=1)
    gens = tmp_path / GENERATIONS
    gens.write_bytes(gens.read_bytes().rstrip(b"\n"))  # a complete row without a trailing newline
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != ".lock"}
    res = CliRunner().invoke(app, ["layout", "table", "--run", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)[0]["attempts"] == 3
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before and len(read_rows(gens)) == 3


def test_torn_and_edited_rows(tmp_path):
    rd_path = tmp_path / "run"
    append(rd_path, [_row("1A-00", 0, "fill('red')"), _row("1A-01", 0, "fill('blue')")])
    gens = rd_path / GENERATIONS
    whole = gens.read_bytes()
    torn = whole + encode_row(_row("1A-02", 0, "x")).encode()[:25]  # a write a kill interrupted
    gens.write_bytes(torn)
    assert len(read_rows(gens)) == 2 and gens.read_bytes() == torn  # a reader skips it and changes nothing
    with RunDir.writer(rd_path) as rd:  # only the lock holder repairs it
        rd.append(RunDir.GENERATIONS, [_row("1A-03", 0, "fill('green')")])
    assert [r["prompt_id"] for r in read_rows(gens)] == ["1A-00", "1A-01", "1A-03"]
    edited = gens.read_bytes().replace(b"fill('blue')", b"fill('pink')")
    gens.write_bytes(edited)
    with pytest.raises(RunError, match=r"line 2 fails its checksum"):
        read_rows(gens)


def test_a_torn_scores_file_is_repaired_and_stale_scores_are_recomputed(tmp_path):
    """A torn last line of translation_scores.jsonl once failed every rerun with a traceback; and scoring
    `fill('red')` attempts into the --out of the canonical programs once reported PIoU 1.0 (resumed on
    ref_id alone)."""
    from bench.translation.references import canonical_program, load_references

    refs = tmp_path / "refs.jsonl"
    res = CliRunner().invoke(app, ["translation", "refs", "--set", "sampled", "--out", str(refs)])
    assert res.exit_code == 0
    ids = [r.id for r in load_references("sampled")[:3]]
    canon = tmp_path / "canon.jsonl"
    canon.write_text("".join(json.dumps({"ref_id": i, "text": canonical_program(next(r for r in load_references("sampled") if r.id == i))}) + "\n"
                             for i in ids))
    red = tmp_path / "red.jsonl"
    red.write_text("".join(json.dumps({"ref_id": i, "text": "fill('red')"}) + "\n" for i in ids))
    out = tmp_path / "scores.jsonl"
    first = CliRunner().invoke(app, ["translation", "score", "--refs", str(refs), "--attempts", str(canon), "--out", str(out),
                                     "--workers", "1"])
    assert first.exit_code == 0 and json.loads(first.output.strip().splitlines()[-1])["piou_median"] == 1.0
    out.write_bytes(out.read_bytes()[:-40])  # torn
    again = CliRunner().invoke(app, ["translation", "score", "--refs", str(refs), "--attempts", str(canon), "--out", str(out),
                                     "--workers", "1"])
    assert again.exit_code == 0 and len(read_rows(out)) == 3
    stale = CliRunner().invoke(app, ["translation", "score", "--refs", str(refs), "--attempts", str(red), "--out", str(out),
                                     "--workers", "1"])
    assert stale.exit_code == 0, stale.output
    assert json.loads(stale.output.strip().splitlines()[-1])["piou_median"] < 0.5


@pytest.mark.parametrize("content, says", [
    (b'{"id": "a", "task": "layout", "text": "Draw \xff a cat."}\n', "not UTF-8"),
    (b'{"id": "a\\ud800", "task": "layout", "text": "Draw a cat."}\n', "lone surrogate"),
    (b'{"id": null, "task": "layout", "text": "Draw a cat."}\n', "'id' must be a string"),
    (b'{"id": ["x"], "task": "layout", "text": "Draw a cat."}\n', "'id' must be a string"),
])
def test_bad_prompt_files_get_one_sentence_and_nothing_is_written(tmp_path, content, says):
    prompts = tmp_path / "p.jsonl"
    prompts.write_bytes(content)
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["generate", "--prompts", str(prompts), "--out", str(run), "--model", "smollm2-135m-instruct"])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output
    assert not run.exists()


def _model_folder(tmp_path, tiny_folder, damage):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_folder, folder)
    weights = folder / "model.safetensors"
    if damage == "no weights":
        weights.unlink()
    else:
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return folder


@pytest.mark.parametrize("damage, says", [("no weights", "no weights"), ("truncated", "truncated")])
def test_a_broken_model_folder_is_said_before_the_run_records_anything(tmp_path, tiny_folder, damage, says):
    folder = _model_folder(tmp_path, tiny_folder, damage)
    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "--model", str(folder), "--out", str(run)])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output
    assert not (run / "config.json").exists()


def test_other_one_sentence_errors(tmp_path):
    runner = CliRunner()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    res = runner.invoke(app, ["run", "--out", str(a_file)])
    assert res.exit_code == 2 and "is a file, not a run directory" in res.output
    bad_cfg = tmp_path / "bad"
    bad_cfg.mkdir()
    (bad_cfg / "config.json").write_text("{not json")
    append(bad_cfg, [_row("1A-00", 0, "fill('red')")])
    res = runner.invoke(app, ["renders", "--run", str(bad_cfg)])
    assert res.exit_code == 0  # rendering does not read the settings record
    with pytest.raises(RunError, match="config.json is not valid JSON"):
        RunDir(bad_cfg).config()
    refs = tmp_path / "refs.jsonl"
    runner.invoke(app, ["translation", "refs", "--set", "sampled", "--out", str(refs)])
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"ref_id": 7, "text": ["fill('red')"]}) + "\n")
    res = runner.invoke(app, ["translation", "score", "--refs", str(refs), "--attempts", str(wrong), "--out", str(tmp_path / "s.jsonl")])
    assert res.exit_code == 2 and "as strings" in res.output and not (tmp_path / "s.jsonl").exists()
    (tmp_path / "outdir").mkdir()
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"ref_id": "s000", "text": "fill('red')"}) + "\n")
    res = runner.invoke(app, ["translation", "score", "--refs", str(refs), "--attempts", str(good), "--out", str(tmp_path / "outdir")])
    assert res.exit_code == 2 and "is a folder" in res.output
    res = runner.invoke(app, ["render", "-", "-o", str(tmp_path / "new" / "deep" / "x.png")], input="fill('red')")
    assert res.exit_code == 0 and (tmp_path / "new" / "deep" / "x.png").is_file()


def test_merge_refuses_a_destination_with_other_results(tmp_path):
    from experiments.study import merge_runs

    shard = tmp_path / "s0"
    with RunDir.writer(shard) as rd:
        rd.record_config("study", {"config": {"models": ["m"], "translation_prompts": 1, "layout_per_subcategory": 1,
                                              "samples": 0, "translation_samples": 0, "svg": False, "seed": 0}})
        rd.append(RunDir.GENERATIONS, [_row("1A-00", 0, "fill('red')")])
    other = tmp_path / "other"
    with RunDir.writer(other) as rd:
        rd.record_config("study", {"config": {"models": ["x"]}})
    with pytest.raises(RunError, match="other settings"):
        merge_runs([shard], other)
    extra = tmp_path / "extra"
    with RunDir.writer(extra) as rd:
        rd.append(RunDir.GENERATIONS, [_row("9Z-99", 0, "fill('red')")])
    with pytest.raises(RunError, match="none of the shards has"):
        merge_runs([shard], extra)


def test_a_stage_without_rows_takes_new_settings_and_one_with_rows_refuses_them(tmp_path):
    """Settings are refused only where rows made under the old ones would be dropped or mixed."""
    with RunDir.writer(tmp_path, "t") as rd:
        rd.record_config("attention/m/layout", {"chunk": 3})
        with pytest.raises(RunError, match="chunk"):
            rd.record_config("attention/m/layout", {"chunk": 8})
        rd.record_config("attention/m/layout", {"chunk": 8}, fresh=True)
        assert rd.config()["stages"]["attention/m/layout"] == {"chunk": 8}


def test_a_refusal_under_the_lock_leaves_the_lock_as_it_found_it(tmp_path):
    """Issue 42: a command that refused after taking the lock left .lock with its own pid and a new mtime. A writer
    that exits with an exception (or a non-zero exit) puts the lock's content and times back; one that finishes
    keeps its own record."""
    import os
    import time

    import pytest

    from experiments.rundir import RunDir, RunError

    run = tmp_path / "run"
    run.mkdir()
    lock = run / RunDir.LOCK
    lock.write_text('{"pid": 1, "host": "elsewhere", "command": "ambench run"}')
    old = time.time_ns() - 3_600_000_000_000
    os.utime(lock, ns=(old, old))
    before = (lock.read_bytes(), lock.stat().st_mtime_ns)
    with pytest.raises(RunError):
        with RunDir.writer(run, "ambench attention"):
            assert b"ambench attention" in lock.read_bytes()  # held: it says who holds it
            raise RunError("refused after the lock")
    assert (lock.read_bytes(), lock.stat().st_mtime_ns) == before
    with pytest.raises(SystemExit):
        with RunDir.writer(run, "ambench steer"):
            raise SystemExit(2)
    assert (lock.read_bytes(), lock.stat().st_mtime_ns) == before
    with RunDir.writer(run, "ambench probe"):
        pass
    assert b"ambench probe" in lock.read_bytes()  # a command that finished keeps its record


def test_a_file_system_error_in_the_model_cache_names_ambench_cache(tmp_path, monkeypatch):
    """Issue 42: a read-only HOME was told to "copy the run to a writable folder" when the model cache was the problem."""
    import errno

    from experiments.rundir import fs_error
    from interp.model_names import cache_dir

    monkeypatch.setenv("AMBENCH_CACHE", str(tmp_path / "cache"))
    for code in (errno.EROFS, errno.EACCES, errno.ENOSPC):
        said = fs_error(OSError(code, "x"), cache_dir() / "smollm2-f32")
        assert "AMBENCH_CACHE" in said and "copy the run" not in said, said
    run = fs_error(OSError(errno.EROFS, "x"), tmp_path / "run" / ".lock")
    assert "copy the run to a writable folder" in run and "AMBENCH_CACHE" not in run
