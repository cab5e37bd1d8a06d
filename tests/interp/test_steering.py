"""Steering with positions (hooks/steer.py) and the dose-response table and plot (interp/runtime/steering.py): which
columns a positioned vector reaches, generation steered only after the prompt, a slope known by construction, and
the interval's coverage by simulation (the normal quantile in place of Student's t fails it)."""

import math

import numpy as np
import pytest
import torch

from hooks.steer import add_direction
from interp.runtime import Sampling, StopRule
from interp.runtime.steering import dose_response, mean_interval, plot_dose_response

NOSTOP = StopRule(max_new_tokens=6, eos=False, fence=False)
TEXT = "Draw the flag of Germany."


@pytest.mark.parametrize("positions, prefill, decode", [
    (None, [0, 1, 2, 3, 4], [0]), ("all", [0, 1, 2, 3, 4], [0]), ("prompt", [0, 1, 2, 3, 4], []),
    ("generated", [], [0]), (slice(-2, None), [3, 4], []), ([0, -1], [0, 4], []), (slice(1, 3), [1, 2], []),
])
def test_a_positioned_vector_reaches_only_its_columns(positions, prefill, decode):
    v = np.arange(1, 5, dtype=np.float32)
    hook = add_direction(v, positions)
    for seq, want in ((5, prefill), (1, decode)):
        act = torch.zeros(2, seq, 4)
        out = hook(act.clone())
        moved = [c for c in range(seq) if out[:, c].abs().sum() > 0]
        assert moved == want
        for c in moved:
            assert torch.equal(out[0, c], torch.from_numpy(v)) and torch.equal(out[1, c], torch.from_numpy(v))
        zero = add_direction(v * 0, positions)(act.clone())
        assert torch.equal(zero, act)


def test_bad_positions_are_one_sentence():
    with pytest.raises(ValueError, match="positions must be one of"):
        add_direction(np.zeros(4), "prompts")
    with pytest.raises(ValueError, match="out of range"):
        add_direction(np.ones(4), [7])(torch.zeros(1, 5, 4))


def test_generated_only_steering_leaves_the_prompt_and_the_first_token(tiny):
    """The first generated token comes from the prompt pass: steering only the generated tokens cannot change it,
    steering everywhere (the old default, unchanged) does; later tokens move in both."""
    ids = tiny.tokenizer(TEXT)["input_ids"]
    plain = tiny.generate([ids], [Sampling()], NOSTOP)[0].tokens
    site = "blocks.1.hook_resid_pre"
    push = np.full(tiny.info.d_model, 6.0, dtype=np.float32)
    everywhere = tiny.generate([ids], [Sampling()], NOSTOP, hooks=[(site, add_direction(push))])[0].tokens
    later = tiny.generate([ids], [Sampling()], NOSTOP, hooks=[(site, add_direction(push, "generated"))])[0].tokens
    assert everywhere[0] != plain[0]
    assert later[0] == plain[0] and later != plain
    for mode in ("prompt", "generated", slice(-2, None)):
        zero = tiny.generate([ids], [Sampling()], NOSTOP, hooks=[(site, add_direction(push * 0, mode))])[0].tokens
        assert zero == plain


def test_a_span_moves_the_residual_only_there(tiny):
    v = np.linspace(-1, 1, tiny.info.d_model).astype(np.float32)
    site = "blocks.1.hook_resid_pre"
    _, plain = tiny.run_with_cache(TEXT, names=[site])
    _, moved = tiny.run_with_cache(TEXT, names=[site], hooks=[(site, add_direction(v, slice(-2, None)))])
    diff = (moved[site] - plain[site])[0]
    n = diff.shape[0]
    assert diff[: n - 2].abs().max() == 0
    assert torch.allclose(diff[n - 2:], torch.from_numpy(v).expand(2, -1), atol=1e-6)


def _logit_diff_case(rt):
    ids = [rt.tokenizer(t)["input_ids"] for t in (TEXT, "fill('white')\nrect(2, 3, 4, 5, 'red')")]
    t, u = 7, 11
    w = rt.model.lm_head.weight.detach()
    direction = (w[t] - w[u]).numpy()

    def metric(logits):
        return logits[:, -1, t] - logits[:, -1, u]

    return ids, direction, metric, float((w[t] - w[u]).pow(2).sum())


