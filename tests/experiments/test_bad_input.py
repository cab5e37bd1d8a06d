"""Bad input, every command (issue 20): each command and sub-command of `ambench --help` gets at least two bad
inputs, and each is one sentence naming the argument and what is accepted, exit 2, no traceback, and no file
changed or created. In-process (typer's CliRunner) and before any model loads, so it is fast enough for CI.

A new command without its bad inputs here fails `test_every_command_has_bad_inputs`."""

from __future__ import annotations

import json
from pathlib import Path

from typing import Any
import pytest
import typer
from typer.testing import CliRunner

from experiments.cli import app
from experiments.rundir import RunDir

R, NEW, FOLDER, FILE, MISSING = "{run}", "{new}", "{folder}", "{file}", "{missing}"

#: command path -> [(arguments, what the one sentence must name)]
BAD: dict[str, list[tuple[list[str], str]]] = {
    "render": [([MISSING], MISSING), (["{answer}", "-o", FOLDER], "-o"), (["{answer}", "--scale", "0"], "--scale"),
               (["{answer}", "--medium", "nope"], "svg or auto")],
    "translation refs": [(["--set", "bogus", "--out", NEW], "bogus"), (["--out", FOLDER], "--out")],
    "translation prompt": [(["nope"], "nope"), ([], "ref_id")],
    "translation score": [(["--refs", "{refs}", "--attempts", "{empty}", "--out", NEW], "no translation attempts"),
                          (["--refs", MISSING, "--attempts", "{attempts}", "--out", NEW], MISSING),
                          (["--refs", "{refs}", "--attempts", "{attempts}", "--out", NEW, "--workers", "0"], "--workers")],
    "translation baseline": [(["--draws", "0"], "--draws"), (["--set", "bogus"], "bogus")],
    "translation prompts": [(["--out", FOLDER], "--out"), (["--set", "bogus", "--out", NEW], "bogus")],
    "generate": [(["--out", NEW, "--task", "layout", "--protocol", "bogus"], "--protocol"),
                 (["--out", NEW, "--prompts", FOLDER], "is a folder"),
                 (["--out", NEW, "--task", "layout", "--device", "bogus"], "--device"),
                 (["--out", NEW, "--task", "layout", "--output", "png"], "--output"),
                 (["--out", NEW, "--task", "poetry"], "--task")],
    "capture": [(["--out", NEW, "--task", "layout", "--store-dtype", "int8"], "--store-dtype"),
                (["--out", NEW, "--task", "layout", "--final-site", "middle"], "--final-site"),
                (["--out", NEW, "--task", "layout", "--protocol", "bogus"], "--protocol")],
    "layout prompts": [(["--tier", "T9"], "--tier"), (["--out", FOLDER], "--out")],
    "layout table": [(["--run", R, "--by", "colour"], "--by"), (["--run", FILE], "is a file")],
    "layout compare": [(["--run", R, "--a", "x", "--b", "y"], "'x'"), (["--run", R, "--a", "x", "--b", "y", "--boot", "5"], "--boot")],
    "layout tier-gap": [(["--run", R, "--boot", "1"], "--boot"), (["--run", MISSING], MISSING)],
    "renders": [(["--run", R, "--workers", "0"], "--workers"), (["--run", R, "--workers", "-2"], "--workers"),
                (["--run", MISSING], MISSING)],
    "judge": [(["--run", R], "--base-url"), (["--run", R, "--judge", "j", "--base-url", "notaurl", "--judge-model", "x"], "--base-url"),
              (["--run", R, "--judge", "j", "--local-folder", FOLDER, "--device", "bogus"], "--device")],
    "human export": [(["--run", R, "--out", NEW, "--pairs", "0"], "--pairs"), (["--run", MISSING, "--out", NEW], MISSING)],
    "human import": [(["--kit", MISSING, "{answer}"], MISSING), (["--kit", FOLDER, "{answer}"], "pairs.json"),
                     (["--kit", FOLDER], "answers")],
    "probe": [(["--run", R, "--task", "bogus"], "--task"), (["--run", R, "--repeats", "0"], "--repeats"),
              (["--run", R, "--target-attempts", "greedy"], "--target-attempts")],
    "selectivity": [(["--run", R, "--task", "bogus"], "--task"), (["--run", R, "--min-attempts", "0"], "--min-attempts")],
    "attention": [(["--run", R, "--task", "bogus"], "--task"), (["--run", R, "--sample", "-1"], "--sample"),
                  (["--run", R, "--device", "bogus"], "--device")],
    "intervene": [(["--run", R, "--cut", "middle"], "--cut"), (["--run", R, "--arms", "bogus"], "--arms"),
                  (["--run", R, "--continuations", "0"], "--continuations")],
    "patch": [(["--run", R, "--moved-arm", "sideways"], "--moved-arm"), (["--run", R, "--task", "bogus"], "--task")],
    "steer": [(["--run", R, "--layer", "0", "--position", "bogus"], "--position"),
              (["--run", R, "--layer", "0", "--region", "middle"], "--region"), (["--run", R], "--layer")],
    "trajectory": [(["--run", R, "--task", "bogus"], "--task"), (["--run", R, "--boundaries", "0"], "--boundaries")],
    "causal": [(["--run", R, "--when", "sometimes"], "--when"), (["--run", R, "--max-prompts", "2"], "--max-prompts"),
               (["--run", MISSING], MISSING), (["--run", R], "probes.jsonl")],
    "consistency": [(["--run", R, "--dino-folder", FOLDER, "--batch-size", "0"], "--batch-size"),
                    (["--run", MISSING, "--dino-folder", FOLDER], MISSING)],
    "run": [(["--preset", "huge", "--out", NEW], "huge"), (["--judge-url", "notaurl", "--judge-model", "x", "--out", NEW], "--judge-url"),
            (["--judge-url", "http://127.0.0.1:8000/v1", "--out", NEW], "--judge-model"),
            (["--device", "bogus", "--out", NEW], "--device"), (["--shard", "3/2", "--out", NEW], "--shard"),
            (["--medium", "v9", "--out", NEW], "v9"), (["--batch-size", "0", "--out", NEW], "--batch-size"),
            (["--causal", "maybe", "--out", NEW], "causal")],
    "merge": [([MISSING, "--out", NEW], MISSING), ([], "shards"), ([FOLDER, "--out", NEW], "not a shard")],
    "repair": [([MISSING], MISSING), ([FILE], "is a file")],
    "report": [([MISSING], MISSING), ([FILE], "neither a run directory"), ([R, R], "--out")],
    "organism list": [(["extra"], "extra"), (["--bogus"], "--bogus")],
    "organism train": [(["nope"], "nope"), (["translator", "--seed", "-1"], "--seed"), (["translator", "--out", FOLDER], "already exists")],
}


