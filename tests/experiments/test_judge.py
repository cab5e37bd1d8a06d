"""Judges: verdict parsing, the OpenAI-compatible client against a loopback server, cache, analyses."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from bench.canvas.png import png_bytes
from bench.layout.judge import (DIMENSIONS, JUDGE_SYSTEM, JudgeError, OpenAIJudge, VerdictCache, VerdictParseError,
                                cache_key, judge_messages, parse_verdict)
from tests.experiments.runs import GENERATIONS, append, read_rows
from experiments.stages.judge import (JUDGE_SCORES, inversion_table, judge_agreement, judge_stage, pass_at_k,
                                 pass_at_k_table)


def test_parse_verdict_variants():
    v = parse_verdict('{"fidelity": 4, "shape": 3, "color": 5, "spatial": 2, "completeness": 1}')
    assert v.overall == 3.0 and v.passed
    v = parse_verdict('Sure!\n```json\n{"Fidelity": 1, "Shape": 1, "Colour": 2, "Spatial": 1, "Completeness": 1.0}\n```')
    assert v.scores["color"] == 2 and not v.passed
    v = parse_verdict("fidelity: 5\nshape: 5\ncolor: 4\nspatial = 4\ncompleteness: 5")
    assert v.overall == 4.6
    for bad in ["I like it", '{"fidelity": 4}', '{"fidelity": 6, "shape": 3, "color": 5, "spatial": 2, "completeness": 1}',
                '{"fidelity": 2.5, "shape": 3, "color": 5, "spatial": 2, "completeness": 1}']:
        with pytest.raises(VerdictParseError):
            parse_verdict(bad)


class Server:
    """A loopback OpenAI-compatible endpoint: fails the first `fail_first` calls with 503, answers
    garbage on calls listed in `garbage`, else a verdict computed from the image's size in bytes."""

    def __init__(self, fail_first=0, garbage=()):
        self.calls, self.bodies = 0, []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls += 1
                outer.bodies.append(body)
                if self.path != "/v1/chat/completions":
                    self.send_response(404)
                    self.end_headers()
                    return
                if outer.calls <= fail_first:
                    self.send_response(503)
                    self.end_headers()
                    return
                url = body["messages"][1]["content"][1]["image_url"]["url"]
                s = len(url) % 6
                text = "no idea" if outer.calls in garbage else json.dumps({d: s for d in DIMENSIONS})
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def _judge(server, name="j1", **kw):
    return OpenAIJudge(name, server.url, "some-vlm", sleep=lambda s: None, **kw)


def test_client_retries_reasks_and_sends_identical_messages():
    png = png_bytes(np.zeros((24, 24, 3), np.uint8))
    s = Server(fail_first=2, garbage={4})
    try:
        v = _judge(s).judge("Draw a cat.", png)
        assert set(v.scores) == set(DIMENSIONS) and s.calls == 3  # 2 x 503, then a verdict
        v2 = _judge(s, name="j2").judge("Draw a cat.", png)  # call 4 is garbage: re-asked, call 5 answers
        assert v2.scores == v.scores and s.calls == 5
        bodies = [b["messages"] for b in s.bodies[2:]]
        assert all(b == bodies[0] for b in bodies) and bodies[0] == judge_messages("Draw a cat.", png)
        assert s.bodies[-1]["temperature"] == 0 and s.bodies[-1]["messages"][0]["content"] == JUDGE_SYSTEM
    finally:
        s.close()


def test_client_gives_up_clearly():
    s = Server(fail_first=100)
    try:
        with pytest.raises(JudgeError, match="after 3 tries"):
            _judge(s, max_retries=2).judge("x", b"png")
    finally:
        s.close()
    with pytest.raises(JudgeError, match="no answer"):
        OpenAIJudge("j", "http://127.0.0.1:9/v1", "m", max_retries=1, sleep=lambda s: None, timeout=2).judge("x", b"png")


def test_cache_keys_and_persistence(tmp_path):
    k = cache_key(b"img", "Draw a cat.", "j1")
    assert k != cache_key(b"img", "Draw a dog.", "j1") != cache_key(b"img", "Draw a cat.", "j2")
    c = VerdictCache(tmp_path / "c.jsonl")
    v = parse_verdict(json.dumps({d: 3 for d in DIMENSIONS}))
    c.put(k, v)
    with open(tmp_path / "c.jsonl", "a") as f:
        f.write('{"torn')
    assert VerdictCache(tmp_path / "c.jsonl").get(k).scores == v.scores


