"""A refusal writes nothing, and the file system's errors are one sentence too (issue 31).

The promise: every argument, model, task, arm and folder is checked before anything is locked, loaded or written
(validate, then lock, then load, then write), so a command that refuses leaves every file and folder as it found it:
no new folder, no lock, no config section, no temporary file. Tried from outside, in-process, on copies of one small
finished study (`tests.experiments.runs.run_small_study`, built once: tests/experiments/conftest.py) and on an empty
folder.

- The walk (`test_a_refusal_is_one_sentence_and_changes_nothing`): one case per failure the issue found, each
  checked for exit 2, one sentence (no traceback) naming what is wrong, and the whole tree unchanged: every path,
  folders included, the lock included, with its size, mtime and hash before and after.
- The file system's errors (a read-only run, a full disk, a file where a folder is expected) on a read-only bind
  mount and a small tmpfs, skipped where the machine cannot mount (not root, no mount permission): one sentence
  naming the path and what to do, exit 2, no temporary file left, the old results intact.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from typer.testing import CliRunner

from experiments.cli import app
from experiments.rundir import RunDir, atomic_write, fs_error, read_rows
from tests.experiments.runs import copy_run, tree


#: one worker runs this module and the other that reads the same finished study (tests/experiments/conftest.py)
pytestmark = pytest.mark.xdist_group("small-study")


@pytest.fixture(scope="module")
def study(small_study):
    return small_study


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def one_sentence(res: Any, code: int = 2) -> str:
    """The command exited `code` with an `error:` sentence and no traceback; returns its output."""
    assert res.exit_code == code, (res.exit_code, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, res.output
    return res.output


# --------------------------------------------------------------------------- the walk: a refusal changes nothing


def _drop_translation(run: Path) -> None:
    """A layout-only study: its translation attempts removed (whole checked rows, so the file stays valid)."""
    path = run / RunDir.GENERATIONS
    keep = [line for line in path.read_bytes().splitlines(keepends=True) if b'"task": "translation"' not in line]
    path.write_bytes(b"".join(keep))


def _garbage_config(run: Path) -> None:
    (run / RunDir.CONFIG).write_text("garbage\n")


def _delete_render_part(run: Path) -> None:
    (run / RunDir.RENDERS / "part-000000.h5").unlink()


def _prompt_file(text: str, task: str = "layout", pid: str = "p1") -> Callable[[Path], None]:
    """A change writing `root/prompts.jsonl` (beside the copied run) with one prompt."""
    import json

    def write(run: Path) -> None:
        (run.parent / "prompts.jsonl").write_text(json.dumps({"id": pid, "task": task, "text": text}) + "\n")

    return write


def _earlier_release(run: Path) -> None:
    """The study's settings record says an earlier ambench made it."""
    import json

    cfg = json.loads((run / RunDir.CONFIG).read_text())
    cfg["stages"]["study"]["versions"]["ambench"] = "0.0.9"
    (run / RunDir.CONFIG).write_text(json.dumps(cfg))


def _missing_cuda() -> str:
    """A CUDA device this machine does not have (cuda:0 on a CPU-only torch)."""
    import torch

    return f"cuda:{torch.cuda.device_count() if torch.cuda.is_available() else 0}"