def test_dose_response_slope_is_the_constructed_one(tiny):
    """The logits are linear in the final norm's output, so adding alpha * (W_U[t] - W_U[u]) there at the last token
    moves the logit difference by exactly alpha * |W_U[t] - W_U[u]|^2 in every prompt. Steering the first token
    instead (a broken position: the token before the last) moves nothing at the last one: the same check fails for it.
    A first-column index on prompts of different lengths names padding in the shorter one: refused (issue 40)."""
    ids, direction, metric, slope = _logit_diff_case(tiny)
    alphas = [0.0, 0.5, 1.0, 2.0]
    table = tiny.dose_response(ids, "ln_final.hook_out", direction, alphas, metric, positions=[-1])
    assert list(table.columns) == ["alpha", "metric", "low", "high", "n", "level", "note"]
    assert list(table["n"]) == [2] * 4 and (table["low"] <= table["metric"]).all() and (table["metric"] <= table["high"]).all()
    rise = table["metric"] - table["metric"][0]
    assert np.allclose(rise, slope * np.asarray(alphas), rtol=1e-4, atol=1e-4)
    wrong = tiny.dose_response(ids, "ln_final.hook_out", direction, alphas, metric, positions=[-2])
    assert not np.allclose(wrong["metric"] - wrong["metric"][0], slope * np.asarray(alphas), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="counted from the first column, which is padding"):
        tiny.dose_response(ids, "ln_final.hook_out", direction, alphas, metric, positions=[0])
    fig = plot_dose_response(table, ylabel="logit difference")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "steering strength alpha" and ax.get_ylabel() == "logit difference"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["95% CI, n = 2", "unsteered"]
    mixed = table.assign(n=[2, 3, 3, 3])  # different n per row: each point says its own
    assert sorted(t.get_text() for t in plot_dose_response(mixed).axes[0].texts) == ["n=2", "n=3", "n=3", "n=3"]


def _coverage(half_width, n=8, draws=4000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(3.0, 2.0, size=(draws, n))
    m, s = x.mean(1), x.std(1, ddof=1)
    h = half_width(n) * s / math.sqrt(n)
    return float(np.mean((m - h <= 3.0) & (3.0 <= m + h)))


def test_interval_covers_at_its_level_and_the_normal_quantile_does_not():
    """4,000 samples of n = 8 (seed 0): the binomial standard error of a coverage near 0.95 is 0.0034, so a
    calibrated interval lies within 0.95 +- 0.012; the normal quantile (1.96 for t_7's 2.36) covers ~0.92."""
    from scipy import stats

    def ours(n):
        xs = np.arange(n, dtype=float)
        mean, lo, hi, _ = mean_interval(xs)
        return (hi - mean) / (xs.std(ddof=1) / math.sqrt(n))

    assert abs(ours(8) - stats.t.ppf(0.975, 7)) < 1e-9
    assert abs(_coverage(ours) - 0.95) <= 0.012
    assert abs(_coverage(lambda n: 1.959964) - 0.95) > 0.012  # the broken variant fails the same check


def test_one_unit_has_no_interval_and_says_so():
    table = dose_response(lambda a: [a], [0.0, 1.0])
    assert table["n"].tolist() == [1, 1] and table["low"].isna().all() and table["high"].isna().all()
    assert table["note"].tolist() == ["n = 1, no interval"] * 2
    fig = plot_dose_response(table)
    assert any("no interval" in t.get_text() for t in fig.axes[0].get_legend().get_texts())


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(alphas=[0.0, float("nan")]), ValueError, "alphas must be finite"),
    (dict(alphas=[0.0, float("inf")]), ValueError, "alphas must be finite"),
    (dict(alphas=[]), ValueError, "alphas is empty"),
    (dict(alphas="0,1"), TypeError, "alphas must be a sequence"),
    (dict(alphas=[0, "1"]), TypeError, "alphas must be numbers"),
    (dict(level=1.5), ValueError, "level must lie strictly between 0 and 1"),
    (dict(positions="generated"), ValueError, "positions='generated'"),
    (dict(direction="nan"), TypeError, "direction must be a vector"),
    (dict(direction=np.full(4, np.nan)), ValueError, "NaN or inf"),
])
def test_bad_dose_response_arguments_are_one_sentence_before_any_forward(tiny, kwargs, error, words):
    """Issue 40: alpha NaN or inf, a NaN direction and level 1.5 gave silent NaN rows; positions='generated' was a silent
    no-op in a teacher-forced pass. Each is one sentence naming the argument, and no forward runs."""
    d = tiny.info.d_model
    args = dict(alphas=[0.0, 1.0], level=0.95, positions=[-1], direction=np.ones(d, np.float32))
    args.update(kwargs)
    if isinstance(args["direction"], np.ndarray) and args["direction"].shape == (4,):
        args["direction"] = np.full(d, np.nan, np.float32)
    calls = []
    real = tiny.forward
    tiny.forward = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        with pytest.raises(error, match=words):
            tiny.dose_response([[1, 2, 3]], "ln_final.hook_out", args["direction"], args["alphas"],
                               lambda logits: logits[:, -1, 0], positions=args["positions"], level=args["level"])
    finally:
        del tiny.forward
    assert not calls
