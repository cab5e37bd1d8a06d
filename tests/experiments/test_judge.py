"""Judges: verdict parsing, the OpenAI-compatible client against a loopback server, cache, analyses."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from bench.layout.judge import (DIMENSIONS, JUDGE_SYSTEM, JudgeError, OpenAIJudge, VerdictCache, VerdictParseError,
                                cache_key, judge_messages, parse_verdict, png_bytes)
from tests.experiments.runs import GENERATIONS, append, read_rows
from experiments.judging import (JUDGE_SCORES, inversion_table, judge_agreement, judge_stage, pass_at_k,
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
