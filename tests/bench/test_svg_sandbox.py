"""SVG answers in the sandbox: the hostile SVG corpus gets its outcomes in workers (the parent never crashes,
nothing hangs past the limits), the pool renders afterwards, and icon-style files are accepted and drawn."""

import json
from pathlib import Path

import numpy as np
import pytest

from bench.sandbox.job import Job
from bench.sandbox.pool import SandboxPool
from bench.sandbox.runtime import OUTCOMES

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
HOSTILE = [json.loads(line) for line in open(CORPUS / "svg_hostile.jsonl")]
BENIGN = [json.loads(line) for line in open(CORPUS / "svg_benign.jsonl")]
FLAG = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><rect width="24" height="24" fill="white"/>'
        '<rect width="24" height="12" fill="#ff0000"/></svg>')


def test_corpus_sizes():
    assert len(HOSTILE) >= 40 and len(BENIGN) >= 100


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(workers=2) as p:
        yield p


@pytest.fixture(scope="module")
def hostile_results(pool):
    return pool.run_jobs([Job(h["text"], kind="svg", native=512) for h in HOSTILE])


@pytest.mark.parametrize("index", range(len(HOSTILE)), ids=[h["id"] for h in HOSTILE])
def test_hostile_svg_gets_expected_outcome(hostile_results, index):
    entry, result = HOSTILE[index], hostile_results[index]
    assert result.outcome == entry["expect"], result.reason
    assert result.outcome in OUTCOMES and result.medium == "svg"
    assert result.reason or result.valid
    assert "\n" not in result.reason


def test_no_hostile_svg_hangs_past_the_limits_and_the_pool_goes_on(pool, hostile_results):
    # `backstop` would mean an attempt ran past every CPU limit into the wall-clock backstop
    assert not [h["id"] for h, r in zip(HOSTILE, hostile_results) if r.outcome == "backstop"]
    after = pool.run_jobs([Job(FLAG, kind="svg", size=24, native=64)])[0]
    assert after.valid and tuple(after.pixels[2, 12]) == (255, 0, 0) and tuple(after.pixels[20, 12]) == (255, 255, 255)
    assert after.png[:8] == b"\x89PNG\r\n\x1a\n"


def test_benign_icons_are_accepted_and_drawn(pool):
    results = pool.run_jobs([Job(b["text"], kind="svg", native=512) for b in BENIGN])
    good = [r.valid and len(np.unique(r.pixels.reshape(-1, 3), axis=0)) >= 2 for r in results]
    bad = [(b["id"], r.outcome, r.reason) for b, r, g in zip(BENIGN, results, good) if not g]
    assert sum(good) / len(good) >= 0.99, bad


def test_svg_and_canvas_jobs_mix_in_one_batch(pool):
    jobs = [Job("fill('red')"), Job(FLAG, kind="svg"), Job("rect(0, 0, 2, 2, 'blue')", geometry=False), Job("<svg>", kind="svg")]
    a, b, c, d = pool.run_jobs(jobs)
    assert a.valid and a.shapes_wkb and a.medium == "v1"
    assert b.valid and b.medium == "svg" and b.png is None
    assert c.valid and not c.shapes_wkb and not c.calls  # geometry stays in the worker when not asked for
    assert d.outcome == "svg"
