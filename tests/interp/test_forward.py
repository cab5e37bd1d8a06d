"""The runtime from Python on a tiny random Llama: logits with any hooks, a cache of any hook names at chosen
positions (the same numbers on either path), and patching scans (batched = one at a time = TransformerLens's own;
attribution patching exact where the metric is linear, and a broken variant failing)."""

import pytest
import torch

from interp.runtime import Runtime, patching

TEXTS = ["Draw the flag of Germany.", "fill('white')\nrect(2, 3, 4, 5, 'red')"]
RESID = ["blocks.0.hook_resid_pre", "blocks.1.hook_resid_post", "blocks.1.hook_out", "ln_final.hook_out"]


@pytest.fixture(scope="module")
def eager(tiny_folder):
    return Runtime.from_folder(tiny_folder, name="tiny-eager", attention="eager")


def test_forward_returns_the_models_logits_and_hooks_change_them(tiny):
    ids = tiny.tokenizer(TEXTS[0])["input_ids"]
    logits = tiny.forward(TEXTS[0])
    with torch.inference_mode():
        ref = tiny.model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), tiny.model.config.vocab_size)
    assert torch.equal(logits, ref)
    assert torch.equal(tiny.forward([ids]), logits) and torch.equal(tiny.forward(ids), logits)  # tokens or text alike
    zeroed = tiny.forward(TEXTS[0], hooks=[("blocks.1.attn.hook_z", lambda z, hook: z * 0)])  # a bridge-only name
    assert (zeroed - logits).abs().max() > 1e-3
    same = tiny.forward(TEXTS[0], hooks=[("blocks.1.hook_resid_post", lambda x, hook: x)])  # identity: a no-op
    assert torch.equal(same, logits)


def test_a_padded_row_gets_the_logits_it_gets_alone(tiny):
    both = tiny.forward(TEXTS)
    for i, t in enumerate(TEXTS):
        alone = tiny.forward(t)[0]
        n = alone.shape[0]
        assert (both[i, -n:] - alone).abs().max() <= 1e-4


def test_cache_is_the_same_on_both_paths(eager, tiny):
    """Residual names run as forward hooks on the model's own blocks; forced through the bridge they give the
    same numbers: bit for bit when the model itself runs eager, to float rounding under sdpa."""
    for rt, tol in ((eager, 0.0), (tiny, 1e-4)):
        logits, fast = rt.run_with_cache(TEXTS, names=RESID, positions=[0, -1])
        with rt.via_bridge():
            blogits, slow = rt.run_with_cache(TEXTS, names=RESID, positions=[0, -1])
        assert set(fast) == set(RESID)
        for n in RESID:
            assert fast[n].shape == (2, 2, rt.info.d_model)
            assert (fast[n] - slow[n]).abs().max().item() <= tol, n
        _, mask, _ = rt.pad([rt.tokenizer(t)["input_ids"] for t in TEXTS])
        real = mask.bool()  # a pad column's logits are no token's: only the real ones must agree
        assert (logits - blogits)[real].abs().max().item() <= tol
    # aliases of one point are one tensor; resid_post of block 1 is ln_final's input, not its output
    assert torch.equal(fast["blocks.1.hook_resid_post"], fast["blocks.1.hook_out"])
    assert not torch.equal(fast["blocks.1.hook_resid_post"], fast["ln_final.hook_out"])


def test_cache_of_any_hook_name_matches_transformer_lens(tiny):
    names = ["blocks.1.attn.hook_z", "blocks.0.hook_mlp_out", "blocks.1.attn.hook_pattern", "blocks.0.hook_resid_pre"]
    ids = tiny.tokenizer(TEXTS[1])["input_ids"]
    _, ours = tiny.run_with_cache(ids, names=names, positions=[1, -1])
    _, theirs = tiny.bridge.run_with_cache(torch.tensor([ids]), names_filter=names)
    cols = [1, len(ids) - 1]
    assert ours["blocks.1.attn.hook_z"].shape == (1, 2, 4, 8)
    assert ours["blocks.1.attn.hook_pattern"].shape == (1, 4, 2, len(ids))  # the query axis is sliced
    assert (ours["blocks.1.attn.hook_pattern"][0] - theirs["blocks.1.attn.hook_pattern"][0][:, cols]).abs().max() <= 1e-5
    for n in ("blocks.1.attn.hook_z", "blocks.0.hook_mlp_out", "blocks.0.hook_resid_pre"):
        assert (ours[n][0] - theirs[n][0, cols].float()).abs().max() <= 1e-4, n
    with pytest.raises(ValueError, match="out of range"):
        tiny.run_with_cache(ids, names=names, positions=[len(ids)])