def leaf_commands() -> list[str]:
    """Every command and sub-command of `ambench --help`, as `group command`."""
    def walk(cmd: Any, prefix: str) -> list[str]:
        if hasattr(cmd, "commands"):  # a group (typer vendors its own click)
            return [c for name, sub in sorted(cmd.commands.items()) for c in walk(sub, f"{prefix} {name}".strip())]
        return [prefix]

    return walk(typer.main.get_command(app), "")


def test_every_command_has_bad_inputs():
    assert sorted(leaf_commands()) == sorted(BAD)
    assert all(len(cases) >= 2 for cases in BAD.values())


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A run with rendered layout attempts, and the files the bad inputs name."""
    from experiments.stages.render import render_stage
    from tests.experiments.runs import PROGRAMS, append

    root = tmp_path_factory.mktemp("bad")
    run = root / "run"
    append(run, [{"task": "layout", "prompt_id": f"1A-0{i}", "model": "m", "protocol": "zero-shot", "medium": "v1", "sample": 0,
                  "seed": 0, "temperature": 0.0, "prefix": "", "text": p, "code": None, "n_tokens": 1, "stop": "eos",
                  "entropy": [0.1], "mean_entropy": 0.1} for i, p in enumerate(PROGRAMS)])
    render_stage(run, workers=1)
    (run / RunDir.LOCK).unlink()
    (root / "folder").mkdir()
    (root / "file").write_text("x")
    (root / "answer.txt").write_text("fill('red')\n")
    (root / "empty.jsonl").write_text("")
    (root / "attempts.jsonl").write_text(json.dumps({"ref_id": "i-house", "text": "fill('red')"}) + "\n")
    res = CliRunner().invoke(app, ["translation", "refs", "--set", "icons", "--out", str(root / "refs.jsonl")])
    assert res.exit_code == 0, res.output
    return root


def _files(root: Path) -> dict[str, tuple]:
    """Every path (folders and the lock included, issue 31: a refusal takes no lock) with its size, mtime and hash."""
    from tests.experiments.runs import tree

    return tree(root)


CASES = [(cmd, args, says) for cmd, cases in BAD.items() for args, says in cases]


@pytest.mark.parametrize("cmd, args, says", CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_bad_input_is_one_sentence_exit_2_and_changes_nothing(root, monkeypatch, cmd, args, says):
    monkeypatch.chdir(root)  # a relative default (`ambench run --out runs/study`) would land here
    names = {R: root / "run", NEW: root / "new", FOLDER: root / "folder", FILE: root / "file", MISSING: root / "missing",
             "{answer}": root / "answer.txt", "{refs}": root / "refs.jsonl", "{empty}": root / "empty.jsonl",
             "{attempts}": root / "attempts.jsonl"}

    def fill(s: str) -> str:
        for k, v in names.items():
            s = s.replace(k, str(v))
        return s

    before = _files(root)
    res = CliRunner().invoke(app, cmd.split() + [fill(a) for a in args])
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output
    message = [line for line in res.output.splitlines() if "rror" in line]
    assert message and fill(says) in res.output, res.output
    assert _files(root) == before