def test_pass_at_k_matches_enumeration():
    import itertools

    for n, c, k in [(10, 3, 1), (10, 3, 3), (10, 0, 5), (5, 5, 5), (11, 4, 10)]:
        outcomes = [1] * c + [0] * (n - c)
        subsets = list(itertools.combinations(range(n), k))
        brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
        assert abs(pass_at_k(n, c, k) - brute) < 1e-12
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def _row(pid, sample, text):
    return {"task": "layout", "prompt_id": pid, "model": "m", "protocol": "zero-shot", "sample": sample, "seed": 1,
            "temperature": 0.0, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos", "entropy": [0.1],
            "mean_entropy": 0.1}


def test_judge_stage_end_to_end_with_cache(tmp_path):
    append(tmp_path, [
        _row("2A-00", 0, "fill('black')\nrect(8, 0, 8, 24, 'red')\nrect(16, 0, 8, 24, 'gold')"),
        _row("2A-00", 1, "fill('white')"),
        _row("3A-00", 0, "import os"),
        _row("3A-00", 1, "fill('white')\ncircle(12, 6, 4, 'red')\nrect(9, 14, 6, 6, 'blue')"),
    ])
    s = Server()
    try:
        counts = judge_stage(tmp_path, _judge(s), None)
        assert counts == {"attempts": 4, "asked": 3, "cached": 0} and s.calls == 3
        again = judge_stage(tmp_path, _judge(s), None)
        assert again == {"attempts": 4, "asked": 0, "cached": 3} and s.calls == 3  # re-judging costs nothing
        judge_stage(tmp_path, _judge(s, name="j2"), None)
    finally:
        s.close()
    rows = read_rows(tmp_path / JUDGE_SCORES)
    assert len(rows) == 8
    invalid = [r for r in rows if not r["valid"]]
    assert len(invalid) == 2 and all(r["overall"] == 0.0 and not r["passed"] for r in invalid)
    table = pass_at_k_table(rows, ks=(1, 2, 3))
    assert table[0]["prompts"] == 2 and "pass@3" not in table[0] and 0 <= table[0]["pass@1"] <= 1
    agree = judge_agreement(rows, "j1", "j2")
    assert agree["sample_rho"] == pytest.approx(1.0) and agree["attempts"] == 4
    inv = inversion_table(rows)
    assert {r["judge"] for r in inv} == {"j1", "j2"} and all(isinstance(r["inverted"], bool) for r in inv)