def _pair(rt):
    clean = rt.tokenizer("Draw the flag of Germany.")["input_ids"]
    corrupt = list(clean)
    corrupt[3] = rt.tokenizer(" cat")["input_ids"][-1]
    assert corrupt != clean
    t, u = clean[-1], corrupt[3]

    def logit_diff(logits):
        return logits[:, -1, t] - logits[:, -1, u]

    return clean, corrupt, logit_diff


def test_batched_scan_equals_one_site_at_a_time_and_transformer_lens(tiny):
    from transformer_lens import patching as tl_patching

    clean, corrupt, metric = _pair(tiny)
    scan = tiny.patch_scan(corrupt, clean, metric, "blocks.{L}.attn.hook_z", heads="all", batch_size=7)
    one = tiny.patch_scan(corrupt, clean, metric, "blocks.{L}.attn.hook_z", heads="all", batch_size=1)
    assert scan.values.shape == (2, len(clean), 4)
    assert (scan.values - one.values).abs().max() <= 1e-5
    assert scan.effect[:, :3].abs().max() <= 1e-5  # before the changed token nothing differs: patching is a no-op
    assert scan.effect.abs().max() > 1e-3
    _, clean_cache = tiny.bridge.run_with_cache(torch.tensor([clean]))
    theirs = tl_patching.get_act_patch_attn_head_out_by_pos(tiny.bridge, torch.tensor([corrupt]), clean_cache,
                                                            lambda lg: metric(lg)[0])
    assert (scan.values - theirs.cpu()).abs().max() <= 1e-4
    resid = tiny.patch_scan(corrupt, clean, metric, "blocks.{L}.hook_resid_pre", positions=[3, -1])
    # patching the whole residual stream at the changed token in block 0 restores the clean run exactly
    assert abs(float(resid.values[0, 0]) - resid.clean) <= 1e-4
    frame = scan.to_frame()
    assert len(frame) == 2 * len(clean) * 4 and set(frame.columns) >= {"layer", "pos", "head", "value", "effect"}


def test_attribution_is_exact_where_the_metric_is_linear(tiny, monkeypatch):
    """The logits are linear in the final norm's output, so grad . (clean - corrupt) there is the exact effect of
    patching it: the attribution scan equals the exact scan; with the delta's sign broken it does not."""
    clean, corrupt, metric = _pair(tiny)
    exact = tiny.patch_scan(corrupt, clean, metric, ["ln_final.hook_out"])
    approx = tiny.attribution_scan(corrupt, clean, metric, ["ln_final.hook_out"])
    assert exact.effect.abs().max() > 1e-2 and approx.baseline == pytest.approx(exact.baseline, abs=1e-5)
    assert (approx.effect - exact.effect).abs().max() <= 1e-4
    monkeypatch.setattr(patching, "_delta", lambda c, x: x - c)
    broken = tiny.attribution_scan(corrupt, clean, metric, ["ln_final.hook_out"])
    assert (broken.effect - exact.effect).abs().max() > 1e-2


def test_attribution_on_heads_tracks_the_exact_scan(tiny):
    """On attention heads the estimate is first order only: it agrees in sign with the larger exact effects."""
    clean, corrupt, metric = _pair(tiny)
    exact = tiny.patch_scan(corrupt, clean, metric, "blocks.{L}.attn.hook_z", heads="all")
    approx = tiny.attribution_scan(corrupt, clean, metric, "blocks.{L}.attn.hook_z", heads="all")
    assert approx.values.shape == exact.values.shape
    big = exact.effect.abs() > 0.5 * exact.effect.abs().max()
    assert (torch.sign(approx.effect[big]) == torch.sign(exact.effect[big])).all()


def test_bad_patching_input_is_one_sentence(tiny):
    clean, corrupt, metric = _pair(tiny)
    with pytest.raises(ValueError, match="same length"):
        tiny.patch_scan(corrupt[:-1], clean, metric, "blocks.{L}.attn.hook_z")
    with pytest.raises(ValueError, match="one value per row"):
        tiny.patch_scan(corrupt, clean, lambda lg: metric(lg).sum(), "blocks.{L}.hook_resid_pre")
    with pytest.raises(ValueError, match="no head axis"):
        tiny.patch_scan(corrupt, clean, metric, "blocks.{L}.hook_resid_pre", heads="all")