#: (case, arguments, what the sentence names, a change made to the copy of the study before the command)
WALK: list[tuple[str, list[str], str, Callable[[Path], None] | None]] = [
    ("3-report-out-file", ["report", "{run}", "--out", "{run}/summary.json"], "is a file", None),
    ("4-intervene-model-not-in-study", ["intervene", "--run", "{run}", "--model", "smollm2-135m-instruct"],
     "no layout attempts of smollm2-135m-instruct", None),
    ("4-intervene-empty-folder", ["intervene", "--run", "{empty}", "--model", "{model}"], "not a run directory", None),
    ("5-trajectory-model-not-in-study", ["trajectory", "--run", "{run}", "--model", "smollm2-135m-instruct"],
     "no layout attempts of smollm2-135m-instruct", None),
    ("5-trajectory-task-not-in-study", ["trajectory", "--run", "{run}", "--model", "{model}", "--task", "translation"],
     "no translation attempts", _drop_translation),
    ("6-repair-not-a-run", ["repair", "{empty}"], "not a run directory", None),
    ("6-repair-garbage-config", ["repair", "{run}"], "config.json is not valid JSON", _garbage_config),
    ("6-probe-garbage-config", ["probe", "--run", "{run}"], "config.json is not valid JSON", _garbage_config),
    ("7-selectivity-unknown-model", ["selectivity", "--run", "{run}", "--models", "nosuch"], "--models 'nosuch'", None),
    ("7-selectivity-one-model", ["selectivity", "--run", "{run}"], "needs at least 2 models", None),
    ("8-capture-model-not-a-name", ["capture", "--model", "../../etc", "--out", "{new}", "--task", "layout"], "../../etc", None),
    ("8-generate-missing-cuda", ["generate", "--model", "{model}", "--task", "layout", "--limit", "1", "--device", "{cuda}",
                                 "--out", "{new}"], "--device", None),
    ("8-generate-quantize-3bit", ["generate", "--model", "{model}", "--task", "layout", "--limit", "1", "--quantize", "3bit",
                                  "--out", "{new}"], "--quantize", None),
    ("9-report-into-another-run", ["report", "{other}", "--out", "{run}"], "is a run directory", None),
    ("9-report-into-a-run-s-folder", ["report", "{other}", "--out", "{run}/report"], "inside the run directory", None),
    ("10-layout-table-missing-render", ["layout", "table", "--run", "{run}"], "ambench renders --run", _delete_render_part),
    ("11-probe-other-permutations", ["probe", "--run", "{run}", "--n-perm", "2500", "--n-perm-layers", "100"],
     "--n-perm 2500 (the study's: 99)", None),
    ("11-selectivity-other-bootstrap", ["selectivity", "--run", "{run}", "--n-boot", "10000"], "--n-boot 10000", None),
    ("30-steer-not-a-run", ["steer", "--run", "{empty}", "--layer", "3", "--model", "{model}"], "not a run directory", None),
    ("30-steer-model-not-in-study", ["steer", "--run", "{run}", "--layer", "0", "--model", "smollm2-135m-instruct"],
     "--model 'smollm2-135m-instruct'", None),
    ("30-steer-layer-past-the-model", ["steer", "--run", "{run}", "--layer", "7", "--model", "{model}"], "--layer", None),
    ("patch-other-settings-before-the-load", ["patch", "--run", "{run}", "--model", "{model}", "--continuations", "1"],
     "continuations", None),
    # issue 42
    ("42-attention-sample-not-in-study", ["attention", "--run", "{run}", "--model", "{model}", "--sample", "99"],
     "--sample 99: the run has no such layout attempt", None),
    ("42-steer-strength-nan", ["steer", "--run", "{run}", "--layer", "0", "--model", "{model}", "--strength", "nan"],
     "--strength nan: give a finite number", None),
    ("42-steer-strength-inf", ["steer", "--run", "{run}", "--layer", "0", "--model", "{model}", "--strength", "0",
                               "--strength", "inf"], "--strength inf: give a finite number", None),
    ("42-run-unknown-reference", ["run", "--model", "{model}", "--prompts", "{prompts}", "--out", "{new}"],
     "translation prompt 'no-such-ref' names no reference", _prompt_file("Draw a red square.", "translation", "no-such-ref")),
    ("42-run-prompt-past-the-context", ["run", "--model", "{model}", "--prompts", "{prompts}", "--out", "{new}"],
     "context is 2,048 tokens", _prompt_file("Draw " + "a red square, " * 1500)),
    ("42-run-10-MB-prompt", ["run", "--model", "{model}", "--prompts", "{prompts}", "--out", "{new}"],
     "a prompt is at most 100,000 bytes", _prompt_file("x" * 10_000_000)),
    ("42-probe-on-an-earlier-release", ["probe", "--run", "{run}"], "is a study of another release: ambench 0.0.9 made it",
     _earlier_release),
    ("42-attention-on-an-earlier-release", ["attention", "--run", "{run}", "--model", "{model}"],
     "is a study of another release", _earlier_release),
    ("42-run-on-an-earlier-release", ["run", "--model", "{model}", "--out", "{run}"], "is a study of another release",
     _earlier_release),
    ("42-generate-prompt-past-the-context", ["generate", "--model", "{model}", "--prompts", "{prompts}", "--task", "layout",
                                             "--out", "{new}"], "context is 2,048 tokens",
     _prompt_file("Draw " + "a red square, " * 1500)),
]


