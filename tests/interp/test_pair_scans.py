"""Patching at study scale (issue 40): scans over many prompt pairs with per-site inference, path patching.

- A many-pair scan is the one-pair scan of every pair (values, baselines, clean metrics), pairs of different lengths
  with positions named from each end or per pair; attribution likewise.
- Known answer on the xor-planner organism, whose first answer token (the plan line) is read from the last prompt
  token: the last block's output at that token decides its logits, so patching it restores the clean run exactly
  (normalised effect 1, interval excluding 0), while sites that cannot matter (the last block's output at other
  tokens, anything before the first token where the prompts differ) get intervals covering 0. A broken variant (the
  corrupt prompt's own activations patched in) fails it.
- Path patching equals TransformerLens's `get_act_patch_direct_path` for q, k and v receivers; batched equals one
  receiver per forward; the residual receivers equal a hand-written hook.
- `pair_inference`: exact sign-flip p-values on constructed effects, grouping honoured (ignoring the groups, a broken
  variant, rejects a group-level null far above its level).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from interp import pair_effects
from interp.pair_effects import pair_inference
from interp.runtime import Runtime, patching

TEXTS = ["Draw the flag of Germany.", "Draw the flag of France now.", "A cat sitting on a mat.", "fill('white')"]


def _pairs(rt, texts=TEXTS, at=2):
    cat = rt.tokenizer(" cat")["input_ids"][-1]
    dog = rt.tokenizer(" mat")["input_ids"][-1]
    cleans, corrupts, metrics = [], [], []
    for t in texts:
        c = rt.tokenizer(t)["input_ids"]
        k = list(c)
        k[at] = cat if c[at] != cat else dog
        cleans.append(c)
        corrupts.append(k)
        metrics.append((lambda a, b: (lambda lg: lg[:, -1, a] - lg[:, -1, b]))(c[-1], k[at]))
    return cleans, corrupts, metrics


def test_a_many_pair_scan_is_every_pairs_own_scan(tiny):
    cleans, corrupts, metrics = _pairs(tiny)
    assert len({len(c) for c in cleans}) > 1  # pairs differ in length
    many = tiny.patch_scan(corrupts, cleans, metrics, "blocks.{L}.attn.hook_z", positions=[1, -1], heads="all",
                           batch_size=5, groups=["a", "a", "b", "c"])
    assert isinstance(many, patching.PairScan) and many.values.shape == (4, 2, 2, 4)
    for i in range(4):
        one = tiny.patch_scan(corrupts[i], cleans[i], metrics[i], "blocks.{L}.attn.hook_z", positions=[1, -1], heads="all")
        assert (many.values[i] - one.values).abs().max() <= 1e-5
        assert many.baseline[i] == pytest.approx(one.baseline, abs=1e-5) and many.clean[i] == pytest.approx(one.clean, abs=1e-5)
        assert many.pair_positions[i] == [1, len(cleans[i]) - 1]
    frame = many.to_frame()
    assert len(frame) == 2 * 2 * 4 and {"mean_effect", "lo", "hi", "p", "q", "n_groups", "grouping"} <= set(frame.columns)
    assert (frame["n_groups"] == 3).all() and (frame["grouping"] == "groups").all()
    assert np.allclose(frame["mean_effect"], many.effect.mean(0).reshape(-1).numpy(), atol=1e-6)
    per_pair = many.to_frame(per_pair=True)
    assert len(per_pair) == 4 * 2 * 2 * 4 and set(per_pair["group"]) == {"a", "b", "c"}
    # positions named per pair: the same sites, so the same values
    per = tiny.patch_scan(corrupts, cleans, metrics, "blocks.{L}.attn.hook_z", heads="all",
                          positions=[[1, len(c) - 1] for c in cleans])
    assert (per.values - many.values).abs().max() <= 1e-5 and per.positions == [0, 1]
    attribution = tiny.attribution_scan(corrupts, cleans, metrics, "blocks.{L}.hook_resid_pre", positions=[2, -1])
    for i in range(4):
        one = tiny.attribution_scan(corrupts[i], cleans[i], metrics[i], "blocks.{L}.hook_resid_pre", positions=[2, -1])
        assert (attribution.values[i] - one.values).abs().max() <= 1e-5


def test_logits_only_where_the_metric_reads_give_the_same_values(tiny):
    """reads=[-1]: each forward computes the last token's logits only (the metric sees [rows, 1, vocab]); the values
    are those of the full scan, and a metric reading two positions gets them in increasing order."""
    cleans, corrupts, metrics = _pairs(tiny)
    full = tiny.patch_scan(corrupts, cleans, metrics, "blocks.{L}.attn.hook_z", heads="all", positions=[0, 2, -2, -1])
    kept = tiny.patch_scan(corrupts, cleans, metrics, "blocks.{L}.attn.hook_z", heads="all", positions=[0, 2, -2, -1],
                           reads=[-1], batch_size=5)
    assert (full.values - kept.values).abs().max() <= 1e-5
    seen = []

    def two(lg):
        seen.append(lg.shape[1])
        return lg[:, 0, 5] - lg[:, 1, 7]

    a = tiny.patch_scan(corrupts[0], cleans[0], lambda lg: lg[:, 3, 5] - lg[:, -1, 7], "blocks.{L}.hook_resid_pre")
    b = tiny.patch_scan(corrupts[0], cleans[0], two, "blocks.{L}.hook_resid_pre", reads=[-1, 3])
    assert set(seen) == {2} and (a.values - b.values).abs().max() <= 1e-5
    c = tiny.patch_scan(corrupts[0], cleans[0], lambda lg: lg[:, 0, 5], "blocks.{L}.hook_resid_pre", reads=[3])
    d = tiny.patch_scan(corrupts[0], cleans[0], lambda lg: lg[:, 3, 5], "blocks.{L}.hook_resid_pre")
    assert (c.values[:, 4:] == c.baseline).all() and (c.values - d.values).abs().max() <= 1e-5  # after 3: no forward
    path = tiny.path_scan(corrupts[0], cleans[0], metrics[0], sender=(0, 1), reads=[-1])
    assert (path.values - tiny.path_scan(corrupts[0], cleans[0], metrics[0], sender=(0, 1)).values).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="reads \\[99\\] must lie in"):
        tiny.patch_scan(corrupts[0], cleans[0], metrics[0], "blocks.{L}.hook_resid_pre", reads=[99])
    with pytest.raises(TypeError, match="reads must be a non-empty list"):
        tiny.patch_scan(corrupts, cleans, metrics, "blocks.{L}.hook_resid_pre", positions=[-1], reads=[])


@pytest.mark.parametrize("call, error, words", [
    (lambda rt, c, k, m: rt.patch_scan(c, k[:3], m, "blocks.{L}.hook_resid_pre", positions=[-1]), ValueError,
     "4 corrupt prompts and 3 clean"),
    (lambda rt, c, k, m: rt.patch_scan(c, [k[0][:-1]] + k[1:], m, "blocks.{L}.hook_resid_pre", positions=[-1]),
     ValueError, "pair 0: the clean prompt has"),
    (lambda rt, c, k, m: rt.patch_scan(c, k, m, "blocks.{L}.hook_resid_pre"), ValueError, "differ in length"),
    (lambda rt, c, k, m: rt.patch_scan(c, k, m[:2], "blocks.{L}.hook_resid_pre", positions=[-1]), TypeError,
     "a list of 4 \\(one per pair\\)"),
    (lambda rt, c, k, m: rt.patch_scan(c, k, m, "blocks.{L}.hook_resid_pre", positions=[-1], groups=["a"]), ValueError,
     "one label per pair"),
    (lambda rt, c, k, m: rt.patch_scan(c, k, m, "blocks.{L}.hook_resid_pre", positions=[[1], [2]]), ValueError,
     "positions per pair"),
    (lambda rt, c, k, m: rt.patch_scan(c, k, m, "blocks.{L}.hook_resid_pre", positions=[40]), ValueError,
     "positions \\[40\\] must lie in"),
    (lambda rt, c, k, m: rt.patch_scan(c, k, m, "blocks.{L}.hook_resid_pre", positions=[-1], batch_size=0), ValueError,
     "batch_size must be a positive integer"),
    (lambda rt, c, k, m: rt.patch_scan(c[0], k[0], m[0], "blocks.{L}.hook_resid_pre", groups=["a"]), ValueError,
     "one pair has no groups"),
    (lambda rt, c, k, m: rt.patch_scan(c, k, lambda lg: lg[:, -1, 0] * float("nan"), "blocks.0.hook_resid_pre",
                                       positions=[-1]).to_frame(), ValueError, "NaN or inf"),
    (lambda rt, c, k, m: rt.path_scan(c[0], k[0], m[0], sender=(1, 0)), ValueError, "sender layer must lie in 0..0"),
    (lambda rt, c, k, m: rt.path_scan(c[0], k[0], m[0], sender=(0, 9)), ValueError, "sender head must lie in 0..3"),
    (lambda rt, c, k, m: rt.path_scan(c[0], k[0], m[0], sender=0), TypeError, "sender must be a \\(layer, head\\)"),
    (lambda rt, c, k, m: rt.path_scan(c[0], k[0], m[0], sender=(0, 1), receivers="o"), ValueError,
     "receivers must be one of"),
    (lambda rt, c, k, m: rt.path_scan(c[0], k[0], m[0], sender=(0, 1), receivers="v"), ValueError, "GQA"),
])
def test_bad_many_pair_input_is_one_sentence_before_any_forward(tiny, monkeypatch, call, error, words):
    cleans, corrupts, metrics = _pairs(tiny)
    with pytest.raises(error, match=words):
        call(tiny, corrupts, cleans, metrics)
    assert not any(h for m in tiny.model.modules() for h in (m._forward_hooks, m._forward_pre_hooks) if h)


def test_float_rounding_is_never_an_effect():
    """Sites whose clean and corrupt activations are equal are the corrupt value exactly, and effects within
    ROUNDING of the metric's size count as 0: a same-signed rounding residue over 30 pairs would otherwise be
    'significant' (it was, p = 0.004, in the patching notebook before)."""
    n = 30
    base = torch.linspace(5, 15, n)
    values = base[:, None, None] + torch.stack([torch.full((n,), 3e-6) * base, torch.full((n,), 0.5)], 1)[:, :, None]
    scan = patching.PairScan(values, ["a", "b"], [-1], None, base, base + 1.0)
    inf = scan.summary()
    assert inf.p[0] == 1 and inf.mean[0] == 0 and inf.p[1] < 0.001
    broken = pair_inference(scan.effect.reshape(n, -1).double().numpy())  # without the floor: the residue "matters"
    assert broken.p[0] < 0.001


# --------------------------------------------------------------------------- the inference (constructed effects)

def test_sign_flip_p_values_are_exact_on_constructed_effects():
    five = pair_inference(np.ones(5))
    assert five.p == pytest.approx(2 / 32) and five.flips.startswith("exact") and five.min_p == pytest.approx(2 / 32)
    assert five.lo == pytest.approx(1.0) and five.hi == pytest.approx(1.0)
    zero = pair_inference(np.zeros((6, 3)))
    assert (zero.p == 1).all() and (zero.lo == 0).all() and (zero.hi == 0).all()
    mixed = pair_inference(np.array([1.0, -1.0, 2.0, 0.5]))
    signs = np.array(list(itertools.product([-1, 1], repeat=4)))
    stat = np.abs(signs @ np.array([1.0, -1.0, 2.0, 0.5]))
    assert mixed.p == pytest.approx((stat >= 2.5 - 1e-12).mean())
    grouped = pair_inference(np.array([1.0, 1.0, 1.0, 2.0, 2.0, 3.0]), groups=["a", "a", "a", "b", "b", "c"])
    assert grouped.n_groups == 3 and grouped.p == pytest.approx(2 / 8)  # three group totals: 8 sign vectors
    many = pair_inference(np.arange(1, 31, dtype=float), n_flips=999, seed=3)
    assert many.flips == "999 random sign vectors, seed 3" and many.p == pytest.approx(1 / 1000)


def test_bad_inference_input_is_one_sentence():
    with pytest.raises(ValueError, match="NaN or inf"):
        pair_inference(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="one label per pair"):
        pair_inference(np.ones(3), groups=["a"])
    with pytest.raises(ValueError, match="every pair needs a label"):
        pair_inference(np.ones(2), groups=["a", None])
    with pytest.raises(ValueError, match="level must lie in"):
        pair_inference(np.ones(3), level=1.5)
    with pytest.raises(ValueError, match="n_flips must be a positive integer"):
        pair_inference(np.ones(3), n_flips=0)


def _group_null(rng, groups=12, size=5):
    g = np.repeat(np.arange(groups), size)
    return rng.normal(size=groups)[g] * 2.0 + rng.normal(size=g.size) * 0.3, g


def test_groups_are_honoured_and_ignoring_them_fails(monkeypatch):
    """Under a group-level null (each group shifted by its own draw, mean 0), the grouped interval covers 0 and the
    test rejects near its level; ignoring the groups (every pair its own group: the broken variant) rejects in
    most data sets."""
    def rates():
        rng = np.random.default_rng(7)
        reject = cover = 0
        for r in range(150):
            e, g = _group_null(rng)
            inf = pair_inference(e, groups=g, n_flips=499, seed=r)
            reject += inf.p <= 0.05
            cover += inf.lo <= 0 <= inf.hi
        return reject / 150, cover / 150

    size, coverage = rates()
    assert size <= 0.09 and coverage >= 0.91
    monkeypatch.setattr(pair_effects, "group_index", lambda groups, n: (np.arange(n), "pairs"))
    broken_size, broken_coverage = rates()
    assert broken_size >= 0.3 and broken_coverage <= 0.7


# --------------------------------------------------------------------------- the known answer on an organism

@pytest.fixture(scope="module")
def planner():
    from interp.organisms import WEIGHTS, record
    from interp.organisms.zoo import code_version

    if (record(WEIGHTS / "xor-planner") or {}).get("code_version") != code_version("xor-planner"):
        pytest.skip("committed xor-planner weights missing or stale")
    return Runtime.load("organism:xor-planner", device="cpu")


def _planner_pairs(rt, n=24, seed=0):
    """Clean/corrupt pairs that differ only in the colour word (A: pink <-> blue or teal, one length), which flips
    the plan's row bit v = A xor B; the metric is the logit of the clean plan line minus the corrupt one's at the
    last prompt token. Groups: the (noun, verb) template."""
    from interp.organisms import planners
    from interp.prompts import Protocol, build

    rng = np.random.default_rng(seed)
    cleans, corrupts, metrics, groups = [], [], [], []
    for _ in range(n):
        k = [int(rng.integers(r)) for r in planners.RADIX]
        k[0], k[1] = 0, 1  # pink (warm)
        cool = list(k)
        cool[0], cool[1] = 1, int(rng.integers(2))  # blue or teal
        if rng.integers(2):
            k, cool = cool, k
        a, b = (build(planners.item_of(tuple(x)), Protocol("zero-shot", 0), rt.tokenizer).tokens for x in (k, cool))
        assert len(a) == len(b)
        v = [x[0] ^ x[4] for x in (k, cool)]
        h = k[4] ^ k[6]
        ta, tb = (rt.tokenizer.convert_tokens_to_ids(planners.label(vv, h).strip()) for vv in v)
        cleans.append(a)
        corrupts.append(b)
        metrics.append((lambda x, y: (lambda lg: lg[:, -1, x] - lg[:, -1, y]))(ta, tb))
        groups.append((k[2], k[3]))
    return cleans, corrupts, metrics, groups


def _known_answer(rt):
    cleans, corrupts, metrics, groups = _planner_pairs(rt)
    n = rt.info.n_layers
    first = min(next(i for i, (x, y) in enumerate(zip(c, k)) if x != y) for c, k in zip(cleans, corrupts))
    names = [f"blocks.{n - 1}.hook_resid_post", "blocks.1.hook_resid_pre"]
    scan = rt.patch_scan(corrupts, cleans, metrics, names, positions=[first - 1, -2, -1], groups=groups)
    return scan, scan.to_frame(seed=1).set_index(["name", "pos"])


def test_many_pair_scan_finds_the_site_that_decides_and_clears_those_that_cannot(planner, monkeypatch):
    scan, frame = _known_answer(planner)
    n = planner.info.n_layers
    last = frame.loc[(f"blocks.{n - 1}.hook_resid_post", -1)]
    assert (scan.clean - scan.baseline).min() > 0  # the organism reads its plan: every pair's metric moves
    assert (scan.values[:, 1, 0] == scan.baseline).all()  # before the colour word: an identity patch, exactly
    assert last["lo"] > 0 and last["p"] <= 0.001  # the site that decides: interval excludes 0
    normalized = scan.normalized()[:, 0, 2]
    assert (normalized - 1).abs().max() <= 1e-3  # ... and patching it restores every pair's clean run
    before = scan.positions[0]  # a token before the first one where a pair's prompts differ
    for site in [(f"blocks.{n - 1}.hook_resid_post", -2), (f"blocks.{n - 1}.hook_resid_post", before),
                 ("blocks.1.hook_resid_pre", before)]:
        row = frame.loc[site]
        assert row["lo"] <= 0 <= row["hi"] and abs(row["mean_effect"]) <= 1e-4, (site, row)
    # the broken variant: the corrupt prompt's own activations patched in (the clean run never reaches the scan)
    real = patching._prepare
    monkeypatch.setattr(patching, "_prepare", lambda rt, spec, names, i: real(
        rt, patching._PairSpec(spec.corrupt, spec.corrupt, spec.metric, spec.positions), names, i))
    _, broken = _known_answer(planner)
    assert not broken.loc[(f"blocks.{n - 1}.hook_resid_post", -1)]["lo"] > 0


@pytest.mark.parametrize("receivers", ["q", "k", "v"])
def test_path_patching_equals_transformer_lens(planner, receivers):
    """On the xor-planner (four layers, one key/value head per query head, so K and V paths are defined)."""
    from transformer_lens import patching as tl_patching

    mha = planner
    cleans, corrupts, metrics, _ = _planner_pairs(mha, n=2)
    clean, corrupt, metric = cleans[0], corrupts[0], metrics[0]
    _, clean_cache = mha.bridge.run_with_cache(torch.tensor([clean]))
    _, corrupt_cache = mha.bridge.run_with_cache(torch.tensor([corrupt]))
    biggest = 0.0
    for sender in ((0, 2), (1, 1), (1, 3), (2, 2)):
        ours = mha.path_scan(corrupt, clean, metric, sender=sender, receivers=receivers, batch_size=3)
        theirs = tl_patching.get_act_patch_direct_path(mha.bridge, torch.tensor([corrupt]), clean_cache, corrupt_cache,
                                                       lambda lg: metric(lg)[0], *sender, component=receivers,
                                                       verbose=False)
        later = theirs[sender[0] + 1:].cpu()
        assert ours.values.shape == (later.shape[0], 1, 4) and ours.layers == list(range(sender[0] + 1, 4))
        assert (ours.values[:, 0] - later).abs().max() <= 1e-4
        biggest = max(biggest, float(ours.effect.abs().max()))
        one = mha.path_scan(corrupt, clean, metric, sender=sender, receivers=receivers, batch_size=1)
        assert (one.values - ours.values).abs().max() <= 1e-4
    assert biggest > 0.1  # some of these paths carry much of the effect: the check is not one of zeros


def test_residual_receivers_equal_a_hand_written_hook(planner):
    mha = planner
    cleans, corrupts, metrics, _ = _planner_pairs(mha, n=4)
    clean, corrupt, metric = cleans[1], corrupts[1], metrics[1]
    scan = mha.path_scan(corrupt, clean, metric, sender=(1, 2), receivers="resid")
    assert scan.names == ["blocks.2.hook_resid_pre", "blocks.3.hook_resid_pre", "blocks.3.hook_resid_post"]
    assert scan.layers == [2, 3, 4] and scan.values.shape == (3, 1)
    z = "blocks.1.attn.hook_z"
    _, kc = mha.run_with_cache(clean, names=[z])
    _, cc = mha.run_with_cache(corrupt, names=[z])
    with torch.no_grad():
        w_o = mha.bridge.blocks[1].attn.W_O[2].detach()
        delta = kc[z][0, :, 2] @ w_o - cc[z][0, :, 2] @ w_o
    for i, name in enumerate(scan.names):
        with mha.via_bridge():
            logits = mha.forward(corrupt, hooks=[(name, lambda x, hook: x + delta)])
        assert float(metric(logits)[0]) == pytest.approx(float(scan.values[i, 0]), abs=1e-5)
    many = mha.path_scan(corrupts, cleans, metrics, sender=(1, 2), receivers="resid")
    assert many.values.shape == (4, 3, 1) and (many.values[1] - scan.values).abs().max() <= 1e-5