def test_judge_cli_against_the_loopback_server(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli import app

    append(tmp_path, [_row("2A-00", 0, "fill('black')\nrect(8, 0, 8, 24, 'red')")])
    s = Server()
    try:
        res = CliRunner().invoke(app, ["judge", "--run", str(tmp_path), "--judge", "j1", "--base-url", s.url,
                                       "--judge-model", "vlm"])
    finally:
        s.close()
    assert res.exit_code == 0, res.output
    assert '"asked": 1' in res.output and "pass@1" in res.output
    bad = CliRunner().invoke(app, ["judge", "--run", str(tmp_path / "none"), "--judge", "j", "--base-url", "x", "--judge-model", "m"])
    assert bad.exit_code == 2


# --- judge specs, make_judge and the Judge protocol -------------------------------------------------------------

class RedShareJudge:
    """A judge backend written outside bench/ and experiments/: every score is the red share of the picture, scaled
    to 0..5 (a known answer from the image alone). Registering it is one entry of JUDGE_BACKENDS."""

    def __init__(self, name, scale):
        self.name, self.scale = name, scale

    @classmethod
    def from_spec(cls, spec):
        o = spec.options_for({}, {"scale": (int, float)})
        return cls(spec.name, o.get("scale", 5))

    def judge(self, prompt_text, png):
        import io

        from PIL import Image

        a = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
        red = float(((a[..., 0] > 200) & (a[..., 1] < 80) & (a[..., 2] < 80)).mean())
        s = int(round(red * self.scale))
        return parse_verdict(json.dumps({d: s for d in DIMENSIONS}))


def test_make_judge_builds_each_backend_from_a_spec(tmp_path, monkeypatch):
    from bench.layout.judge import Judge, JudgeSpec
    from experiments.judges import make_judge
    from interp.vlm_judge import TransformersJudge

    j = make_judge({"kind": "openai", "name": "q", "base_url": "http://h/v1", "model": "m", "timeout": 5})
    assert isinstance(j, OpenAIJudge) and isinstance(j, Judge)
    assert (j.name, j.base_url, j.model, j.timeout, j.api_key) == ("q", "http://h/v1", "m", 5.0, None)
    monkeypatch.setenv("AMB_TEST_KEY", "sk-1")
    assert make_judge(JudgeSpec("openai", "q", {"base_url": "u", "model": "m", "api_key_env": "AMB_TEST_KEY"})).api_key == "sk-1"
    (tmp_path / "config.json").write_text("{}")
    local = make_judge({"kind": "local", "name": "v", "folder": str(tmp_path), "device": "cpu", "dtype": "float32"})
    assert isinstance(local, TransformersJudge) and isinstance(local, Judge) and local._model is None  # loads on first use
    assert (local.name, local.folder, local.dtype, local.max_new_tokens) == ("v", tmp_path, "float32", 200)


@pytest.mark.parametrize("spec, message", [
    ([1, 2], "must be a JSON object"),
    ({"name": "x"}, "needs a kind"),
    ({"kind": "openai"}, "needs a name"),
    ({"kind": "openai", "name": "  "}, "needs a name"),
    ({"kind": "openai", "name": "a\nb", "base_url": "u", "model": "m"}, "needs a name"),
    ({"kind": "gemini", "name": "x"}, "unknown kind 'gemini'; known: openai, local"),
    ({"kind": "openai", "name": "x", "base_url": "u"}, r"judge x \(openai\) needs model"),
    ({"kind": "openai", "name": "x", "base_url": "u", "model": "m", "temp": 0}, "unknown option 'temp'; openai takes base_url, model, api_key_env, timeout"),
    ({"kind": "openai", "name": "x", "base_url": "u", "model": "m", "timeout": "60"}, "option timeout must be a number, got str"),
    ({"kind": "openai", "name": "x", "base_url": "u", "model": "m", "timeout": True}, "option timeout must be a number, got bool"),
    ({"kind": "openai", "name": "x", "base_url": "u", "model": "m", "timeout": float("nan")}, "timeout must be in"),
    ({"kind": "openai", "name": "x", "base_url": "", "model": "m"}, "option base_url is empty"),
    ({"kind": "openai", "name": "x", "base_url": "u", "model": "m", "api_key_env": "AMB_SURELY_UNSET_1"}, "AMB_SURELY_UNSET_1 .* is not set"),
    ({"kind": "local", "name": "x"}, r"judge x \(local\) needs folder"),
    ({"kind": "local", "name": "x", "folder": "/nonexistent/vlm"}, "not a model folder"),
    ({"kind": "local", "name": "x", "folder": ".", "dtype": "int8"}, "dtype must be one of bfloat16, float16, float32"),
    ({"kind": "local", "name": "x", "folder": ".", "max_new_tokens": 2.5}, "option max_new_tokens must be a whole number, got float"),
])
def test_a_bad_spec_is_one_sentence(spec, message):
    from experiments.judges import make_judge

    with pytest.raises(JudgeError, match=message) as e:
        make_judge(spec)
    assert "\n" not in str(e.value)


def test_a_new_backend_is_one_registry_entry(tmp_path, monkeypatch):
    """The worked example of docs/extending.md: a backend class (its own module) plus one JUDGE_BACKENDS entry;
    make_judge, the judge stage and `ambench judge --spec` then use it with no other edit."""
    from typer.testing import CliRunner

    from bench.layout.judge import Judge
    from experiments import judges
    from experiments.cli import app

    monkeypatch.setitem(judges.JUDGE_BACKENDS, "redshare", RedShareJudge.from_spec)
    j = judges.make_judge({"kind": "redshare", "name": "red", "scale": 5})
    assert isinstance(j, Judge)
    append(tmp_path, [
        _row("2A-00", 0, "fill('red')"),  # all red: 5 everywhere, passes
        _row("2A-00", 1, "fill('white')\nrect(0, 0, 12, 24, 'red')"),  # half red: round(2.5) = 2, fails
        _row("2A-00", 2, "import os"),  # invalid: never sent, scores 0
    ])
    assert judge_stage(tmp_path, j, None) == {"attempts": 3, "asked": 2, "cached": 0}
    got = {r["sample"]: r for r in read_rows(tmp_path / JUDGE_SCORES)}
    assert got[0]["overall"] == 5.0 and got[0]["passed"] and got[1]["overall"] == 2.0 and not got[1]["passed"]
    assert not got[2]["valid"] and got[2]["judge"] == "red"
    spec = tmp_path / "judge.json"
    spec.write_text(json.dumps({"kind": "redshare", "name": "red2", "scale": 3}))
    res = CliRunner().invoke(app, ["judge", "--run", str(tmp_path), "--spec", str(spec)])
    assert res.exit_code == 0, res.output
    assert '"asked": 2' in res.output and {r["judge"] for r in read_rows(tmp_path / JUDGE_SCORES)} == {"red", "red2"}
    # --judge overrides the spec's name
    res = CliRunner().invoke(app, ["judge", "--run", str(tmp_path), "--spec", str(spec), "--judge", "red3"])
    assert res.exit_code == 0 and "red3" in {r["judge"] for r in read_rows(tmp_path / JUDGE_SCORES)}
    # a backend that builds something that is not a judge is refused by name
    monkeypatch.setitem(judges.JUDGE_BACKENDS, "broken", lambda spec: object())
    with pytest.raises(JudgeError, match="the broken backend built a object, which has no name and judge"):
        judges.make_judge({"kind": "broken", "name": "b"})


def test_judge_cli_spec_errors_are_one_sentence(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli import app

    append(tmp_path, [_row("2A-00", 0, "fill('red')")])
    run = ["judge", "--run", str(tmp_path)]
    cases = {
        "not json": ("{kind", "is not JSON"),
        "unknown kind": (json.dumps({"kind": "gemini", "name": "g"}), "unknown kind 'gemini'"),
        "bad option": (json.dumps({"kind": "openai", "name": "g", "base_url": "u", "model": 3}), "option model must be a string"),
    }
    for label, (text, message) in cases.items():
        (tmp_path / "s.json").write_text(text)
        res = CliRunner().invoke(app, run + ["--spec", str(tmp_path / "s.json")])
        assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, (label, res.output)
    res = CliRunner().invoke(app, run + ["--spec", str(tmp_path / "missing.json")])
    assert res.exit_code == 2 and "cannot read the judge spec" in res.output
    res = CliRunner().invoke(app, run + ["--spec", str(tmp_path / "s.json"), "--base-url", "http://x/v1"])
    assert res.exit_code == 2 and "give one of" in res.output
    res = CliRunner().invoke(app, run + ["--base-url", "http://x/v1", "--judge-model", "m"])
    assert res.exit_code == 2 and "--judge NAME is needed" in res.output
    res = CliRunner().invoke(app, run + ["--judge", "j", "--base-url", "http://x/v1", "--judge-model", "m",
                                         "--api-key-env", "AMB_SURELY_UNSET_2"])
    assert res.exit_code == 2 and "AMB_SURELY_UNSET_2" in res.output and "is not set" in res.output


def test_the_study_judges_through_make_judge(tmp_path):
    """`ambench run --judge-url/--judge-model` (study.finish) builds its judge from a spec and judges the run."""
    from experiments.study import StudyConfig, finish

    append(tmp_path, [_row("2A-00", 0, "fill('black')\nrect(8, 0, 8, 24, 'red')"),
                                         _row("2A-00", 1, "import os")])
    s = Server()
    try:
        c = StudyConfig.from_preset("quick", judge_url=s.url, judge_model="vlm", n_boot=10)
        finish(c, tmp_path, {}, say=lambda m: None)
    finally:
        s.close()
    rows = read_rows(tmp_path / JUDGE_SCORES)
    assert s.calls == 1 and [(r["judge"], r["valid"]) for r in rows] == [("vlm", True), ("vlm", False)]
