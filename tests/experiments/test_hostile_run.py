"""`ambench run` survives hostile model output (issue 12): poison pills, interleaved combs, amplification,
CPU and memory cases, and the whole hostile SVG corpus, injected as the model's own generations.

The model stand-in: the tiny random model (tests/interp/tiny.py) is loaded as a real Runtime and wrapped so
that its `generate` emits chosen texts instead of sampling. `generate_stage` itself runs on the stand-in, so
`generations.jsonl` holds exactly the rows (keys, seeds, protocols, config record) that `ambench run` would
write for that model. The run then finds every generation done and goes on with its real model for
capture and interventions, while every later host stage (renders, SVG arm, translation scores, layout
tables, probes, report) meets the hostile texts.
"""

import json
from pathlib import Path

import pytest

from tests.interp.tiny import build_tiny

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CANVAS = [json.loads(line) for line in open(CORPUS / "hostile.jsonl")]
SVG = [json.loads(line) for line in open(CORPUS / "svg_hostile.jsonl")]
FIRST = ["poison_surrogate", "poison_nul", "poison_surrogate_pair", "comb_1000_interleaved", "amplification_120x4096",
         "memory_bomb", "infinite_loop", "subclasses"]
#: heavy texts inside every budget (a loop at 95% of the work units, a grown heap, a 384 MB string): each `ok`
EXTRA = ["x = 0\nfor i in range(306000):\n    x = (x * 7 + i) % 1000003\nfill('red')",
         "x = [[i] * 100 for i in range(200000)]\nfill('red')",
         "s = 'a' * 1000000\nparts = [s] * 384\nt = ''.join(parts)\nfill('red')"]
ARGS = ["--translation-prompts", "3", "--layout-per-subcategory", "1", "--samples", "3", "--translation-samples", "3",
        "--max-new-tokens", "12", "--svg", "--n-perm", "19", "--n-perm-layers", "19"]  # the fewest permutations: no p is checked


class StandIn:
    """A Runtime whose `generate` returns queued texts (everything else is the real tiny model's)."""

    def __init__(self, runtime):
        self._rt = runtime
        self.queue: list[str] = []

    def __getattr__(self, name):
        return getattr(self._rt, name)

    def generate(self, prompts, sampling, stop=None, hooks=(), on_token=None):
        from interp.runtime import Generation

        return [Generation(tokens=[1], entropy=[0.0], text=self.queue.pop(0), stop="eos") for _ in prompts]


def write_generations(model: Path, out: Path) -> dict[str, list[str]]:
    from experiments.stages.generate import generate_stage
    from experiments.study import StudyConfig, prompt_sets
    from interp.runtime import Runtime

    c = StudyConfig.from_preset("quick", models=(str(model),), translation_prompts=3, layout_per_subcategory=1, samples=3,
                                translation_samples=3, max_new_tokens=12, svg=True)
    sets = prompt_sets(c)
    rt = StandIn(Runtime.load(str(model)))
    by_id = {h["id"]: h["text"] for h in CANVAS}
    canvas = [by_id[i] for i in FIRST] + EXTRA + [h["text"] for h in CANVAS if h["id"] not in FIRST]
    used: dict[str, list[str]] = {"canvas": [], "svg": []}
    for output, texts in (("canvas", canvas), ("svg", [h["text"] for h in SVG])):
        for task in ("translation", "layout"):
            if output == "svg" and task == "translation":
                continue
            s = c.generate(task, output)  # exactly the settings `ambench run` gives this stage
            n = len(sets[task]) * (s.samples + 1)
            rt.queue = list(texts[: n])
            texts = texts[n:]
            used[output] += rt.queue
            generate_stage(rt, sets[task], out, s, model=str(model))
            assert not rt.queue
    return used


def run(model, out):
    """`ambench run` in this process (tests.experiments.runs.ambench): every hostile program runs in the sandbox's
    worker processes, as it would from the command line; an exception the command did not turn into one sentence
    is raised here."""
    from tests.experiments.runs import ambench

    return ambench(["run", "--model", model, "--out", out, *ARGS], code=None)


