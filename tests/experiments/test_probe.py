"""The probe stage on synthetic runs with constructed answers: a planted layer, the headline Delta R^2
with its permutation test (and a run where nothing is planted, which must not pass), tasks kept apart,
and shared/specific targets when models cover different prompts."""

import json

import numpy as np

from activations.store import ActivationWriter
from bench.layout.prompts import load_layout_prompts
from tests.experiments.runs import GENERATIONS, append, read_rows
from experiments.stages.probe import PROBES, ProbeSettings, consensus, probe_stage
from experiments.stages.render import render_stage
from interp.probes import occupancy

META = {"protocol": "zero-shot", "medium": "v1", "positions": ["subject", "turn", "last"]}
FAST = ProbeSettings(tasks=("layout",), n_perm=19, n_perm_layers=4, n_boot=200, pca=(2, 4, 8, 16),
                     alphas=(0.1, 1.0, 10.0, 100.0), outer=5, inner=3)


def _rows(prompts, model, task, rng, samples=4):
    rows = []
    for pid in prompts:
        r, c, h, w = (int(v) for v in (rng.integers(0, 12), rng.integers(0, 12), rng.integers(6, 12), rng.integers(6, 12)))
        for k in range(samples):
            dr = int(rng.integers(-1, 2))
            text = f"fill('white')\nrect({r + dr}, {c}, {h}, {w}, 'red')" if k != samples - 1 or pid != prompts[0] else "fill('white')"
            rows.append({"task": task, "prompt_id": pid, "model": model, "protocol": "zero-shot", "medium": "v1",
                         "sample": k, "seed": k, "temperature": 0.7, "prefix": "", "text": text, "code": None,
                         "n_tokens": 1, "stop": "eos", "entropy": [0.1], "mean_entropy": 0.1})
    return rows


def _run(tmp_path, n_prompts=30, samples=4, seed=0):
    rng = np.random.default_rng(seed)
    prompts = [p.id for p in load_layout_prompts()][:n_prompts]
    rows = _rows(prompts, "m", "layout", rng, samples)
    rows.append({**rows[0], "prompt_id": "3E-09", "sample": 0, "text": "```python\nfill('white'\n```"})  # no valid attempt
    append(tmp_path, rows)
    render_stage(tmp_path, workers=1)
    return prompts


def _acts(tmp_path, name, prompts, task, y, layer, rng, d=40, sites=4, strength=3.0, embed_mean=None):
    acts = rng.normal(size=(len(prompts), sites, 3, d)).astype(np.float32)
    if layer is not None:
        acts[:, layer, :, :] += (strength * y @ rng.normal(size=(36, d)))[:, None, :].astype(np.float32)
    path = tmp_path / "activations" / f"{name}.h5"
    with ActivationWriter(path, sites, 3, d, {**META, "model": {"name": name}}) as w:
        w.append(prompts, acts, np.zeros((len(prompts), 3)), [task] * len(prompts), embed_mean=embed_mean)


