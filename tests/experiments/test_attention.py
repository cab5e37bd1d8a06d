"""The attention-focus stage (issue 16) on a run of a tiny Llama whose layer-0 attention is set by hand: every
valid attempt's layer-0 focus equals the closed form, attempts without a spatial word or a top-level
statement are skipped with their reason, the stage resumes, the table summarises the distribution, and
the command line and the report show it."""

import math

import numpy as np
import pytest

from experiments.rundir import RunDir, read_rows
from experiments.stages.attention import AttentionSettings, attention_stage, attention_table, summarise_attention
from experiments.stages.render import render_stage
from interp.prompts import Protocol, build, layout_items
from tests.experiments.runs import append
from tests.interp.tiny_attention import build_focused, marked_ids

WORDS = ("left", "right", "above", "below", "upper")
SCORE = 3.0
GOOD = ["```python\nfill('white')\nrect(2, 2, 6, 6, 'red')\ncircle(14, 14, 4, 'blue')\n```",
        "```python\nfill('navy')\nline(0, 0, 23, 23, 'gold')\n```"]


def _row(model, pid, k, text, medium="v1"):
    return {"task": "layout", "prompt_id": pid, "model": model, "protocol": "zero-shot", "medium": medium, "sample": k,
            "seed": k, "temperature": 0.7, "prefix": "", "text": text, "code": None, "n_tokens": 1, "stop": "eos",
            "entropy": [0.1], "mean_entropy": 0.1}


#: one worker runs this module (test.sh: --dist loadgroup): its module fixture `focused_run` (~5 s) was built again
#: on the second worker whenever the tests were dealt to both
pytestmark = pytest.mark.xdist_group("attention")


@pytest.fixture(scope="module")
def focused_run(tmp_path_factory):
    from interp.runtime import Runtime

    root = tmp_path_factory.mktemp("attention")
    folder = build_focused(root / "model", WORDS, SCORE)
    run = root / "run"
    m = str(folder)  # the model is named by its folder, as `ambench attention --model FOLDER` names it
    rows = [_row(m, pid, k, GOOD[k]) for pid in ("3A-00", "3A-01", "3A-02", "3A-08") for k in range(2)]
    rows += [_row(m, "2A-00", 0, GOOD[0]),  # the flag of Germany: no spatial word
             _row(m, "3A-00", 2, "```python\ndef draw():\n    fill('white')\n    rect(2, 2, 6, 6, 'red')\ndraw()\n```"),
             _row(m, "3A-00", 3, "```python\nfill('white'\n```"),  # invalid: not a source
             _row(m, "3A-00", 0, GOOD[0], medium="v1-48")]  # another medium: not a source
    append(run, rows)
    render_stage(run, workers=1)
    return Runtime.from_folder(folder, name=m), run


def _closed_form(rt, pid):
    item = {i.id: i for i in layout_items()}[pid]
    built = build(item, Protocol("zero-shot"), rt.tokenizer)
    marked = marked_ids(rt.tokenizer, WORDS)
    n_p, n_b, e = len(built.tokens), sum(t in marked for t in built.tokens), math.exp(SCORE)
    return n_p * e / (n_b * (e - 1) + n_p)


def test_stage_rows_recover_the_constructed_focus_and_resume(focused_run):
    rt, run = focused_run
    counts = attention_stage(rt, run, rt.info.name, AttentionSettings(chunk=3))
    assert counts == {"attempts": 10, "written": 10, "skipped_done": 0, "stale": 0, "errors": 0}
    rows = read_rows(run / RunDir.ATTENTION)
    assert {r["medium"] for r in rows} == {"v1"} and len(rows) == 10
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == 8
    for r in ok:
        assert r["focus_by_layer"][0] == pytest.approx(_closed_form(rt, r["prompt_id"]), rel=1e-3)
        assert len(r["focus_by_layer"]) == 2 and r["layers"] == [0, 1] and r["n_statements"] in (2, 3)
        assert r["spatial_words"] and set(r["spatial_words"]) <= set(WORDS) | {"upper"}
    reasons = {r["prompt_id"] + ":" + str(r["sample"]): r.get("reason") for r in rows if r["status"] != "ok"}
    assert reasons == {"2A-00:0": "no spatial word in the request", "3A-00:2": "no top-level drawing statement"}
    again = attention_stage(rt, run, rt.info.name, AttentionSettings(chunk=3))
    assert again["written"] == 0 and again["skipped_done"] == 10 and read_rows(run / RunDir.ATTENTION) == rows