@pytest.mark.parametrize("case, args, says, change", WALK, ids=[c[0] for c in WALK])
def test_a_refusal_is_one_sentence_and_changes_nothing(study, tiny_folder, tmp_path, monkeypatch, case, args, says, change):
    """Each case once wrote before it refused (a config section, a lock, a new folder, a result file, a render part),
    ended in a traceback, or exited 0; issue 31 lists them by number (30: issue 30's `steer --run <not a run>`)."""
    root = tmp_path / "walk"
    run = copy_run(study, root / "run")
    copy_run(study, root / "other")
    (root / "empty").mkdir()
    if change is not None:
        change(run)
    monkeypatch.chdir(root)  # `../../etc` and any relative default land here
    names = {"{run}": run, "{other}": root / "other", "{empty}": root / "empty", "{new}": root / "new",
             "{prompts}": root / "prompts.jsonl",
             "{model}": tiny_folder, "{cuda}": _missing_cuda() if "{cuda}" in args else ""}

    def fill(a: str) -> str:
        for k, v in names.items():
            a = a.replace(k, str(v))
        return a

    before = tree(root)
    out = one_sentence(invoke([fill(a) for a in args]))
    assert fill(says) in out, out
    assert "loading" not in out  # refused before any model loads
    assert tree(root) == before


def test_probe_on_a_study_follows_its_settings_and_its_files_agree(study, tmp_path):
    """Case 11: `probe --run RUN` with its own defaults (2,500/100 permutations) rewrote probes.jsonl while the study's
    summary and report kept 999/49. Options left out now take the study's values, so the files agree: the probes
    recomputed are the study's, byte for byte."""
    run = copy_run(study, tmp_path / "run")
    res = invoke(["probe", "--run", run])
    assert res.exit_code == 0, res.output
    assert (run / RunDir.PROBES).read_bytes() == (study / RunDir.PROBES).read_bytes()


def test_a_refused_command_leaves_no_new_folder_even_after_its_lock(tmp_path, tiny_folder, monkeypatch):
    """Case 8's safety net: a refusal that comes only after the lock (here a model whose load fails) removes the folder
    it made; the lock is never left in a new --out."""
    from interp.models import ModelError
    from interp.runtime import Runtime

    def broken(*a: Any, **k: Any) -> None:
        raise ModelError("cannot load the model (made to fail)")

    monkeypatch.setattr(Runtime, "load", classmethod(broken))
    new = tmp_path / "new"
    out = one_sentence(invoke(["generate", "--model", tiny_folder, "--task", "layout", "--limit", "1", "--out", new]))
    assert "made to fail" in out
    assert not new.exists()


# --------------------------------------------------------------------------- the file system's errors


def test_each_file_system_error_is_a_sentence_naming_the_path_and_what_to_do():
    said = {code: fs_error(OSError(code, os.strerror(code), "/x/RUN/f")) for code in
            (errno.EROFS, errno.ENOSPC, errno.EACCES, errno.ENOTDIR, errno.EEXIST, errno.EISDIR)}
    assert all("/x/RUN/f" in s and "\n" not in s for s in said.values())
    assert "read-only" in said[errno.EROFS] and "writable folder" in said[errno.EROFS]
    assert "no space left" in said[errno.ENOSPC] and "free some space" in said[errno.ENOSPC]
    assert "permission denied" in said[errno.EACCES]
    assert "a file stands where a folder is expected" in said[errno.ENOTDIR]


def test_an_atomic_write_that_fails_leaves_no_temporary_file_and_the_old_file(tmp_path, monkeypatch):
    """A full disk once left `.probes.jsonl.tmp` inside a finished study."""
    path = tmp_path / "probes.jsonl"
    path.write_text("old\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        atomic_write(path, "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probes.jsonl"] and path.read_text() == "old\n"


def test_an_append_that_fails_leaves_the_rows_that_were_whole(tmp_path, monkeypatch):
    """A full disk mid-append leaves the file as it was, not a torn last row."""
    with RunDir.writer(tmp_path / "run", "test") as rd:
        rd.append("x.jsonl", [{"a": 1}])
        before = rd.file("x.jsonl").read_bytes()
        real = os.fsync

        def full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", full)
        with pytest.raises(OSError):
            rd.append("x.jsonl", [{"a": 2}, {"a": 3}])
        monkeypatch.setattr(os, "fsync", real)
        assert rd.file("x.jsonl").read_bytes() == before


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@contextlib.contextmanager
def mounted(kind: str, target: Path, source: Path | None = None, size: int = 0) -> Iterator[Path]:
    """A read-only bind mount of `source` at `target`, or a tmpfs of `size` bytes; skipped where the machine cannot."""
    target.mkdir(parents=True, exist_ok=True)
    ok = (os.geteuid() == 0 and shutil.which("mount") is not None
          and (_mount("--bind", "-o", "ro", str(source), str(target)) if kind == "ro"
               else _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target))))
    if not ok:
        pytest.skip("cannot mount here (a read-only bind mount or a tmpfs needs root and mount permission)")
    try:
        if kind == "ro" and os.access(target, os.W_OK) and _writable(target):
            pytest.skip("the bind mount is not read-only here")
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def _writable(folder: Path) -> bool:
    try:
        (folder / ".probe-write").touch()
    except OSError:
        return False
    (folder / ".probe-write").unlink()
    return True