def test_probe_stage_finds_the_planted_layer_and_the_headline_delta(tmp_path):
    prompts = _run(tmp_path)
    cons, counts = consensus(tmp_path, "m", "layout", "zero-shot", "v1", 3)
    assert counts == {"prompts_seen": 31, "kept": 30, "dropped": 1}
    y = np.stack([cons[p]["own"] for p in prompts])
    _acts(tmp_path, "m", prompts, "layout", y, 2, np.random.default_rng(1))
    rows = probe_stage(tmp_path, s=FAST)
    own = {(r["layer"], r["position"]): r for r in rows if r.get("features") == "resid" and r["target"] == "own"}
    assert own[(2, "last")]["r2"] > 0.5 and own[(0, "last")]["r2"] < 0.1
    assert own[("best", "last")]["r2"] > 0.5 and all(c["layer"] == 2 for c in own[("best", "last")]["chosen"])
    assert own[(2, "last")]["p_perm"] == 0.2 and "q_bh" in own[(2, "last")]
    delta = {r["position"]: r for r in rows if r.get("features") == "delta" and r["target"] == "own"}
    text = next(r for r in rows if r.get("features") == "text" and r["target"] == "own")
    for pos in ("subject", "turn", "last"):
        d = delta[pos]
        # the interval rests on `repeats` partitions of a repeated CV now (issue 19), not on `n_boot` resamples
        assert {"delta_r2", "delta_ci", "delta_mean", "p_perm", "q_bh", "n_perm", "repeats", "bh_family"} <= set(d)
        assert abs(d["delta_r2"] - (own[("best", pos)]["r2"] - text["r2"])) < 1e-5
        assert d["delta_r2"] > 0.4 and d["delta_ci"][0] > 0 and d["p_perm"] == 1 / 20 and d["n_perm"] == 19
        # one BH family per question (issue 39): every Delta test of the task, each position and target
        assert d["bh_family"].startswith("every Delta test of task layout, target own: 3 tests") and "last, subject, turn" in d["bh_family"]
    assert {"targets", "ceiling"} <= {r.get("kind") for r in rows}
    assert all(r["task"] == "layout" for r in rows)
    beyond = [r for r in rows if r.get("features") == "beyond_text"]
    assert beyond and all("embedding-mean" in r["missing_baselines"] for r in beyond)  # a store without them says so
    lines = [json.loads(x) for x in (tmp_path / PROBES).read_text().splitlines()]
    assert len(lines) == len(rows) and (tmp_path / "probes" / "m-layout.png").is_file()
    assert occupancy(np.zeros((24, 24, 3), np.uint8), (0, 0, 0)).sum() == 0


def test_nothing_planted_gives_no_headline_effect(tmp_path):
    """The broken variant of the test above: the same run with activations that carry no plan."""
    prompts = _run(tmp_path)
    _acts(tmp_path, "m", prompts, "layout", None, None, np.random.default_rng(1))
    rows = probe_stage(tmp_path, s=FAST)
    deltas = [r for r in rows if r.get("features") == "delta"]
    assert len(deltas) == 3
    # the planted run gives Delta > 0.4 with p = 1/20 at every position; here the mean Delta is near 0
    # and at most one position reaches the smallest p (the test's own calibration: tests/interp/test_probes.py)
    assert np.mean([d["delta_r2"] for d in deltas]) < 0.05
    assert sum(d["p_perm"] <= 0.05 for d in deltas) <= 1


def test_tasks_never_mix_in_targets_or_probes(tmp_path):
    """A run with translation and layout attempts of the same model: targets and probes stay per task
    (on the old stage, translation attempts became layout probe targets)."""
    rng = np.random.default_rng(4)
    lay = [p.id for p in load_layout_prompts()][:12]
    tr = [f"s{i:03d}" for i in range(12)]
    rows = _rows(lay, "m", "layout", rng) + _rows(tr, "m", "translation", rng)
    rows.append({**rows[0], "task": "translation", "prompt_id": lay[0], "sample": 9, "text": "fill('red')"})  # same id, other task
    append(tmp_path, rows)
    render_stage(tmp_path, workers=1)
    cons_l, _ = consensus(tmp_path, "m", "layout", "zero-shot")
    cons_t, _ = consensus(tmp_path, "m", "translation", "zero-shot")
    assert set(cons_l) == set(lay) and set(cons_t) == set(tr) | {lay[0]}
    assert not np.array_equal(cons_l[lay[0]]["own"], cons_t[lay[0]]["own"])
    d = 30
    acts = np.random.default_rng(5).normal(size=(25, 2, 3, d)).astype(np.float32)
    with ActivationWriter(tmp_path / "activations" / "m.h5", 2, 3, d, {**META, "model": {"name": "m"}}) as w:
        w.append(lay + tr + [lay[0]], acts, np.zeros((25, 3)), ["layout"] * 12 + ["translation"] * 13)
    out = probe_stage(tmp_path, s=ProbeSettings(tasks=("layout", "translation"), n_perm=0, n_perm_layers=0, n_boot=100,
                                                pca=(2, 4), alphas=(1.0, 10.0), outer=5, inner=3))
    by_task = {r["task"] for r in out}
    assert by_task == {"layout", "translation"}
    lay_best = [r for r in out if r.get("layer") == "best" and r["task"] == "layout"]
    tr_best = [r for r in out if r.get("layer") == "best" and r["task"] == "translation"]
    assert {r["n_prompts"] for r in lay_best} == {12} and {r["n_prompts"] for r in tr_best} == {13}
    assert {r["role"] for r in tr_best} == {"control"} and {r["role"] for r in lay_best} == {"headline"}


