"""`ambench render`: JSON output, PNG output, exit codes."""

import json
import subprocess
import sys
from pathlib import Path

AMBENCH = [sys.executable, "-m", "experiments.cli"]


def run(*args, stdin=None):
    return subprocess.run(AMBENCH + list(args), input=stdin, capture_output=True, text=True, timeout=120)


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
