"""`ambench render`: JSON output, PNG output, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

AMBENCH = [sys.executable, "-m", "experiments.cli"]


def run(*args, stdin=None):
    return subprocess.run(AMBENCH + list(args), input=stdin, capture_output=True, text=True, timeout=120)


def test_render_json_for_an_svg_answer(tmp_path):
    """`ambench render answer.txt --json` takes an SVG answer (detected, or --medium svg) through the sandbox,
    with the same JSON fields as a program."""
    prog = tmp_path / "p.txt"
    prog.write_text("Here you go:\n```python\nfill('navy')\n```\n")
    canvas = json.loads(run("render", str(prog), "--json").stdout)
    answer = tmp_path / "a.txt"
    answer.write_text('Sure, here is a red box.\n```svg\n<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24">'
                      '<rect width="24" height="24" fill="white"/><rect x="6" y="6" width="12" height="6" fill="#ff0000"/></svg>\n```\n')
    out = tmp_path / "a.png"
    r = run("render", str(answer), "--json", "-o", str(out), "--scale", "2")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == set(canvas)
    assert data["valid"] and data["medium"] == "svg" and data["shapes"] == [] and data["background"] == [255, 255, 255]
    assert data["nonbackground_fraction"] == 0.125 and {tuple(c["rgb"]) for c in data["colors"]} == {(255, 0, 0), (255, 255, 255)}
    from PIL import Image

    assert Image.open(out).size == (48, 48)
    bomb = tmp_path / "b.txt"
    bomb.write_text('<svg xmlns="http://www.w3.org/2000/svg"><g transform="scale(1000000)">' * 1
                    + '<g transform="scale(1000000)">' * 3 + '<rect width="10" height="10" stroke="black"/>' + "</g>" * 4 + "</svg>")
    r = run("render", str(bomb), "--json", "--medium", "svg")
    assert r.returncode == 0, r.stderr  # a renderer panic is a result, not a crash of the command
    data = json.loads(r.stdout)
    assert not data["valid"] and data["outcome"] == "crash" and "panicked" in data["reason"]
    r = run("render", str(prog), "--medium", "nonsense")
    assert r.returncode == 2 and "svg or auto" in r.stderr


def test_render_json_and_png(tmp_path):
    prog = tmp_path / "p.txt"
    prog.write_text("Here you go:\n```python\nfill('navy')\nrect(2, 3, 4, 5, 'red')\n```\n")
    out = tmp_path / "p.png"
    r = run("render", str(prog), "--json", "-o", str(out), "--scale", "4")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["valid"] and data["outcome"] == "ok" and data["reason"] == ""
    assert [s["type"] for s in data["shapes"]] == ["fill", "rect"]
    assert data["shapes"][1]["area"] == 20.0 and data["shapes"][1]["color_name"] == "red"
    assert data["nonbackground_fraction"] == round(20 / 576, 6)
    assert {tuple(c["rgb"]) for c in data["colors"]} == {(0, 0, 110), (230, 25, 25)}
    from PIL import Image

    assert Image.open(out).size == (96, 96)


def test_invalid_program_is_a_result_not_an_error():
    r = run("render", "-", "--json", stdin="import os\nos.system('id')")
    assert r.returncode == 0
    data = json.loads(r.stdout)
    assert not data["valid"] and data["outcome"] == "forbidden" and "import os" in data["reason"]


def test_usage_errors_exit_non_zero(tmp_path):
    assert run("render", str(tmp_path / "missing.txt")).returncode != 0
    assert run("render", "-", "--medium", "nope", stdin="fill('red')").returncode != 0


def test_translation_refs_prompt_score_resume_baseline(tmp_path):
    refs = tmp_path / "refs.jsonl"
    assert run("translation", "refs", "--set", "icons", "--out", str(refs)).returncode == 0
    rows = [json.loads(line) for line in refs.read_text().splitlines()]
    assert len(rows) == 13 and all("prompt" in r and "canonical" in r for r in rows)
    p = run("translation", "prompt", "i-house")
    assert p.returncode == 0 and "First fill the whole canvas with 'sky_blue'" in p.stdout
    assert run("translation", "prompt", "nope").returncode != 0
    attempts = tmp_path / "attempts.jsonl"
    with open(attempts, "w") as f:
        for r in rows:
            f.write(json.dumps({"ref_id": r["id"], "sample": 0, "text": r["canonical"]}) + "\n")
            f.write(json.dumps({"ref_id": r["id"], "sample": 1, "text": "while True: pass"}) + "\n")
    out = tmp_path / "scores.jsonl"
    s = run("translation", "score", "--refs", str(refs), "--attempts", str(attempts), "--out", str(out))
    assert s.returncode == 0, s.stderr
    summary = json.loads(s.stdout.strip().splitlines()[-1])
    assert summary["attempts"] == 26 and summary["valid_rate"] == 0.5 and summary["piou_median"] == 0.5
    full = out.read_text()
    lines = full.splitlines(keepends=True)
    assert [json.loads(x)["piou"] for x in lines[:2]] == [1.0, 0.0]
    # resume: drop the last lines (a killed run) and score again -> the same file, nothing duplicated
    out.write_text("".join(lines[:9]))
    assert run("translation", "score", "--refs", str(refs), "--attempts", str(attempts), "--out", str(out)).returncode == 0
    assert out.read_text() == full
    b = run("translation", "baseline", "--draws", "2", "--seed", "1")
    assert b.returncode == 0 and "paper       0.072" in b.stdout


def test_run_with_an_unknown_model_is_a_clear_error(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli import app

    res = CliRunner().invoke(app, ["run", "--model", "no-such-model", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "unknown model" in res.output
    assert not (tmp_path / "r" / "config.json").exists()  # nothing recorded: the corrected command can reuse --out
    res = CliRunner().invoke(app, ["run", "--preset", "huge", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "unknown preset" in res.output
    res = CliRunner().invoke(app, ["run", "--shard", "3/2", "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "0 <= i < n" in res.output