def test_shared_and_specific_keep_every_model_when_coverage_differs(tmp_path):
    """Three models; m3 has targets for only some prompts. Shared averages, per prompt, the other models
    that have it (the old stage dropped m3 from 'shared' without a word); contributors are recorded, and
    the text baseline and ceiling are reported for own, shared and specific."""
    prompts = _run(tmp_path)
    base = read_rows(tmp_path / GENERATIONS)
    extra = [dict(r, model="m2") for r in base]
    extra += [dict(r, model="m3") for r in base if r["prompt_id"] in prompts[:20]]
    append(tmp_path, extra)
    render_stage(tmp_path, workers=1)
    rng = np.random.default_rng(2)
    for name in ("m", "m2", "m3"):
        cons, _ = consensus(tmp_path, name, "layout", "zero-shot")
        have = [p for p in prompts if p in cons]
        _acts(tmp_path, name, have, "layout", np.stack([cons[p]["own"] for p in have]), 1, rng, d=20, sites=3)
    out = probe_stage(tmp_path, s=FAST)
    mine = [r for r in out if r["model"] == "m"]
    got = {r["target"] for r in mine if r.get("features") == "resid"}
    assert {"own", "shared", "specific", "model:m2", "model:m3"} <= got
    cov = next(r for r in mine if r.get("kind") == "shared_coverage")
    assert cov["contributors"] == {"m2": 30, "m3": 20} and cov["shared_uncovered"] == 0
    for t in ("own", "shared", "specific"):
        assert any(r.get("features") == "text" and r["target"] == t for r in mine)
        assert any(r.get("features") == "delta" and r["target"] == t for r in mine)
    assert any(r.get("kind") == "ceiling" and r["target"] == "shared" for r in mine)
    shared = next(r for r in mine if r.get("features") == "resid" and r["target"] == "shared" and r["layer"] == 1
                  and r["position"] == "last")
    assert shared["r2"] > 0.5 and shared["shared_models"] == ["m2", "m3"]
    assert (tmp_path / "probes" / "m-layout-shared.png").is_file()


def test_the_beyond_text_row_names_its_ceiling_among_every_lexical_baseline(tmp_path):
    """Activations that hold exactly what the request's embedding mean holds (the plan is in the text's embedding):
    the embedding-mean baseline is read, it is the text ceiling, and the beyond-text Delta is ~0 and not significant,
    while the paper's Delta against TF-IDF is large. Without embedding means the row says which baseline is missing."""
    prompts = _run(tmp_path)
    cons, _ = consensus(tmp_path, "m", "layout", "zero-shot", "v1", 3)
    y = np.stack([cons[p]["own"] for p in prompts])
    rng = np.random.default_rng(3)
    words = (y @ rng.normal(size=(36, 40)) * 3).astype(np.float32)
    _acts(tmp_path, "m", prompts, "layout", None, None, rng, embed_mean=words)
    # the activations of layer 2 are the embedding mean plus noise: nothing beyond the text's embedding
    from activations.store import ActivationStore

    folder = tmp_path / "activations" / "m.h5"
    st = ActivationStore(folder)
    assert st.embed_mean(list(st.rows_of("layout").values())) is not None
    import shutil

    shutil.rmtree(folder)
    acts = rng.normal(size=(len(prompts), 4, 3, 40)).astype(np.float32)
    acts[:, 2] += words[:, None, :]
    with ActivationWriter(folder, 4, 3, 40, {**META, "model": {"name": "m"}}) as w:
        w.append(prompts, acts, np.zeros((len(prompts), 3)), ["layout"] * len(prompts), embed_mean=words)
    rows = probe_stage(tmp_path, s=FAST)
    lex = {r["baseline"] for r in rows if r.get("features") == "lexical" and r["target"] == "own"}
    assert {"word-ngrams", "char-ngrams", "embedding-mean"} <= lex
    bt = {r["position"]: r for r in rows if r.get("features") == "beyond_text" and r["target"] == "own"}
    delta = {r["position"]: r for r in rows if r.get("features") == "delta" and r["target"] == "own"}
    for pos in ("subject", "turn", "last"):
        b = bt[pos]
        assert b["baseline"] == "embedding-mean" and set(b["baselines"]) >= lex | {"tfidf", "embedding@position"}
        assert abs(b["delta_beyond"]) < 0.15 and b["p_fl"] > 0.05 and "missing_baselines" not in b
        assert delta[pos]["delta_r2"] > 0.4