READ_ONLY = [
    ["run", "--model", "{model}", "--out", "{run}", "--translation-prompts", "3", "--samples", "1"],
    ["probe", "--run", "{run}"], ["repair", "{run}"], ["report", "{run}"], ["selectivity", "--run", "{run}"],
    ["trajectory", "--run", "{run}", "--model", "{model}"],
]


@pytest.mark.parametrize("args", READ_ONLY, ids=[a[0] for a in READ_ONLY])
def test_a_read_only_run_is_one_sentence(study, tiny_folder, tmp_path, args):
    """Case 1: every one of these ended in `OSError: [Errno 30]` on RUN/.lock (the lock opened outside any handler)."""
    src = copy_run(study, tmp_path / "src")
    with mounted("ro", tmp_path / "ro", src) as ro:
        before = tree(ro)
        out = one_sentence(invoke([a.replace("{run}", str(ro)).replace("{model}", str(tiny_folder)) for a in args]))
        assert "read-only file system" in out and str(ro) in out, out
        assert "loading" not in out
        assert tree(ro) == before


def _fill(folder: Path, leave: int) -> None:
    """Fill the file system holding `folder` to all but about `leave` bytes."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave))


FULL = [["probe", "--run", "{run}"], ["report", "{run}"],
        ["run", "--model", "{model}", "--out", "{new}", "--translation-prompts", "1", "--layout-per-subcategory", "1",
         "--samples", "0", "--translation-samples", "0", "--max-new-tokens", "4"]]


@pytest.mark.parametrize("args", FULL, ids=[a[0] + ("-fresh" if "{new}" in a else "") for a in FULL])
def test_a_full_disk_is_one_sentence_and_leaves_no_temporary_file(study, tiny_folder, tmp_path, args):
    """Case 2: a full disk was a traceback (errno 28) and left `.probes.jsonl.tmp`, `.selectivity.jsonl.tmp`,
    `report/.index.html.tmp` inside the finished study. Now: one sentence, and every file as it was. (Selectivity
    writes through the same atomic write; on this one-model study it is refused before it writes: the walk.)"""
    size = sum(p.stat().st_size for p in study.rglob("*") if p.is_file())
    with mounted("tmpfs", tmp_path / "disk", size=size + 2_000_000) as disk:
        run = copy_run(study, disk / "run")
        _fill(disk, 12_288)  # room for a lock and a small file, not for the results
        files = {k: v for k, v in tree(run).items() if v[0] == "file"}
        out = one_sentence(invoke([a.replace("{run}", str(run)).replace("{new}", str(disk / "new"))
                                   .replace("{model}", str(tiny_folder)) for a in args]))
        assert "no space left" in out, out
        left = [str(p) for p in disk.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".index-")]
        assert not left, left
        after = tree(run)
        assert {k: after.get(k) for k in files if k != RunDir.LOCK} == {k: v for k, v in files.items() if k != RunDir.LOCK}
        assert read_rows(run / RunDir.GENERATIONS)


def test_a_file_where_a_folder_is_expected_is_one_sentence(study, tmp_path):
    """`RUN/report` a file: the report cannot be written; one sentence naming it, not a FileExistsError traceback."""
    run = copy_run(study, tmp_path / "run")
    shutil.rmtree(run / "report")
    (run / "report").write_text("not a folder")
    out = one_sentence(invoke(["report", run]))
    assert str(run / "report") in out and "folder" in out, out
    assert (run / "report").read_text() == "not a folder"


@pytest.mark.parametrize("args", [["translation", "refs", "--set", "icons", "--out", "{file}/refs.jsonl"],
                                  ["layout", "prompts", "--out", "{file}/prompts.jsonl"]], ids=["translation-refs", "layout-prompts"])
def test_an_os_error_outside_any_handler_is_one_sentence(tmp_path, args):
    """The command line's root translates an `OSError` that no command caught (here a file where the output's folder
    should be): one sentence with the path, exit 2, nothing written."""
    (tmp_path / "file").write_text("x")
    before = tree(tmp_path)
    out = one_sentence(invoke([a.replace("{file}", str(tmp_path / "file")) for a in args]))
    assert str(tmp_path / "file") in out and "folder" in out, out
    assert tree(tmp_path) == before
