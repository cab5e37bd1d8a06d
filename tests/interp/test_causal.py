"""Readable or used (issue 41, first part): LEACE erasure and interchange along the concept's subspace, with known
answers.

- LEACE equals the `concept-erasure` package (0.2.4, `LeaceFitter(shrinkage=False, constrain_cov_trace=False)`) on a
  seeded case whose projection and bias were computed with the package (printed here to 15 digits), and it keeps
  its guarantees: no linear function of the erased activations predicts the concept better than its mean, and it
  moves them less than the orthogonal projection that also erases it; a broken variant (the mean not subtracted)
  fails the guarantee.
- On the xor-planner, whose first answer token states the plan its bars then follow, at the last block's output on
  the last prompt token: interchange along the layout's pattern subspace makes it draw the source's layout (IIA >=
  0.9, interval above chance), erasure drives the drawing to chance, the unpatched drawing is its own; broken
  variants (the subspace component added instead of replaced; the source swapped for the base) fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from interp import causal
from interp.causal import Eraser, leace, pattern, subspace

#: the package's eraser on `_case()` (concept_erasure 0.2.4, float64): projection P and bias (mean of x)
PACKAGE_P = [[0.792460314392089, 0.279090140599519, -0.052063778970604, -0.049502640483797, 0.152333630961796],
             [0.473852384794373, 0.359400203443463, 0.181903699344777, 0.222092470537539, -0.0693705054259],
             [-0.050651210509274, 0.070297042661499, 0.946623767634117, -0.082454822875055, -0.142475136341103],
             [-0.24692826953216, 0.338577621372498, -0.183373524332362, 0.730986843815575, -0.355149174896805],
             [0.113952125475626, -0.144172742272983, -0.140254599412999, -0.26497570997141, 0.170528870714756]]
PACKAGE_BIAS = [-0.021544148885615, -0.083758177461476, -0.041670080207571, 0.100413463649262, -0.285120786313238]


def _case(seed=42, n=40, d=5, k=2):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k))
    return z @ rng.normal(size=(k, d)) + rng.normal(size=(n, d)), z


def test_leace_equals_the_concept_erasure_package():
    x, z = _case()
    e = leace(x, z)
    assert np.abs((np.eye(5) - e.left @ e.right) - np.array(PACKAGE_P)).max() <= 1e-12
    assert np.abs(e.mean - np.array(PACKAGE_BIAS)).max() <= 1e-12


def _guarded(xe, z):
    """The largest cross-covariance of the erased activations with the concept (0: linearly guarded)."""
    return np.abs((xe - xe.mean(0)).T @ (z - z.mean(0))).max() / len(xe)


def test_leace_guarantees_and_a_broken_variant_fails():
    rng = np.random.default_rng(3)
    z = np.eye(4)[rng.integers(0, 4, 300)]
    x = z @ rng.normal(size=(4, 30)) * 2 + rng.normal(size=(300, 30)) @ rng.normal(size=(30, 30)) * 0.3
    e = leace(x, z)
    xe = e(x)
    assert _guarded(x, z) > 0.1 and _guarded(xe, z) <= 1e-10
    # a ridge probe of the concept from the erased activations predicts no better than the mean (in sample)
    w = causal.readout(xe, z, alpha=1e-6)
    pred = (xe - xe.mean(0)) @ w + z.mean(0)
    assert ((z - pred) ** 2).sum() >= ((z - z.mean(0)) ** 2).sum() * (1 - 1e-8)
    # least squares: it moves the activations less than the orthogonal projection that also erases the concept
    u = pattern(x, z)
    orth = x - ((x - x.mean(0)) @ u) @ u.T
    assert _guarded(orth, z) <= 1e-10
    assert ((xe - x) ** 2).sum() < ((orth - x) ** 2).sum()
    broken = Eraser(np.zeros_like(e.mean), e.left, e.right)  # the mean not subtracted: an offset per class remains
    assert np.abs(broken(x) - xe).max() > 1e-3 and not np.allclose(broken(x).mean(0), x.mean(0))
    assert e.rank == 3 and subspace(np.zeros((5, 2))).shape == (5, 0)


def test_bad_inputs_are_one_sentence():
    with pytest.raises(ValueError, match="x must be"):
        leace(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="finite"):
        leace(np.array([[1.0, np.nan], [2.0, 3.0]]), np.ones(2))


# --------------------------------------------------------------------------- the known answer on the xor-planner

def _organism(name: str, n: int = 64):
    """The organism's runtime (skipped when its committed weights are missing or stale), its first n held-out prompts'
    keys and tokens, the four layouts' occupancies and their plan lines."""
    from bench.sandbox.runtime import execute
    from interp.organisms import WEIGHTS, planners, record
    from interp.organisms.zoo import code_version
    from interp.probes import occupancy
    from interp.prompts import Protocol, build
    from interp.runtime import Runtime

    if (record(WEIGHTS / name) or {}).get("code_version") != code_version(name):
        pytest.skip(f"committed {name} weights missing or stale")
    rt = Runtime.load(f"organism:{name}", device="cpu")
    keys = planners.heldout_keys()[:n]
    layouts, lines = [], []
    for v in (0, 1):
        for h in (0, 1):
            r = execute(planners.program(keys[0], v, h))
            layouts.append(occupancy(r.pixels, r.background))
            lines.append(planners.label(v, h))
    tokens = [build(planners.item_of(k), Protocol("zero-shot", 0), rt.tokenizer).tokens for k in keys]
    return rt, keys, tokens, np.stack(layouts), lines