def test_a_constant_baseline_is_never_the_ceiling_and_a_nan_null_is_no_p_value(tmp_path):
    """Issue 28: at a fixed template position layer 0 is the same vector for every prompt. That constant baseline had
    the best CV R^2 of the lexical baselines (the others are negative on few prompts) and became the text ceiling;
    with fewer features than prompts its fit took the SVD branch, divided 0 by 0, every Freedman-Lane target was NaN,
    and the NaN null gave the smallest p there is. A baseline without variance is no candidate (the row says why) and
    no p-value rests on a NaN."""
    prompts = _run(tmp_path)
    rng = np.random.default_rng(5)
    folder = tmp_path / "activations" / "m.h5"
    acts = rng.normal(size=(len(prompts), 4, 3, 8)).astype(np.float32)  # d = 8 < 30 prompts: the SVD branch
    acts[:, 0] = rng.normal(size=(1, 3, 8)).astype(np.float32)  # layer 0: one vector per position, every prompt
    with ActivationWriter(folder, 4, 3, 8, {**META, "model": {"name": "m"}}) as w:
        w.append(prompts, acts, np.zeros((len(prompts), 3)), ["layout"] * len(prompts))
    rows = probe_stage(tmp_path, s=FAST)
    bt = [r for r in rows if r.get("features") == "beyond_text"]
    assert bt
    for b in bt:
        assert b["baseline"] != "embedding@position", b
        assert "embedding@position" in b["excluded_baselines"], b
        assert b["p_fl"] is None or 0 < b["p_fl"] <= 1
        assert b["p_fl"] is not None or b["p_fl_missing"]
        assert b["null_mean"] is not None  # the null is finite: the ceiling's fit no longer divides 0 by 0
    for r in rows:  # no NaN anywhere a p-value stands
        for k in ("p_perm", "p_fl"):
            assert r.get(k) is None or 0 < r[k] <= 1, r


def _family_run(tmp_path, per_group=4, seed=0, models=("m",)):
    """Layout prompts of all 15 subcategories whose layouts share a rectangle per subcategory (plus a small
    per-prompt shift): the paper's prompts come in families that share wording and layout."""
    rng = np.random.default_rng(seed)
    prompts = [p for p in load_layout_prompts()]
    chosen = [p for s in sorted({p.subcategory for p in prompts}) for p in [q for q in prompts if q.subcategory == s][:per_group]]
    fam = {s: tuple(int(v) for v in (rng.integers(0, 12), rng.integers(0, 12), rng.integers(6, 12), rng.integers(6, 12)))
           for s in sorted({p.subcategory for p in chosen})}
    rows = []
    for p, m in ((p, m) for p in chosen for m in models):
        r, c, h, w = fam[p.subcategory]
        dr = int(rng.integers(-1, 2))
        for k in range(2):
            rows.append({"task": "layout", "prompt_id": p.id, "model": m, "protocol": "zero-shot", "medium": "v1",
                         "sample": k, "seed": k, "temperature": 0.7, "prefix": "", "code": None,
                         "text": f"fill('white')\nrect({r + dr}, {c}, {h}, {w}, 'red')", "n_tokens": 1, "stop": "eos",
                         "entropy": [0.1], "mean_entropy": 0.1})
    append(tmp_path, rows)
    render_stage(tmp_path, workers=1)
    return chosen