def test_table_summarises_the_distribution(focused_run):
    rt, run = focused_run
    if not (run / RunDir.ATTENTION).is_file():
        attention_stage(rt, run, rt.info.name)
    (t,) = attention_table(run, n_boot=300)
    focus = [r["focus"] for r in read_rows(run / RunDir.ATTENTION) if r["status"] == "ok"]
    assert t["attempts"] == 8 and t["prompts"] == 4 and t["mean"] == pytest.approx(np.mean(focus), abs=1e-6)
    assert t["median"] == pytest.approx(np.median(focus), abs=1e-6) and t["q1"] <= t["median"] <= t["q3"]
    assert t["ci"][0] <= t["mean"] <= t["ci"][1]
    layer0 = [r["focus_by_layer"][0] for r in read_rows(run / RunDir.ATTENTION) if r["status"] == "ok"]
    assert t["profile"][0] == pytest.approx(np.mean(layer0), abs=1e-5) and t["peak_layer"] == 0
    assert t["skipped"] == {"no spatial word in the request": 1, "no top-level drawing statement": 1}
    summarise_attention(run, n_boot=300)
    assert (run / RunDir.ATTENTION_TABLE).is_file() and (run / RunDir.ATTENTION_PLOT).is_file()


def test_cli_and_report(focused_run, tmp_path):
    import shutil

    from typer.testing import CliRunner

    from experiments.cli import app
    from experiments.stages.report import write_report

    rt, run = focused_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(RunDir.LOCK, RunDir.ATTENTION, RunDir.ATTENTION_TABLE))
    res = CliRunner().invoke(app, ["attention", "--run", str(copy), "--model", rt.info.name, "--layers", "9"])
    assert res.exit_code == 2 and "--layers must be in 0..1" in res.output
    res = CliRunner().invoke(app, ["attention", "--run", str(copy), "--model", rt.info.name, "--layers", "0", "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    assert "focus over 8 attempts (4 prompts)" in res.output and "peak layer 0" in res.output
    page = write_report(copy).read_text()
    assert "Attention focus on the prompt's spatial words" in page and "attend to the spatial words more than uniformly" in page


def test_statement_queries_are_the_statements_tokens(tiny):
    """The query positions of each drawing statement are exactly the tokens that spell it (after the prompt's
    `n` tokens; the stored fence prefix is not re-tokenised); a comment line and the fences are in none, and a
    position off by one would spell a different text."""
    from experiments.stages.attention import statement_queries

    stmts = ["fill('white')", "rect(2, 2, 6, 6, 'red')", "circle(14, 14, 4, 'blue')"]
    row = {"prefix": "```python\n", "text": f"{stmts[0]}\n{stmts[1]}\n# a comment about the red box\n{stmts[2]}\n```"}
    n = 17
    ids, per_stmt = statement_queries(tiny.tokenizer, row, n)
    assert tiny.tokenizer.decode(ids) == row["text"]
    assert len(per_stmt) == 3
    for want, qs in zip(stmts, per_stmt):
        assert qs == list(range(qs[0], qs[-1] + 1)) and qs[0] >= n
        spelt = tiny.tokenizer.decode([ids[q - n] for q in qs])
        assert want in spelt and len(spelt) - len(want) <= 2  # at most a boundary newline on either side
        shifted = tiny.tokenizer.decode([ids[q - n - 1] for q in qs])
        assert want not in shifted
    assert not any("comment" in tiny.tokenizer.decode([ids[q - n] for q in qs]) for qs in per_stmt)
    assert statement_queries(tiny.tokenizer, {"prefix": "", "text": "def draw():\n    fill('white')\ndraw()"}, n)[1] == []


def test_model_errors_are_counted_not_fatal(focused_run, tmp_path):
    """An architecture the TransformerBridge cannot adapt is one sentence for the whole stage (no rows, and
    the CLI fails with it); out of memory on one attempt leaves that attempt without a row, the others are
    written, and a rerun retries only it."""
    import shutil

    from interp.models import ModelError

    rt, run = focused_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(RunDir.LOCK, RunDir.ATTENTION, RunDir.ATTENTION_TABLE))

    class NoBridge:
        info, tokenizer = rt.info, rt.tokenizer

        @property
        def bridge(self):
            raise ModelError("TransformerBridge cannot adapt FooForCausalLM")

    c = attention_stage(NoBridge(), copy, rt.info.name)
    assert c["written"] == 0 and c["errors"] == 10 and "cannot adapt" in c["error"]
    assert not (copy / RunDir.ATTENTION).is_file() or not read_rows(copy / RunDir.ATTENTION)

    class OomOnce:
        info, tokenizer, bridge = rt.info, rt.tokenizer, None
        calls = 0

        def attention_mass(self, *a, **k):
            OomOnce.calls += 1
            if OomOnce.calls == 2:
                raise ModelError("out of memory on the attention pattern of 999 tokens on cpu")
            return rt.attention_mass(*a, **k)

    c = attention_stage(OomOnce(), copy, rt.info.name)
    assert c["written"] == 9 and c["errors"] == 1 and "out of memory" in c["error"]
    assert len(read_rows(copy / RunDir.ATTENTION)) == 9
    again = attention_stage(rt, copy, rt.info.name)
    assert again["written"] == 1 and again["skipped_done"] == 9 and again["errors"] == 0
    assert len(read_rows(copy / RunDir.ATTENTION)) == 10
