"""Human validation kit: export a static page, import answers, alpha and judge-vs-human agreement."""

import json

import pytest
from typer.testing import CliRunner

from experiments.cli import app
from tests.experiments.runs import GENERATIONS, append
from experiments.stages.human import export_kit, import_answers


def _row(pid, sample, text, protocol="zero-shot"):
    return {"task": "layout", "prompt_id": pid, "model": "m", "protocol": protocol, "sample": sample, "seed": 1,
            "temperature": 0.0, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos", "entropy": [0.1],
            "mean_entropy": 0.1}


@pytest.fixture()
def run(tmp_path):
    rows = []
    for i, pid in enumerate(["1A-00", "1A-01", "2A-00", "3A-00"]):
        rows.append(_row(pid, 0, f"fill('white')\ncircle(12, 12, {3 + i}, 'red')"))
        rows.append(_row(pid, 0, f"fill('black')\nrect(2, 2, {5 + i}, 9, 'blue')", protocol="few-shot-2"))
    append(tmp_path, rows)
    from experiments.stages.render import render_stage

    render_stage(tmp_path, workers=1)  # the kit reads renders (the CLI renders what is missing first)
    return tmp_path


def test_export_is_seeded_and_self_contained(run, tmp_path):
    a = export_kit(run, tmp_path / "kit", n_pairs=3, seed=5)
    b = export_kit(run, tmp_path / "kit2", n_pairs=3, seed=5)
    assert a["pairs"] == b["pairs"] and len(a["pairs"]) == 3
    page = (tmp_path / "kit" / "index.html").read_text()
    assert page.count("data:image/png;base64,") == 6 and "http://" not in page and "https://" not in page
    for p in a["pairs"]:
        assert {json.loads(p["left"])[2], json.loads(p["right"])[2]} == {"zero-shot", "few-shot-2"}


def test_import_alpha_and_judge_agreement(run, tmp_path):
    meta = export_kit(run, tmp_path / "kit", n_pairs=4, seed=0)
    ids = [p["pair"] for p in meta["pairs"]]
    # the judge prefers the zero-shot arm by 2 points on every prompt
    scores = []
    for p in meta["pairs"]:
        for side in ("left", "right"):
            m, task, proto, medium, pid, sample = json.loads(p[side])
            scores.append({"judge": "j", "model": m, "task": task, "protocol": proto, "medium": medium, "prompt_id": pid,
                           "sample": sample, "overall": 4.0 if proto == "zero-shot" else 2.0})
    from experiments.rundir import RunDir

    with RunDir.writer(run, "test fixture") as rd:  # checked rows, as the judge stage writes them
        rd.write_rows(RunDir.JUDGE_SCORES, scores)
    truth = {p["pair"]: ("left" if json.loads(p["left"])[2] == "zero-shot" else "right") for p in meta["pairs"]}
    files = []
    for name, answers in [("ann1", truth), ("ann2", dict(truth))]:
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps({"annotator": name, "kit": meta["kit"], "answers": answers}))
        files.append(f)
    res = import_answers(tmp_path / "kit", files, run, "j")
    assert res["alpha_nominal"] == pytest.approx(1.0) and res["separated_pairs"] == 4 and res["judge_human_agreement"] == 1.0
    # a contrarian annotator: alpha drops below zero (systematic disagreement)
    flip = {k: ("right" if v == "left" else "left") for k, v in truth.items()}
    files[1].write_text(json.dumps({"annotator": "ann2", "kit": meta["kit"], "answers": flip}))
    assert import_answers(tmp_path / "kit", files)["alpha_nominal"] < 0
    files[1].write_text(json.dumps({"annotator": "x", "kit": "other", "answers": {}}))
    with pytest.raises(ValueError, match="answers kit"):
        import_answers(tmp_path / "kit", files)
    res = CliRunner().invoke(app, ["human", "import", "--kit", str(tmp_path / "kit"), str(files[0])])
    assert res.exit_code == 0 and '"alpha_nominal": null' in res.output
    assert ids
