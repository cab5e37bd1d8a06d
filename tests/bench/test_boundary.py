"""The host boundary: strings safe for JSON and HDF5, worker messages validated and bounded, geometry and
scoring bounded inside the workers (issue 12, part 2)."""

import json
import struct

import h5py
import numpy as np
import pytest

from bench.canvas.medium import Limits
from bench.sandbox import boundary
from bench.sandbox.job import Job
from bench.sandbox.pool import SandboxPool
from bench.sandbox.runtime import ExecResult, execute
from bench.translation.references import load_references
from tests.corpus.make_corpus import COMB

POISON_SURROGATE = "fill('navy')\nassert False, 'done \\ud800'"
POISON_NUL = "fill('navy')\nx = 'a\\x00b'\nassert False, x"


def test_clean_text_makes_strings_safe_for_json_and_hdf5(tmp_path):
    dirty = "done \ud800 a\x00b \udfff\ud83d"
    clean = boundary.clean_text(dirty)
    assert clean == "done \ufffd a\ufffdb \ufffd\ufffd"
    clean.encode("utf-8")  # no UnicodeEncodeError
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f.create_dataset("s", data=[clean], dtype=h5py.string_dtype("utf-8"))
        with pytest.raises((ValueError, UnicodeEncodeError)):  # what renders.h5 hit before
            f.create_dataset("bad", data=["a\x00b"], dtype=h5py.string_dtype("utf-8"))
    assert boundary.clean_text("a\nb\r\nc", one_line=True) == "a b c"
    assert boundary.clean_text("abcdef", limit=3) == "abc" and boundary.clean_text(12) == "12"
    assert boundary.clean_text("plain ascii") == "plain ascii"


def test_poison_pills_are_clean_runtime_results():
    with SandboxPool(workers=1) as pool:
        a, b = pool.run([POISON_SURROGATE, POISON_NUL])
    assert (a.outcome, a.reason) == ("runtime", "AssertionError: done \ufffd")
    assert (b.outcome, b.reason) == ("runtime", "AssertionError: a\ufffdb")


def test_render_stage_survives_poison_pills(tmp_path):
    """Before: renders.h5 raised UnicodeEncodeError / 'VLEN strings do not support embedded NULLs' on these rows,
    and every rerun hit the same row."""
    from tests.experiments.runs import GENERATIONS, append
    from experiments.stages.render import read_renders, render_stage

    texts = [POISON_SURROGATE, POISON_NUL, "fill('white')\nrect(1, 1, 4, 4, 'red')"]
    rows = [{"task": "layout", "prompt_id": f"p{i}", "model": "m", "protocol": "zero-shot", "sample": 0, "seed": 0,
             "temperature": 0.0, "prefix": "", "text": t, "code": None, "n_tokens": 1, "stop": "eos", "entropy": [0.1],
             "mean_entropy": 0.1} for i, t in enumerate(texts)]
    append(tmp_path, rows)
    render_stage(tmp_path, workers=1)
    got = read_renders(tmp_path)
    assert sorted(v["outcome"] for v in got.values()) == ["ok", "runtime", "runtime"]
    assert {v["reason"] for v in got.values()} >= {"AssertionError: done \ufffd", "AssertionError: a\ufffdb"}


def test_wire_format_round_trip_and_garbage():
    r = execute("fill('white')\nrect(1, 2, 3, 4, 'red')\npoly([(0, 0), (5, 0), (0, 5)], 'blue')")
    back = boundary.decode(boundary.encode(r))
    assert back.outcome == "ok" and back.calls == r.calls and back.shapes_wkb == r.shapes_wkb
    assert (back.pixels == r.pixels).all() and back.background == r.background
    for garbage in (b"", b"\x00\x00\x00\xff{}", b"\x00\x00\x00\x02{}", struct.pack(">I", 2) + b"[]",
                    boundary.encode(ExecResult("pwned", "x")), boundary.encode(r) + b"trailing",
                    boundary.encode(r)[:-10], b"\x80\x03cos\nsystem\n(S'id'\ntR."):  # a pickle never runs
        out = boundary.decode(garbage)
        assert out.outcome == "crash" and "malformed" in out.reason


def test_geometry_bound_is_a_budget_outcome():
    text = "fill('white')\nfor k in range(120):\n    poly([(k % 24 + (i % 2) * 0.5, i * 24 / 4096) for i in range(4096)], 'red')"
    r = execute(text)
    assert r.outcome == "budget" and "vertices" in r.reason  # was a 17 MB `ok` result
    # simple rings (no even-odd reading, a few work units each): the total-vertex bound decides
    rings = ("import math\nfill('white')\nfor k in range(120):\n    poly([(12 + 11 * math.sin(6.2832 * i / 4096), "
             "12 + 11 * math.cos(6.2832 * i / 4096)) for i in range(4096)], 'red')")
    r = execute(rings, limits=Limits(max_total_vertices=20_000))
    assert r.outcome == "budget" and "polygon vertices in all" in r.reason, r.reason
    few = execute("fill('white')\nfor k in range(3):\n    circle(12, 12, k + 1, 'red')", limits=Limits(max_total_vertices=500))
    assert few.outcome == "budget" and "shapes of" in few.reason  # 3 discs of 257 vertices each