@pytest.fixture(scope="module")
def planner():
    from interp.organisms import planners

    rt, keys, tokens, layouts, _ = _organism("xor-planner")
    plan = planners.PLANS["xor-planner"]
    labels = [2 * plan(k[0], k[4], k[6], k[8])[0] + plan(k[0], k[4], k[6], k[8])[1] for k in keys]
    rt.templates = [(k[2], k[3]) for k in keys]  # (noun, verb): the prompts' template
    return rt, tokens, np.array(labels), layouts


def test_the_plan_at_the_last_token_is_used(planner):
    rt, tokens, labels, layouts = planner
    res = causal.causal_test(rt, tokens, labels, layouts, layer=rt.info.n_layers, seed=0, groups=rt.templates)
    s = res.summary
    assert s["interchange"]["effect_lo"] > 0 and s["interchange"]["p"] <= 0.01 and s["interchange"]["n_groups"] == 16
    assert s["erasure"]["effect_hi"] < 0
    assert s["none"]["share"] == 1.0  # unpatched, it draws its own plan
    assert s["interchange"]["share"] >= 0.9 and s["interchange"]["lo"] > s["interchange"]["chance"]
    assert s["erasure"]["lo"] <= s["erasure"]["base_rate"] <= s["erasure"]["hi"]  # erased: the drawing goes to chance
    assert s["erasure"]["kept"] < 0.5
    frame = res.to_frame()
    assert set(frame["method"]) == {"none", "interchange", "erasure"} and (frame["n"] == 64).all()


def test_broken_interchanges_fail_the_known_answer(planner, monkeypatch):
    rt, tokens, labels, layouts = planner
    real = causal.interchange_hook

    def added(basis, sources):  # the source's component added, the base's not removed
        import torch

        def apply(h):
            u = torch.as_tensor(basis, dtype=h.dtype)
            return h + (torch.as_tensor(sources, dtype=h.dtype) @ u) @ u.T
        return causal._last_column(apply)

    monkeypatch.setattr(causal, "interchange_hook", added)
    res = causal.causal_test(rt, tokens, labels, layouts, layer=rt.info.n_layers, methods=("interchange",))
    assert res.summary["interchange"]["share"] < 0.9

    def swapped(basis, sources):  # base and source in each other's roles: the source's residual, the base's component
        import torch

        def apply(h):
            u = torch.as_tensor(basis, dtype=h.dtype)
            src = torch.as_tensor(sources, dtype=h.dtype)
            return src + ((h - src) @ u) @ u.T
        return causal._last_column(apply)

    monkeypatch.setattr(causal, "interchange_hook", swapped)
    res = causal.causal_test(rt, tokens, labels, layouts, layer=rt.info.n_layers, methods=("interchange",))
    assert res.summary["interchange"]["share"] < 0.9
    assert real is not swapped


def test_the_weights_subspace_moves_nothing_where_the_pattern_moves_everything(planner):
    """The finding behind basis="pattern": at the site where swapping the layout's pattern subspace changes every
    drawing, swapping the ridge probe's weight subspace changes none."""
    rt, tokens, labels, layouts = planner
    res = causal.causal_test(rt, tokens[:32], labels[:32], layouts, layer=rt.info.n_layers, methods=("interchange",),
                             basis="weights")
    assert res.summary["interchange"]["share"] <= 0.1