def test_prompt_families_get_grouped_folds_and_permutations_and_the_paper_procedure_is_labelled(tmp_path):
    """Issue 28: activations that carry one effect per subcategory and targets that carry another, independent one:
    activations and targets are independent as wholes, so nothing is decodable for new prompts of new subcategories.
    With prompt-level folds a probe learns subcategory -> its layout from subcategory-mates, and the paper's
    permutation test (whose permutations scatter the subcategories) finds it (the broken variant, kept in the row as
    the paper's procedure). Grouped folds and block permutations: no effect, no small p, and every row says which
    grouping it used."""
    chosen = _family_run(tmp_path)
    rng = np.random.default_rng(7)
    fam = {s: rng.normal(size=40) * 2 for s in sorted({p.subcategory for p in chosen})}
    acts = rng.normal(size=(len(chosen), 4, 3, 40)).astype(np.float32)
    for i, p in enumerate(chosen):
        acts[i, 1:] += fam[p.subcategory].astype(np.float32)  # layers 1-3: the subcategory's effect, not its layout
    with ActivationWriter(tmp_path / "activations" / "m.h5", 4, 3, 40, {**META, "model": {"name": "m"}}) as w:
        w.append([p.id for p in chosen], acts, np.zeros((len(chosen), 3)), ["layout"] * len(chosen))
    rows = probe_stage(tmp_path, s=FAST)
    probes = [r for r in rows if "features" in r]
    assert probes and all(r["grouping"] == "groups" and r["n_groups"] == 15 for r in probes)
    deltas = [r for r in probes if r["features"] == "delta"]
    assert len(deltas) == 3
    for d in deltas:
        assert "new groups" in d["estimand"] and "the paper's" in d["paper"]["procedure"]
        assert d["paper"]["delta_r2"] > 0.1 and d["paper"]["p_perm"] == 1 / 20, d["paper"]  # the broken variant
    assert np.mean([d["delta_r2"] for d in deltas]) < 0.05
    assert sum(d["p_perm"] <= 0.05 for d in deltas) <= 1
    assert all(r["grouping"] == "groups" for r in probes if r["features"] == "beyond_text")


def test_selectivity_cells_use_the_probe_stages_grouped_folds(tmp_path):
    """The selectivity stage refits the probe stage's `layer: best` probes; with grouped prompts it must use the same
    grouped folds, or its cells stop equalling the stage's rows (a prompt-level refit reads group-mates: here
    R^2 > 0.3 against the grouped row's < 0)."""
    from experiments.stages.selectivity import SelectivitySettings, selectivity_stage

    chosen = _family_run(tmp_path, models=("m1", "m2"))
    ids = [p.id for p in chosen]
    rng = np.random.default_rng(7)
    fam = {s: rng.normal(size=40) * 2 for s in sorted({p.subcategory for p in chosen})}
    for name in ("m1", "m2"):
        acts = rng.normal(size=(len(chosen), 4, 3, 40)).astype(np.float32)
        for i, p in enumerate(chosen):
            acts[i, 1:] += fam[p.subcategory].astype(np.float32)
        with ActivationWriter(tmp_path / "activations" / f"{name}.h5", 4, 3, 40, {**META, "model": {"name": name}}) as w:
            w.append(ids, acts, np.zeros((len(chosen), 3)), ["layout"] * len(chosen))
    best = {(r["model"], r["position"]): r["r2"] for r in probe_stage(tmp_path, s=FAST)
            if r.get("features") == "resid" and r["layer"] == "best" and r["target"] == "own"}
    g = dict(pca=FAST.pca, alphas=FAST.alphas, outer=FAST.outer, inner=FAST.inner)
    cells = [r for r in selectivity_stage(tmp_path, SelectivitySettings(n_boot=50, **g)) if r.get("kind") == "cell"
             and r["model"] == r["target"]]
    assert len(cells) == 6
    for c in cells:
        assert abs(c["r2"] - best[(c["model"], c["position"])]) < 1e-5, (c, best)