def test_result_size_cap():
    text = "fill('white')\nfor k in range(200):\n    circle(k % 24, k // 24, 2, 'red')"
    with SandboxPool(workers=1, limits=Limits(max_result_bytes=200_000)) as pool:
        big, small = pool.run_jobs([Job(text), Job(text, geometry=False)])
    assert big.outcome == "budget" and "result over 200000 bytes" in big.reason
    assert small.valid  # without geometry the same program's result is small


def test_interleaved_comb_scoring_is_bounded_in_the_worker(tmp_path):
    """Before: two interleaved 1,000-tooth combs ran in 0.02 s in the sandbox, then PIoU scoring in the host never
    finished (100 teeth: seconds; 200: 22 s). Now scoring runs in the worker under its CPU limit."""
    from experiments.stages.translation import score_attempts

    ref = load_references("sampled")[0]
    refs = tmp_path / "refs.jsonl"
    refs.write_text(json.dumps(ref.to_json()) + "\n")
    attempts = tmp_path / "attempts.jsonl"
    plain = "fill('white')\nrect(2, 2, 6, 6, 'red')"
    with open(attempts, "w") as f:
        for text in (COMB.format(n=1000), plain, POISON_NUL):
            f.write(json.dumps({"ref_id": ref.id, "text": text}) + "\n")
    summary = score_attempts(refs, attempts, tmp_path / "scores.jsonl", workers=1)
    rows = [json.loads(line) for line in open(tmp_path / "scores.jsonl")]
    assert summary["attempts"] == 3
    assert rows[0]["outcome"] in ("budget", "timeout") and rows[0]["piou"] == 0.0 and rows[0]["reason"]
    assert rows[1]["outcome"] == "ok" and rows[2]["outcome"] == "runtime" and rows[2]["reason"] == "AssertionError: a\ufffdb"


def test_scores_in_the_worker_equal_scores_in_process():
    from bench.translation.piou import reference_geometry, score_result

    refs = load_references("sampled")[:4]
    texts = ["fill('white')\nrect(2, 2, 10, 10, 'red')\ncircle(15, 15, 5, 'blue')", "fill('black')\nline(0, 0, 23, 23, 'white')"]
    jobs = [Job(t, reference=r, geometry=False) for r in refs for t in texts]
    with SandboxPool(workers=2) as pool:
        results = pool.run_jobs(jobs)
    for job, res in zip(jobs, results):
        assert res.score == score_result(execute(job.text), reference_geometry(job.reference))


def test_decoding_checks_every_call_field():
    """The host's decoder (fields checked inline) gives back exactly what typical programs' workers encoded, and a
    header with any one call field out of its range, of the wrong type or with counts that do not add up is
    `crash`, never a result."""
    import json as _json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "perf"))
    from typical_programs import typical_programs

    results = [execute(t) for t in typical_programs(150, seed=4)]
    for r in results:
        back = boundary.decode(boundary.encode(r))
        assert (back.outcome, back.calls, back.shapes_wkb, back.background, back.ops, back.code) == \
            (r.outcome, r.calls, r.shapes_wkb, r.background, r.ops, r.code)
        assert all(type(x) is float for c in back.calls for x in c.params)

    r = next(r for r in results if len(r.calls) > 3 and r.shapes_wkb)
    data = boundary.encode(r)
    (hlen,) = struct.unpack(">I", data[:4])
    header, blobs = _json.loads(data[4: 4 + hlen]), data[4 + hlen:]

    def with_header(h):
        head = _json.dumps(h).encode("ascii")
        return struct.pack(">I", len(head)) + head + blobs

    assert boundary.decode(with_header(header)).calls == r.calls  # re-framing alone changes nothing
    bad = []
    for field, values in ((1, [[256, 0, 0], [-1, 0, 0], [True, 0, 0], [1.0, 2, 3], [1, 2], "red", None]),
                          (2, [-1, 2 ** 31 + 1, True, 1.5, "3", None]),
                          (3, [-1, True, 1.5, None, header["calls"][1][3] + 1, header["calls"][1][3] - 1])):
        for v in values:
            h = _json.loads(_json.dumps(header))
            h["calls"][1][field] = v
            bad.append(h)
    for v in ([-1], [True], [1.5], "x", [2 ** 40]):
        h = _json.loads(_json.dumps(header))
        h["wkb"] = v if not isinstance(v, list) else v + h["wkb"][1:]
        bad.append(h)
    h = _json.loads(_json.dumps(header))
    h["calls"][0] = h["calls"][0][:3]
    bad.append(h)
    for h in bad:
        out = boundary.decode(with_header(h))
        assert out.outcome == "crash" and "malformed" in out.reason, h


def test_a_library_that_turns_the_cpu_tick_into_its_own_error_still_times_out():
    """GEOS, interrupted by the CPU clock inside an overlay, can raise shapely's GEOSException in place of the
    handler's CpuTimeout (which check runs first depends on where the tick lands): once the clock has fired,
    whatever ends the work is the timeout. Without the rule in `cpu_limit` this ends in ValueError."""
    from bench.sandbox.runtime import CpuTimeout, cpu_limit

    def library_call():
        try:
            while True:
                pass
        except CpuTimeout:
            raise ValueError("interrupted") from None

    with pytest.raises(CpuTimeout):
        with cpu_limit(0.05):
            library_call()
    with pytest.raises(ValueError):  # an error with no tick is the error
        with cpu_limit(5):
            raise ValueError("plain")