@pytest.fixture(scope="module")
def decoy():
    from interp.organisms import decoy as decoy_module

    rt, keys, tokens, layouts, lines = _organism("decoy-planner")
    announced = np.array([2 * decoy_module.announced(k)[0] + decoy_module.announced(k)[1] for k in keys])
    drawn = np.array([2 * decoy_module.drawn(k)[0] + decoy_module.drawn(k)[1] for k in keys])
    return rt, tokens, announced, drawn, layouts, lines


def test_the_decoy_s_announced_plan_is_readable_and_unused(decoy):
    """The readable-but-unused known answer: at the last block's output on the last prompt token, the announced
    layout is decodable and drives the line (interchange moves the line to the source's, erasure sends it to chance),
    while the drawing keeps its own layout: its match with the source's announced layout stays at what no effect
    gives (the interval covers `chance`)."""
    from interp.probes import Grid, nested_cv

    rt, tokens, announced, drawn, layouts, lines = decoy
    acts = rt.capture(tokens, [[len(t) - 1] for t in tokens], [rt.info.n_layers])[:, 0, 0].numpy()
    r2 = nested_cv(acts, np.eye(4)[announced], Grid(pca=(4, 8, 16, 32), outer=4, inner=3), seed=0).r2
    assert r2 >= 0.9  # readable
    res = causal.causal_test(rt, tokens, announced, layouts, layer=rt.info.n_layers, line_labels=lines)
    s = res.summary
    assert s["none"]["line_share"] >= 0.95  # it announces the xor-planner's layout ...
    assert np.mean([r["drawn"] == d for r, d in zip([r for r in res.rows if r["method"] == "none"], drawn)]) >= 0.95
    assert s["interchange"]["line_share"] >= 0.9  # the line reads the site: it announces the source's layout
    assert s["interchange"]["kept"] >= 0.9  # the drawing does not
    assert s["interchange"]["lo"] <= s["interchange"]["chance"] <= s["interchange"]["hi"]
    assert s["interchange"]["effect_lo"] <= 0 <= s["interchange"]["effect_hi"]  # the drawing: no effect shown
    assert s["interchange"]["line_effect_lo"] > 0  # the line: moved
    assert s["erasure"]["line_share"] <= 0.5 and s["erasure"]["kept"] >= 0.9


def test_the_stage_s_test_on_the_decoy_shows_no_use_of_the_readable_plan(decoy):
    """`causal_site`, the stage's test, with the announced layout as the target: the concept is readable at the site
    (above), and moving it leaves every drawing as it was, so the interchange's effect is exactly 0 (interval [0, 0],
    p 1) and the erased drawings are kept: "readable but not shown to be used"."""
    rt, tokens, announced, drawn, layouts, lines = decoy
    targets = layouts[announced].reshape(len(tokens), -1)
    res = causal.causal_site(rt, tokens[:48], targets[:48], rt.info.n_layers, seed=3)
    ic, er = res.summary["interchange"], res.summary["erasure"]
    assert ic["n"] >= 40 and ic["effect"] == 0 and ic["effect_lo"] == ic["effect_hi"] == 0 and ic["p"] == 1
    assert ic["kept"] == 1.0 and er["kept"] == 1.0
    assert causal.causal_outcome(True, ic) == "readable-not-shown"


def test_the_stage_s_test_finds_the_planner_s_plan_used(planner):
    rt, tokens, labels, layouts = planner
    res = causal.causal_site(rt, tokens[:48], layouts[labels[:48]].reshape(48, -1), rt.info.n_layers, seed=3,
                             methods=("interchange",), groups=rt.templates[:48])
    ic = res.summary["interchange"]
    assert ic["effect_lo"] > 0.1 and ic["p"] <= 0.01 and causal.causal_outcome(True, ic) == "used"


def test_causal_site_checks_its_arguments_first(planner):
    rt, tokens, labels, layouts = planner
    y = layouts[labels].reshape(len(tokens), -1)
    calls = []
    real = rt.generate
    rt.generate = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        for kwargs, msg in [({"targets": y[:5]}, "one row per prompt"), ({"prompts": tokens[:3], "targets": y[:3]}, "at least 4"),
                            ({"targets": np.full_like(y, np.nan)}, "NaN"), ({"rank": 0}, "rank"), ({"rank": 1.5}, "rank"),
                            ({"methods": ("steer",)}, "methods"), ({"methods": ()}, "methods"), ({"layer": 99}, "layer"),
                            ({"level": 1.0}, "level"), ({"groups": ["a"]}, "groups"),
                            ({"targets": np.ones_like(y)}, "do not vary")]:
            args = {"prompts": tokens, "targets": y, "layer": 1, **kwargs}
            with pytest.raises(ValueError, match=msg):
                causal.causal_site(rt, args.pop("prompts"), args.pop("targets"), args.pop("layer"), **args)
    finally:
        rt.generate = real
    assert not calls  # nothing was drawn