@pytest.mark.parametrize("call, error, words", [
    (lambda rt: rt.forward(None), TypeError, "inputs must be a text"),
    (lambda rt: rt.forward([[1, 2, 10 ** 9]]), ValueError, "outside the model's vocabulary"),
    (lambda rt: rt.forward([[1, -2, 3]]), ValueError, "token id -2, outside the model's vocabulary"),
    (lambda rt: rt.forward([[1, 2.0, 3]]), TypeError, "each input must be a text or a list of token ids"),
    (lambda rt: rt.forward([1, 2, 3], hooks=[("blocks.0.hook_resid_pre", "not a function")]), TypeError, "is not callable"),
    (lambda rt: rt.forward([1, 2, 3], hooks=["blocks.0.hook_resid_pre"]), TypeError, "\\(hook name, function\\) pair"),
    (lambda rt: rt.forward([1, 2, 3], hooks=[("blocks.0.hook_resid_pre", lambda x, hook: x[:, :1])]), ValueError,
     "returned \\(1, 1, "),
    (lambda rt: rt.run_with_cache([1, 2, 3], names=["blocks.0.hook_resid_pre"], positions=[1.5]), TypeError,
     "positions must be token indices"),
    (lambda rt: rt.run_with_cache([1, 2, 3], hooks=[("blocks.1.attn.hook_z", lambda z, hook: "x")]), ValueError,
     "returned str"),
])
def test_bad_forward_input_is_one_sentence_and_leaves_no_hook(tiny, call, error, words):
    """Issue 40's bad-input walk, the forward and cache calls: token ids outside the vocabulary or negative (torch's
    IndexError), forward(None), float positions (silently truncated), a hook that is not callable or returns the wrong
    shape (torch's own errors). Each is one sentence naming the argument; no hook stays attached and a later forward
    gives the same logits."""
    before = tiny.forward([1, 2, 3])
    with pytest.raises(error, match=words):
        call(tiny)
    assert torch.equal(tiny.forward([1, 2, 3]), before)
    assert not any(h for m in tiny.model.modules() for h in (m._forward_hooks, m._forward_pre_hooks) if h)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(heads="everything"), ValueError, "heads must be 'all', None"),
    (dict(heads=[0.5]), TypeError, "heads must be head indices"),
    (dict(positions=[0.5]), TypeError, "positions must be token indices"),
    (dict(metric=lambda logits: None), TypeError, "the metric returned NoneType"),
])
def test_bad_scan_arguments_are_one_sentence(tiny, kwargs, error, words):
    """Issue 40: `heads="everything"`, float heads and positions, and a metric returning None gave Python's or torch's
    own errors (or a silent truncation); each is one sentence naming the argument."""
    args = dict(metric=lambda logits: logits[:, -1, 0], heads="all", positions=None)
    args.update(kwargs)
    with pytest.raises(error, match=words):
        tiny.patch_scan([1, 2, 3, 4], [5, 6, 7, 8], args["metric"], "blocks.{L}.attn.hook_z", positions=args["positions"],
                        heads=args["heads"])


def test_a_device_this_machine_lacks_is_one_sentence_before_loading(tiny_folder):
    """Issue 40: device="cuda:7" on a CPU build was torch's bare AssertionError (wrapped); a device name torch does not
    know was its list of every backend. Both are one sentence naming the argument."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the CPU-build sentence cannot occur")
    with pytest.raises(ValueError, match="device 'cuda:7': this torch has no CUDA device"):
        Runtime.from_folder(tiny_folder, name="t", device="cuda:7")
    with pytest.raises(ValueError, match="device 'tpu': give 'cpu', 'cuda', 'cuda:N' or 'mps'"):
        Runtime.from_folder(tiny_folder, name="t", device="tpu")


def test_a_detached_metric_in_attribution_is_one_sentence(tiny):
    """Issue 40: a metric whose value carries no gradient gave torch's "element 0 of tensors does not require grad"."""
    with pytest.raises(ValueError, match="the metric's value carries no gradient"):
        tiny.attribution_scan([1, 2, 3, 4], [5, 6, 7, 8], lambda logits: logits[:, -1, 0].detach(), "blocks.{L}.hook_resid_pre")
