"""The rubric and judge prompt are a data file with a schema: loaded once, checked, and byte-identical on the wire."""

import base64
import copy
import json

import pytest

from bench.layout import judge as J
from bench.layout.rubric import RUBRIC, RubricError, load_rubric, parse_rubric

#: the judge system text as it was written in code before it became data (rubric/1); judges must keep getting it
OLD_SYSTEM = (
    "You grade small pixel pictures. Each picture was made to answer a drawing request on a 24x24 grid, "
    "shown enlarged. Judge only what is visible. Score five dimensions with integers from 0 (absent or wrong) "
    "to 5 (excellent):\n"
    "- fidelity: does the picture depict what was requested?\n"
    "- shape: are the shapes recognisable and well formed for this resolution?\n"
    "- color: are the colours appropriate to the request?\n"
    "- spatial: are the parts arranged and proportioned sensibly?\n"
    "- completeness: are all requested elements present?\n"
    'Answer with one JSON object and nothing else, for example {"fidelity": 3, "shape": 2, "color": 4, '
    '"spatial": 3, "completeness": 2}.'
)


def _data():
    from importlib import resources

    return json.loads(resources.files("bench.layout").joinpath("data/rubric.json").read_text(encoding="utf-8"))


def test_the_packaged_rubric_keeps_its_values_and_texts():
    assert (J.RUBRIC_VERSION, J.DIMENSIONS, J.PASS) == ("rubric/1", ("fidelity", "shape", "color", "spatial", "completeness"), 3.0)
    assert isinstance(J.PASS, float) and J.JUDGE_SYSTEM == OLD_SYSTEM
    # the messages on the wire, built the way the old code built them (a request with braces and a line separator)
    png = b"\x89PNG not really"
    request = "Draw a {request} cat.\u2028"
    old = [{"role": "system", "content": OLD_SYSTEM},
           {"role": "user", "content": [{"type": "text", "text": f"Request: {request}\nGrade the picture."},
                                        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode()}}]}]
    assert json.dumps(J.judge_messages(request, png)) == json.dumps(old)
    assert dict(RUBRIC.keys) == {"prompt_fidelity": "fidelity", "fidelity": "fidelity", "shape": "shape", "shapes": "shape",
                                 "color": "color", "colour": "color", "colors": "color", "colours": "color",
                                 "spatial": "spatial", "layout": "spatial", "completeness": "completeness",
                                 "complete": "completeness"}


def test_the_prompt_is_composed_from_the_dimensions():
    d = _data()
    d["dimensions"].append({"name": "mood", "question": "does it feel right?", "aliases": ["vibe"]})
    d["scale"] = {"min": 1, "max": 7}
    r = parse_rubric(d, "test")
    assert r.names[-1] == "mood" and r.keys["vibe"] == "mood"
    assert "- completeness: are all requested elements present?\n- mood: does it feel right?\nAnswer with" in r.system_prompt
    assert r.user_text("Draw {x}.") == "Request: Draw {x}.\nGrade the picture."
    assert (r.score_min, r.score_max) == (1, 7)


@pytest.mark.parametrize("change, message", [
    (lambda d: d.pop("version"), "missing fields \\['version'\\]"),
    (lambda d: d.update(extra=1), "unknown fields \\['extra'\\]"),
    (lambda d: d.update(version=""), "version must be a non-empty string"),
    (lambda d: d.update(scale={"min": 0}), "scale must be"),
    (lambda d: d.update(scale={"min": 5, "max": 0}), "scale min 5 must be below max 0"),
    (lambda d: d.update(pass_threshold=9), "pass_threshold must be a number in 0..5"),
    (lambda d: d.update(pass_threshold=True), "pass_threshold must be a number"),
    (lambda d: d.update(dimensions=[]), "dimensions must be a non-empty list"),
    (lambda d: d["dimensions"][0].pop("aliases"), "dimension 1 must be an object with exactly name, question and aliases"),
    (lambda d: d["dimensions"][1].update(name="Shape"), "dimension 2: name 'Shape' must be lower case"),
    (lambda d: d["dimensions"][1].update(question="two\nlines"), "dimension shape: question must be one non-empty line"),
    (lambda d: d["dimensions"][2].update(aliases=["shapes"]), "dimension color: key 'shapes' is used twice"),
    (lambda d: d["judge_prompt"].update(system="no slot"), "judge_prompt.system must hold {dimensions} exactly once"),
    (lambda d: d["judge_prompt"].update(user="{request} {request}"), "judge_prompt.user must hold {request} exactly once"),
    (lambda d: d["judge_prompt"].update(dimension_line="- {name}"), "dimension_line must hold {name} and {question}"),
    (lambda d: d["judge_prompt"].pop("user"), "judge_prompt must be an object of strings with exactly"),
])
def test_a_broken_rubric_is_one_sentence_naming_the_field(tmp_path, change, message):
    d = copy.deepcopy(_data())
    change(d)
    path = tmp_path / "rubric.json"
    path.write_text(json.dumps(d))
    with pytest.raises(RubricError, match=message) as e:
        load_rubric(path)
    assert str(e.value).startswith(str(path)) and "\n" not in str(e.value)


def test_an_unreadable_rubric_file(tmp_path):
    with pytest.raises(RubricError, match="cannot read the rubric"):
        load_rubric(tmp_path / "none.json")
    (tmp_path / "r.json").write_text('{"version": ')
    with pytest.raises(RubricError, match="not JSON"):
        load_rubric(tmp_path / "r.json")
    (tmp_path / "r.json").write_bytes(b"\xff\xfe")
    with pytest.raises(RubricError, match="cannot read the rubric"):
        load_rubric(tmp_path / "r.json")
    assert load_rubric() == RUBRIC  # the packaged file, loaded again, is the same rubric


def test_the_rubric_file_ships_with_the_package():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    from pathlib import Path

    cfg = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    patterns = cfg["tool"]["setuptools"]["package-data"]["bench.layout"]
    assert "data/*.json" in patterns and "data/*.jsonl" in patterns