# --------------------------------------------------------------------------- the test's size on nulls that move

class _Fake:
    """A pure-Python runtime for `causal_site` (from issue 41's outside attack): prompt i's last-token activation is
    its layout (16 cells) times a fixed matrix plus noise; unpatched it draws its own layout; under a hook,
    `react(i, h, h_patched, fake)` gives the drawing (16 cells, or None for a failure)."""

    K = 16

    def __init__(self, seed, react, n=64, d=32):
        import types

        rng = np.random.default_rng(seed)
        classes = (rng.random((4, self.K)) < 0.5).astype(float)
        self.layouts = classes[rng.integers(0, 4, n)]
        self.acts = self.layouts @ rng.normal(size=(self.K, d)) + 0.5 * rng.normal(size=(n, d))
        self.scale = float(np.sqrt(((self.acts - self.acts.mean(0)) ** 2).sum(1).mean()))
        self.react, self.rng = react, np.random.default_rng(seed + 1)
        self.info = types.SimpleNamespace(n_layers=2)

    def hook_names(self, layers):
        return [f"blocks.{x}.hook_resid_pre" for x in layers]

    def capture(self, toks, positions, layers):
        import torch

        return torch.as_tensor(self.acts[[t[0] for t in toks]])[:, None, None, :]

    def generate(self, toks, sampling, stop, hooks=()):
        import types

        import torch

        idx = [t[0] for t in toks]
        h = torch.as_tensor(self.acts[idx])
        if hooks:
            x = torch.stack([torch.zeros_like(h), h], 1)  # the last column is the last prompt token
            for _, fn in hooks:
                x = fn(x)
            out = [self.react(i, h[r].numpy(), x[r, -1].numpy(), self) for r, i in enumerate(idx)]
        else:
            out = [self.layouts[i] for i in idx]
        return [types.SimpleNamespace(text="FAIL" if o is None else "".join(str(int(v)) for v in o)) for o in out]


def _drawn(texts):
    return [None if t == "FAIL" else np.array([float(c) for c in t]) for t in texts]


def _used_share(react, seeds):
    hits = 0
    for s in seeds:
        rt = _Fake(s, react)
        ic = causal.causal_site(rt, [[i] for i in range(64)], rt.layouts, 1, methods=("interchange",), seed=s,
                                draw=_drawn).summary["interchange"]
        hits += causal.causal_outcome(True, ic) == "used"
    return hits / len(seeds)


def _noise_by_size(i, h, hp, rt):
    """Never reads the layout: cells flip with a probability that grows with the move's size (a larger move when the
    source's layout differs more), the disruption that made the uncontrolled test say "used" in 78% of data sets."""
    o = rt.layouts[i].copy()
    flip = rt.rng.random(rt.K) < min(0.5, 0.5 * np.linalg.norm(hp - h) / rt.scale)
    o[flip] = 1 - o[flip]
    return o


def _fails_by_size(i, h, hp, rt):
    """Never reads the layout: a large move makes the drawing fail (a failure is an outcome, never dropped)."""
    return None if np.linalg.norm(hp - h) > 0.8 * rt.scale else rt.layouts[i]


def _decodes(i, h, hp, rt):
    """Reads the layout: draws the layout of the prompt whose activation is nearest the patched one."""
    return rt.layouts[np.argmin(((rt.acts - hp) ** 2).sum(1))]


def test_a_disruption_that_grows_with_the_move_is_not_called_used_and_a_reader_is():
    """The size-matched control (the same move turned at random inside the subspace): on nulls whose drawings move
    more when the source is farther, "used" stays rare (measured 3.5% and 0% over 200 data sets; the bound here is
    3 standard errors above 5% at 60), while a model that decodes the patched activation is "used" every time. The
    broken variant, a control that does not move (the uncontrolled test), says "used" on the first null most of the
    time and fails."""
    seeds = range(60)
    assert _used_share(_noise_by_size, seeds) <= 0.14
    assert _used_share(_fails_by_size, seeds) <= 0.14
    assert _used_share(_decodes, range(10)) == 1.0
    real = causal.rotated
    try:
        causal.rotated = lambda basis, base, sources, rng: base.copy()  # the control arm left unpatched
        assert _used_share(_noise_by_size, range(30)) >= 0.5
    finally:
        causal.rotated = real