#: one worker runs this module (test.sh: --dist loadgroup): its module fixture `hostile_run` (a whole hostile study,
#: ~22 s) would be built again on the second worker whenever the tests were dealt to both
pytestmark = pytest.mark.xdist_group("hostile-run")


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    model = build_tiny(root / "tiny")
    out = root / "run"
    used = write_generations(model, out)
    res = run(model, out)
    return model, out, used, res


def test_the_run_finishes_and_records_every_attempt(hostile_run):
    from bench.sandbox.runtime import OUTCOMES
    from tests.experiments.runs import GENERATIONS, read_rows
    from experiments.stages.render import read_renders, row_key

    model, out, used, res = hostile_run
    assert res.exit_code == 0, res.stderr[-4000:]
    rows = read_rows(out / GENERATIONS)
    assert len(rows) == len(used["canvas"]) + len(used["svg"])  # the run generated nothing itself
    renders = read_renders(out)
    assert {row_key(r) for r in rows} == set(renders)
    outcomes = [renders[row_key(r)]["outcome"] for r in rows]
    assert set(outcomes) <= set(OUTCOMES) and "backstop" not in outcomes
    for f in ("translation_scores.jsonl", "layout_table.json", "summary.json", "report/index.html"):
        assert (out / f).is_file(), f


def test_each_hostile_text_gets_its_outcome(hostile_run):
    from tests.experiments.runs import GENERATIONS, read_rows
    from experiments.stages.render import read_renders, row_key

    model, out, used, res = hostile_run
    renders = read_renders(out)
    got = {}
    for r in read_rows(out / GENERATIONS):
        got.setdefault(r["text"], renders[row_key(r)])
    by_id = {h["id"]: h["text"] for h in CANVAS}
    assert got[by_id["poison_surrogate"]]["reason"] == "AssertionError: done \ufffd"
    assert got[by_id["poison_nul"]]["reason"] == "AssertionError: a\ufffdb"
    assert got[by_id["amplification_120x4096"]]["outcome"] == "budget"
    assert got[by_id["comb_1000_interleaved"]]["outcome"] == "ok"
    for text in EXTRA:
        assert got[text]["outcome"] == "ok", got[text]["reason"]
    checked = 0
    for h in SVG:
        if h["text"] not in used["svg"]:
            continue  # 60 SVG slots (15 prompts x 4 attempts) for the corpus's first 60 documents
        checked += 1
        # lone surrogates and NUL in the model's own text are made safe when the generation is recorded,
        # so those two documents arrive clean and render
        want = "ok" if h["id"] in ("nul_byte", "lone_surrogate") else h["expect"]
        key = h["text"].replace("\x00", "\ufffd").replace("\ud800", "\ufffd")
        assert got[key]["outcome"] == want, (h["id"], got[key]["reason"])
    assert checked == 60


def test_translation_scores_survive_the_comb(hostile_run):
    model, out, used, res = hostile_run
    rows = [json.loads(line) for line in open(out / "translation_scores.jsonl")]
    assert len(rows) == 12
    by_outcome = {r["outcome"] for r in rows}
    assert by_outcome <= {"ok", "runtime", "budget", "timeout", "memory", "forbidden", "syntax", "no_code"}
    comb = [r for r in rows if r["outcome"] in ("budget", "timeout") and ("scoring" in r["reason"] or "CPU" in r["reason"])]
    assert comb and all(r["piou"] == 0.0 for r in comb)  # the interleaved comb: a recorded outcome, not a hang


def test_a_rerun_resumes_without_hitting_the_same_wall(hostile_run):
    model, out, used, res = hostile_run
    before = (out / "translation_scores.jsonl").read_bytes()
    again = run(model, out)
    assert again.exit_code == 0, again.stderr[-4000:]
    assert (out / "translation_scores.jsonl").read_bytes() == before
