"""The runtime on a tiny random Llama: batching, seeds, the two forward paths, hooks, capture, stop rules."""

import json

import numpy as np
import pytest
import torch

from interp.models import ModelError
from interp.prompts import POSITIONS, PromptItem, Protocol, build
from interp.runtime import Runtime, Sampling, StopRule

ITEMS = [
    PromptItem("a", "layout", "Draw the flag of Germany.", "the flag of Germany"),
    PromptItem("b", "layout", "Draw a cat sitting on a mat under a light blue sky, please.", "a cat sitting on a mat"),
    PromptItem("c", "translation", "Draw on a 24x24 grid of cells. 1. a filled 'red' rectangle covering rows 2-5."),
]
NOSTOP = StopRule(max_new_tokens=12, eos=False, fence=False)


def prompts(rt, protocol=Protocol("zero-shot")):
    return [build(it, protocol, rt.tokenizer) for it in ITEMS]


def test_info_is_recorded(tiny):
    i = tiny.info
    assert (i.n_layers, i.d_model, i.architecture, i.dtype, i.compat, i.chat) == (2, 32, "LlamaForCausalLM", "float32", False, True)
    assert len(i.weights_digest) == 16 and json.dumps(i.as_dict())


def test_bridge_shares_weights_and_matches_the_model(tiny, tiny_folder):
    bridge = tiny.bridge  # booted on first use, around a twin of the model
    assert bridge.original_model is not tiny.model
    shared = {p.data_ptr() for p in tiny.model.parameters()}
    assert shared == {p.data_ptr() for p in bridge.original_model.parameters()}
    assert tiny.info.attention == "sdpa" and bridge.original_model.config._attn_implementation == "eager"
    exact = Runtime.from_folder(tiny_folder, name="tiny", attention="eager")
    for rt, tol in ((tiny, 1e-4), (exact, 0.0)):  # sdpa: float rounding only; eager: the very same numbers
        bp = prompts(rt)
        ids, mask, _ = rt.pad([b.tokens for b in bp])
        with torch.inference_mode():
            a, _ = rt._forward(ids, mask, None, "hf")
            b, _ = rt._forward(ids, mask, None, "bridge")
        assert (a - b).abs().max().item() <= tol


def test_batched_greedy_equals_one_at_a_time(tiny):
    bp = prompts(tiny)
    batched = tiny.generate([b.tokens for b in bp], [Sampling()] * 3, NOSTOP)
    for b, g in zip(bp, batched):
        alone = tiny.generate([b.tokens], [Sampling()], NOSTOP)[0]
        assert alone.tokens == g.tokens and len(g.tokens) == 12
        assert np.allclose(alone.entropy, g.entropy, atol=1e-4)


def test_shared_prefill_generates_what_each_row_would_alone(tiny):
    """generate() prefills a prompt given several times once, and a prefix every row shares (a few-shot
    protocol's examples) once: each row's tokens are what it generates alone, greedy and sampled, and the same
    as with sharing off; the entropies agree to rounding."""
    from interp.runtime.kv import SHARED_PREFIX_MIN, common_prefix as _common_prefix

    shots = Protocol("few-shot", shots=2)
    bp = [b.tokens for b in prompts(tiny, shots)]
    assert _common_prefix(bp) >= SHARED_PREFIX_MIN  # the examples: the path under test is taken
    rows = [bp[0]] * 3 + [bp[1]] * 3 + [bp[2]] * 2
    samp = [Sampling(0.0 if i % 3 == 0 else 1.0, 300 + i) for i in range(len(rows))]
    shared = tiny.generate(rows, samp, NOSTOP)
    try:
        tiny.share_prefill = False
        plain = tiny.generate(rows, samp, NOSTOP)
    finally:
        tiny.share_prefill = True
    for r, s, g, p in zip(rows, samp, shared, plain):
        alone = tiny.generate([r], [s], NOSTOP)[0]
        assert g.tokens == p.tokens == alone.tokens and len(g.tokens) == 12
        assert np.allclose(g.entropy, p.entropy, atol=1e-4)
    short = [tiny.tokenizer(it.text)["input_ids"] for it in ITEMS]  # no long common prefix: only repeats are shared
    assert _common_prefix(short) < SHARED_PREFIX_MIN
    dup = tiny.generate([short[0]] * 2 + [short[1]], [Sampling(1.0, 5), Sampling(1.0, 6), Sampling()], NOSTOP)
    assert dup[0].tokens == tiny.generate([short[0]], [Sampling(1.0, 5)], NOSTOP)[0].tokens
    assert dup[1].tokens == tiny.generate([short[0]], [Sampling(1.0, 6)], NOSTOP)[0].tokens


def test_repeated_suffixes_after_a_shared_prefix_are_prefilled_once(tiny, monkeypatch):
    """A few-shot prompt given several times (its greedy and sampled attempts; an intervention arm's
    continuations) has its suffix prefilled once: the block after the shared prefix holds each distinct suffix
    one time, and every row still generates what it would alone (test above). A hooked call prefills every row."""
    shots = Protocol("few-shot", shots=2)
    bp = [b.tokens for b in prompts(tiny, shots)]
    rows = [bp[0]] * 3 + [bp[1]] * 3 + [bp[2]] * 2
    samp = [Sampling(0.0 if i % 3 == 0 else 1.0, 300 + i) for i in range(len(rows))]
    from interp.runtime import kv

    blocks = []
    real = kv.suffix_block

    def counting(rt, prefix, suffixes):
        blocks.append(len(suffixes))
        return real(rt, prefix, suffixes)

    monkeypatch.setattr(kv, "suffix_block", counting)
    tiny.generate(rows, samp, NOSTOP)
    assert sum(blocks) == 3, blocks  # in one block, or in groups of like length (kv.length_groups): each suffix once
    blocks.clear()
    tiny.generate(rows, samp, NOSTOP, hooks=[("blocks.1.hook_resid_pre", lambda act, hook: act)])
    assert blocks == []  # a hook that is not uniform: every row's whole prompt, prefilled as it is


def test_sampled_attempt_regenerates_alone_and_seeds_matter(tiny):
    bp = prompts(tiny)
    s = [Sampling(1.0, 101), Sampling(1.0, 102), Sampling(1.0, 103)]
    batched = tiny.generate([b.tokens for b in bp], s, NOSTOP)
    alone = tiny.generate([bp[1].tokens], [s[1]], NOSTOP)[0]
    assert alone.tokens == batched[1].tokens
    other = tiny.generate([bp[1].tokens], [Sampling(1.0, 999)], NOSTOP)[0]
    assert other.tokens != alone.tokens  # a random model at T=1 spreads its mass: another seed differs
    again = tiny.generate([bp[1].tokens] * 2, [s[1], s[1]], NOSTOP)
    assert again[0].tokens == again[1].tokens == alone.tokens


def test_hooked_generation_matches_plain_and_sees_prompt_then_one_position(tiny):
    bp = prompts(tiny)[0]
    seen = []

    def hook(act, hook):
        seen.append(act.shape[1])
        return act

    plain = tiny.generate([bp.tokens], [Sampling()], NOSTOP)[0]
    hooked = tiny.generate([bp.tokens], [Sampling()], NOSTOP, hooks=[("blocks.1.hook_resid_pre", hook)])[0]
    assert hooked.tokens == plain.tokens
    assert seen[0] == len(bp.tokens) and set(seen[1:]) == {1} and len(seen) == 12


def test_a_steering_hook_changes_what_is_generated(tiny):
    bp = prompts(tiny)[0]

    def push(act, hook):
        return act + 50.0 * torch.ones_like(act)

    plain = tiny.generate([bp.tokens], [Sampling()], NOSTOP)[0]
    steered = tiny.generate([bp.tokens], [Sampling()], NOSTOP, hooks=[("blocks.1.hook_resid_pre", push)])[0]
    assert steered.tokens != plain.tokens


def test_capture_matches_run_with_cache_at_the_positions(tiny):
    bp = prompts(tiny)
    pos = [[b.positions[k] for k in POSITIONS] for b in bp]
    acts = tiny.capture([b.tokens for b in bp], pos)
    assert acts.shape == (3, 3, 3, 32)
    for i, b in enumerate(bp):
        _, cache = tiny.bridge.run_with_cache(torch.tensor([b.tokens]))
        for site, name in enumerate(tiny.hook_names()):
            ref = cache[name][0, pos[i]]
            assert torch.allclose(acts[i, site], ref, atol=1e-5), (i, name)


def test_alias_hook_names_are_registered_once(tiny):
    grouped = tiny.canonical_hooks(["blocks.0.hook_resid_pre", "blocks.0.hook_in", "blocks.1.hook_out", "blocks.1.hook_resid_post"])
    assert sorted(len(v) for v in grouped.values()) == [2, 2] and len(grouped) == 2
    with pytest.raises(ValueError, match="no hook point"):
        tiny.canonical_hooks(["blocks.9.hook_resid_pre"])


def test_stop_rules(tiny):
    rt = tiny
    tok = rt.tokenizer

    def check(text_so_far, rule, eos=False):
        from interp.runtime import Generation
        from interp.runtime.generation import check_stop

        g = Generation(tokens=tok(text_so_far, add_special_tokens=False)["input_ids"])
        if eos:
            g.tokens.append(tok.eos_token_id)
        done = check_stop(rt, g, g.tokens[-1], rule)
        return done, g.stop, g.text

    assert check("```python\nfill('red')\n```\nThat is", StopRule()) == (True, "fence", "```python\nfill('red')\n```")
    assert check("```python\nfill('red')\n", StopRule())[0] is False
    assert check("fill('red')\n```", StopRule(open_fence=True)) == (True, "fence", "fill('red')\n```")
    assert check("fill('red')\nEND here", StopRule(strings=("END",))) == (True, "string", "fill('red')\nEND")
    assert check("fill('red')", StopRule(), eos=True) == (True, "eos", "fill('red')")
    assert check("fill('red')", StopRule(eos=False), eos=True)[0] is False
    assert rt.stop_ids >= {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")}


def test_generation_respects_max_new_tokens_and_reports_stop(tiny):
    bp = prompts(tiny)
    out = tiny.generate([b.tokens for b in bp], [Sampling()] * 3, StopRule(max_new_tokens=5))
    for g in out:
        assert len(g.tokens) <= 5 and g.stop in {"eos", "fence", "string", "max_tokens"} and len(g.entropy) == len(g.tokens)
        assert all(e >= 0 for e in g.entropy)


def test_compat_mode_is_recorded_and_runs_through_the_bridge(tiny_folder):
    rt = Runtime.from_folder(tiny_folder, name="tiny", compat=True)
    assert rt.info.compat and rt.info.hooks == "bridge" and rt.info.attention == "eager"
    bp = prompts(rt)[0]
    assert len(rt.generate([bp.tokens], [Sampling()], NOSTOP)[0].tokens) == 12


def test_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ModelError, match="unknown model"):
        Runtime.load("no-such-model")
    with pytest.raises(ModelError, match="no config.json"):
        Runtime.load(str(tmp_path))
    with pytest.raises(ModelError, match="not in the local Hugging Face cache"):
        Runtime.load("nobody/no-such-model-xyz")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match="cannot read the model config"):
        Runtime.from_folder(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setenv("AMBENCH_CACHE", str(cache))
    with pytest.raises(ModelError, match="unknown dtype"):
        Runtime.load("smollm2-135m-instruct", dtype="int3")
    with pytest.raises(ModelError, match="unknown dtype"):
        Runtime.load("organism:xor-planner@7", dtype="int3")
    assert not cache.exists()  # refused before the GGUF was converted or the organism trained (12 s, 60 s)


def test_an_architecture_without_a_bridge_adapter_runs_on_forward_hooks(tmp_path):
    from transformers import DiffLlamaConfig, DiffLlamaForCausalLM

    from tests.interp.tiny import build_tiny

    folder = build_tiny(tmp_path / "m")  # a real causal LM that TransformerBridge has no adapter for
    cfg = DiffLlamaConfig(vocab_size=400, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2)
    DiffLlamaForCausalLM(cfg).save_pretrained(folder)
    rt = Runtime.from_folder(folder)
    assert rt.info.architecture == "DiffLlamaForCausalLM" and rt.info.n_layers == 2
    bp = prompts(rt)[0]
    plain = rt.generate([bp.tokens], [Sampling()], NOSTOP)[0]
    steered = rt.generate([bp.tokens], [Sampling()], NOSTOP, hooks=[("blocks.1.hook_resid_pre", lambda a, hook: a + 50.0)])[0]
    assert len(plain.tokens) == 12 and steered.tokens != plain.tokens
    assert rt.capture([bp.tokens], [[0, 1]]).shape == (1, 3, 2, 32)
    with pytest.raises(ModelError, match="TransformerBridge cannot adapt DiffLlamaForCausalLM"):
        rt.generate([bp.tokens], [Sampling()], NOSTOP, hooks=[("blocks.0.attn.hook_pattern", lambda a, hook: a)])


def test_shared_prefix_continuations_equal_full_generation(tiny):
    bp = prompts(tiny)[0]
    prefix = list(bp.tokens)
    suffixes = [[5, 6, 7], [8], [9, 10]]
    rule = StopRule(max_new_tokens=8, eos=False, fence=False)
    s = [Sampling(), Sampling(1.0, 3), Sampling(1.0, 4)]
    shared = tiny.continue_batch(prefix, suffixes, s, rule)
    for sfx, smp, g in zip(suffixes, s, shared):
        full = tiny.generate([prefix + sfx], [smp], rule)[0]
        assert full.tokens == g.tokens


def test_prefill_hooks_patch_only_the_suffix_block(tiny):
    bp = prompts(tiny)[0]
    calls = []

    def patch(act, hook):
        calls.append(act.shape[1])
        return act + 100.0

    rule = StopRule(max_new_tokens=6, eos=False, fence=False)
    plain = tiny.continue_batch(list(bp.tokens), [[5, 6]], [Sampling()], rule)[0]
    patched = tiny.continue_batch(list(bp.tokens), [[5, 6]], [Sampling()], rule, prefill_hooks=[("blocks.1.hook_resid_pre", patch)])[0]
    assert calls == [2] and patched.tokens != plain.tokens


def test_forward_hooks_equal_the_bridge_bit_for_bit_when_the_model_runs_eager(tiny_folder):
    from hooks.steer import add_direction

    rt = Runtime.from_folder(tiny_folder, name="tiny", attention="eager")
    bp = prompts(rt)
    toks = [b.tokens for b in bp]
    pos = [[b.positions[k] for k in POSITIONS] for b in bp]
    prefix, donor, target = list(bp[0].tokens), [5, 6, 7], [8, 9, 10]
    span = rt.capture([prefix + donor], [[len(prefix), len(prefix) + 1, len(prefix) + 2]], layers=[1])[0, 0]

    def put(act, hook=None):
        act[:, -3:, :] = span.to(act.dtype)
        return act

    def run():
        vec = np.linspace(-3.0, 3.0, rt.info.d_model)
        return (rt.capture(toks, pos), rt.capture(toks, pos, layers=[2], final="post-norm"),
                rt.continue_batch(prefix, [target, target[:1]], [Sampling(), Sampling(1.0, 9)], NOSTOP,
                                  prefill_hooks=[("blocks.1.hook_resid_pre", put)]),
                rt.generate(toks, [Sampling()] * 3, NOSTOP, hooks=[("blocks.1.hook_resid_post", add_direction(vec))]))

    mine = run()
    with rt.via_bridge():
        ref = run()
    assert torch.equal(mine[0], ref[0]) and torch.equal(mine[1], ref[1])
    for a, b in zip(mine[2:], ref[2:]):
        assert [g.tokens for g in a] == [g.tokens for g in b] and [g.entropy for g in a] == [g.entropy for g in b]


def test_steering_the_final_residual_has_the_constructed_effect(tiny):
    """Adding v to the last block's output: the first step's distribution is softmax(unembed(norm(x + v)))."""
    from hooks.steer import add_direction

    bp = prompts(tiny)[1]
    n = tiny.info.n_layers
    v = np.linspace(-2.0, 2.0, tiny.info.d_model)
    x = tiny.capture([bp.tokens], [[len(bp.tokens) - 1]], layers=[n])[0, 0, 0]
    with torch.inference_mode():
        logits = tiny.model.get_output_embeddings()(tiny.sites.norm(x + torch.as_tensor(v, dtype=torch.float32)))
    logp = torch.log_softmax(logits, -1)
    want_entropy = float(-(logp.exp() * logp).sum())
    g = tiny.generate([bp.tokens], [Sampling()], NOSTOP, hooks=[(f"blocks.{n - 1}.hook_resid_post", add_direction(v))])[0]
    assert g.tokens[0] == int(logits.argmax()) and abs(g.entropy[0] - want_entropy) < 1e-4
    plain = tiny.generate([bp.tokens], [Sampling()], NOSTOP)[0]
    assert abs(plain.entropy[0] - want_entropy) > 1e-3  # the vector did change the distribution


def test_prefill_hooks_change_only_each_rows_suffix(tiny):
    """A short suffix's row recomputes a few prefix tokens beside it; a prefill hook must not reach them."""
    prefix = tiny.tokenizer("Draw the flag of Germany. A cat sitting on a mat.")["input_ids"]
    rule = StopRule(max_new_tokens=6, eos=False, fence=False)

    def shove(act, hook=None):
        return act.flip(-1) * 10.0  # every position of the block

    hooks = [("blocks.1.hook_resid_pre", shove)]
    together = tiny.continue_batch(prefix, [[5], [6, 7, 8, 9]], [Sampling(), Sampling()], rule, prefill_hooks=hooks)
    for sfx, g in zip([[5], [6, 7, 8, 9]], together):
        alone = tiny.continue_batch(prefix, [sfx], [Sampling()], rule, prefill_hooks=hooks)[0]
        assert alone.tokens == g.tokens and np.allclose(alone.entropy, g.entropy, atol=1e-5)


def test_forward_hook_names_aliases_and_none(tiny):
    bp = prompts(tiny)[0]
    seen = []

    def note(act, hook):
        seen.append(hook.name)  # returns None: the tensor is kept

    names = ["blocks.0.hook_resid_pre", "blocks.0.hook_in", "blocks.1.hook_out", "blocks.1.hook_resid_post", "ln_final.hook_out"]
    plain = tiny.generate([bp.tokens], [Sampling()], NOSTOP)[0]
    hooked = tiny.generate([bp.tokens], [Sampling()], NOSTOP, hooks=[(n, note) for n in names])[0]
    assert hooked.tokens == plain.tokens and hooked.entropy == plain.entropy
    assert seen[:5] == ["blocks.0.hook_in", "blocks.0.hook_in", "blocks.1.hook_out", "blocks.1.hook_out", "ln_final.hook_out"]
    assert tiny.hook_names([2], final="post-norm") == ["ln_final.hook_out"]
    assert tiny.canonical_hooks(["ln_final.hook_out", "blocks.1.hook_resid_post"]) == {
        "ln_final.hook_out": ["ln_final.hook_out"], "blocks.1.hook_out": ["blocks.1.hook_resid_post"]}
    with pytest.raises(ValueError, match="final site"):
        tiny.hook_names(final="middle")


def test_the_growing_cache_holds_what_concatenation_holds():
    """The decode loop's cache writes each step into spare room instead of concatenating the whole cache: after
    prefills, single steps, rows dropped, a deepcopy and rows replaced from outside (as `kv.shift_rows` does), every
    layer holds exactly the tensors DynamicCache's concatenation holds, and a step returns them."""
    import copy

    from transformers import DynamicCache

    from interp.runtime.kv import growing_cache as _growing_cache

    g = torch.Generator().manual_seed(0)
    mine, ref = _growing_cache(), DynamicCache()

    def step(n, b):
        for layer in range(2):
            k, v = torch.randn((b, 3, n, 4), generator=g), torch.randn((b, 3, n, 4), generator=g)
            a, ra = mine.update(k, v, layer), ref.update(k, v, layer)
            assert torch.equal(a[0], ra[0]) and torch.equal(a[1], ra[1])

    step(70, 4)
    for _ in range(40):  # past the first buffer's room (70 + 64): it grows once
        step(1, 4)
    idx = torch.tensor([0, 2, 3])
    mine.batch_select_indices(idx)
    ref.batch_select_indices(idx)
    step(1, 3)
    mine = copy.deepcopy(mine)
    step(5, 3)
    for cache in (mine, ref):
        for layer in cache.layers:
            layer.keys, layer.values = layer.keys.flip(0).contiguous(), layer.values.flip(0).contiguous()
    for _ in range(3):
        step(1, 3)
    for a, b in zip(mine.layers, ref.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values) and a.keys.shape[-2] == 70 + 40 + 1 + 5 + 3
    assert mine.get_seq_length() == ref.get_seq_length()


def test_a_shared_prefix_is_attended_once_and_decodes_what_each_row_copy_decodes(tiny, monkeypatch):
    """`kv.share_prefix`: after a continue_batch prefill, the prefix's keys and values are kept once and every row's
    step scores them with its own slots in one softmax. Each step's distribution (its entropy, from the logits) and
    every token equal decoding with a copy of the prefix per row (`share_decode = False`), for suffixes of different
    lengths (a padded row's block starts with the prefix's tail, which the shared layout must mask), greedy and
    sampled rows. Broken variant: the block's prefix tail left unmasked (attended twice) moves the distributions."""
    from interp.runtime import kv

    bp = prompts(tiny)[0]
    prefix = list(bp.tokens)
    suffixes = [[5, 6, 7, 8, 9, 10, 11], [8], [9, 10], [5, 6, 7, 8, 9, 10, 11]]
    s = [Sampling(), Sampling(1.0, 3), Sampling(1.0, 4), Sampling()]
    assert kv.can_share_prefix(tiny, "hf")
    calls = []
    real = kv.shared_prefix_attention

    def counted(module, query, key, *a, **k):
        calls.append(getattr(key, kv.SHARED, None) is not None)
        return real(module, query, key, *a, **k)

    def run(share):
        tiny.share_decode = share
        try:
            return tiny.continue_batch(prefix, suffixes, s, NOSTOP)
        finally:
            tiny.share_decode = True

    copies = run(False)
    kv.install_shared_prefix_attention()
    from transformers.modeling_utils import AttentionInterface

    monkeypatch.setitem(AttentionInterface._global_mapping, "sdpa", counted)
    shared = run(True)
    assert any(calls) and not all(calls)  # the prefill went to sdpa, the decode steps read the prefix once
    for a, b in zip(copies, shared):
        assert a.tokens == b.tokens and len(a.tokens) == NOSTOP.max_new_tokens
        assert np.allclose(a.entropy, b.entropy, atol=1e-5), (a.entropy, b.entropy)

    # suffixes of unlike lengths: prefilled in groups of like length (kv.length_groups), joined into one layout
    other = list(prompts(tiny)[1].tokens)
    suffixes[:] = [other[:1], other[:200], other[3:5], other[:210], other[7:8]]
    s[:] = [Sampling(), Sampling(1.0, 5), Sampling(), Sampling(1.0, 6), Sampling(1.0, 6)]
    assert len(kv.length_groups([len(x) for x in suffixes])) == 2
    copies, calls[:] = run(False), []
    shared = run(True)
    assert any(calls)
    for a, b in zip(copies, shared):
        assert a.tokens == b.tokens
        assert np.allclose(a.entropy, b.entropy, atol=1e-5), (a.entropy, b.entropy)

    plain = kv.shared_mask

    def unmasked(lengths, n_pre, width, device=None):  # the broken variant: every block column attended
        return torch.ones_like(plain(lengths, n_pre, width, device))

    monkeypatch.setattr(kv, "shared_mask", unmasked)
    broken = run(True)
    assert not all(np.allclose(a.entropy, b.entropy, atol=1e-5) for a, b in zip(copies, broken))


def test_a_steering_vector_added_everywhere_is_added_to_a_shared_prefix_once(tiny, monkeypatch):
    """generate() with a steering hook that adds its vector at every position (`add_direction(v)`, `hook.uniform`)
    computes the rows' common prefix (the few-shot examples) once, steered, and each row generates what it generates
    alone with the same hook, greedy and sampled; the steering still changes the tokens. A hook on chosen columns is
    not uniform: those prompts are prefilled whole. Broken variant: the prefix computed without the hook."""
    from hooks.steer import add_direction
    from interp.runtime import kv
    from interp.runtime.kv import SHARED_PREFIX_MIN, common_prefix as _common_prefix

    bp = [b.tokens for b in prompts(tiny, Protocol("few-shot", shots=2))]
    assert _common_prefix(bp) >= SHARED_PREFIX_MIN
    v = np.random.default_rng(1).standard_normal(tiny.info.d_model) * 3.0
    hooks = [("blocks.1.hook_resid_pre", add_direction(v))]
    samp = [Sampling(), Sampling(1.0, 7), Sampling()]
    prefixes = []
    real = kv.prefix_cache

    def counted(rt, prefix, path, hooks=()):
        prefixes.append((len(prefix), len(hooks)))
        return real(rt, prefix, path, hooks)

    monkeypatch.setattr(kv, "prefix_cache", counted)
    steered = tiny.generate(bp, samp, NOSTOP, hooks=hooks)
    assert prefixes == [(_common_prefix(bp), 1)]  # one steered prefix for the three rows
    plain = tiny.generate(bp, samp, NOSTOP)
    for row, s, g in zip(bp, samp, steered):
        alone = tiny.generate([row], [s], NOSTOP, hooks=hooks)[0]
        assert g.tokens == alone.tokens
        assert np.allclose(g.entropy, alone.entropy, atol=1e-5)  # measured: <= 2e-6
    assert [g.tokens for g in steered] != [g.tokens for g in plain]
    prefixes.clear()
    tiny.generate(bp, samp, NOSTOP, hooks=[("blocks.1.hook_resid_pre", add_direction(v, positions=[-1]))])
    assert prefixes == []  # columns: the whole prompts, each row as before

    def unsteered_prefix(rt, prefix, path, hooks=()):  # the broken variant
        return real(rt, prefix, path, ())

    monkeypatch.setattr(kv, "prefix_cache", unsteered_prefix)
    broken = tiny.generate(bp, samp, NOSTOP, hooks=hooks)
    # measured: 7e-5..9e-5 on this tiny model, whose last tokens read the prefix weakly
    assert not all(np.allclose(a.entropy, b.entropy, atol=1e-5) for a, b in zip(steered, broken))


def test_a_prefix_is_computed_in_fixed_pieces_whatever_came_before(tiny, monkeypatch):
    """`kv.prefix_cache` computes an unhooked prefix in pieces that end at multiples of PREFIX_CHUNK tokens and keeps
    the cache at each boundary, so prefixes that begin alike (the intervention stage's cuts: the same worked examples
    and prompt, then other code) compute their common start once. A prefix's cache is bit for bit the same whether
    or not another prefix left boundary caches behind (a resumed stage computes what an unbroken one did), and
    continuing from it decodes what the whole prompt decodes alone. Broken variant: resuming from the longest
    common start with the prefix computed before (not a fixed boundary) is not the same cache."""
    from interp.runtime import kv

    bp = [list(b.tokens) for b in prompts(tiny, Protocol("few-shot", shots=2))]
    a, b = bp[0] + [5, 6, 7], bp[2] + [8, 9]
    common = kv.common_prefix([a, b])
    assert common > 3 * kv.PREFIX_CHUNK and common % kv.PREFIX_CHUNK
    whole = len(a) // kv.PREFIX_CHUNK  # a's pieces: `whole` full ones, then the rest

    def fresh(prefix, before=None):
        tiny._prefixes.clear()
        tiny._chunks.clear()
        if before is not None:
            kv.prefix_cache(tiny, before, "hf")
        forwards.clear()
        return kv.prefix_cache(tiny, prefix, "hf")

    forwards = []
    real = tiny._forward
    monkeypatch.setattr(tiny, "_forward", lambda ids, *r: forwards.append(ids.shape[1]) or real(ids, *r))
    alone = fresh(a)
    assert forwards == [kv.PREFIX_CHUNK] * whole + [len(a) - whole * kv.PREFIX_CHUNK]
    after = fresh(a, before=b)
    # a computes only its pieces after the last boundary it shares with b (768)
    assert forwards == [kv.PREFIX_CHUNK] * (whole - 3) + [len(a) - whole * kv.PREFIX_CHUNK]
    for x, y in zip(alone.layers, after.layers):
        assert torch.equal(x.keys, y.keys) and torch.equal(x.values, y.values)
    monkeypatch.setattr(tiny, "_forward", real)
    rule = StopRule(max_new_tokens=6, eos=False, fence=False)
    assert tiny.continue_batch(a[:-1], [a[-1:]], [Sampling()], rule)[0].tokens == tiny.generate([a], [Sampling()], rule)[0].tokens

    def longest_common_start(rt, prefix, path):  # the broken variant: resume where the prefix before stopped sharing
        import torch

        cache = rt._new_cache()
        with torch.inference_mode():
            for piece in (prefix[:common], prefix[common:]):
                done = cache.get_seq_length()
                ids = torch.tensor([piece])
                _, cache = rt._forward(ids, torch.ones((1, done + len(piece)), dtype=torch.long), cache, path)
        return cache

    monkeypatch.setattr(kv, "_in_chunks", longest_common_start)
    broken = fresh(a)
    assert not all(torch.equal(x.keys, y.keys) for x, y in zip(alone.layers, broken.layers))


@pytest.mark.parametrize("arch", ["falcon", "deepseek_v3"])
def test_an_architecture_outside_the_shared_decode_list_keeps_a_copy_per_row(arch, tmp_path):
    """The shared-prefix decode serves only the architectures whose attention it was checked on
    (`kv.SHARED_DECODE_TYPES`). An outside check found Falcon, which calls sdpa itself, crashing with it, and DeepSeek
    V3's latent attention decoding other tokens (entropies off by 0.035): both now keep a copy of the prefix per row
    and continue each suffix as generating it alone does. Broken variant: the list widened to them fails."""
    import transformers as tf

    from interp.runtime import kv
    from tests.interp.tiny import build_tokenizer

    folder = tmp_path / arch
    tok = build_tokenizer(folder, chat=True)
    ids = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    torch.manual_seed(0)
    if arch == "falcon":
        model = tf.FalconForCausalLM(tf.FalconConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                     new_decoder_architecture=True, num_kv_heads=2, **ids))
    else:
        model = tf.DeepseekV3ForCausalLM(tf.DeepseekV3Config(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=2048,
            num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=6,
            n_routed_experts=2, num_experts_per_tok=1, n_group=1, topk_group=1, first_k_dense_replace=2,
            moe_intermediate_size=16, **ids))
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)  # sharper distributions: tokens that differ show it
    model.save_pretrained(folder)
    rt = Runtime.from_folder(folder, name=arch)
    assert not kv.can_share_prefix(rt, rt._path([]))
    bp = list(prompts(rt, Protocol("few-shot", shots=2))[0].tokens)
    prefix, suffixes = bp[:-4], [bp[-4:], bp[-1:], bp[-2:]]
    rule = StopRule(max_new_tokens=8, eos=False, fence=False)

    def check():
        got = rt.continue_batch(prefix, suffixes, [Sampling()] * 3, rule)
        for sfx, g in zip(suffixes, got):
            alone = rt.generate([prefix + sfx], [Sampling()], rule)[0]
            if g.tokens != alone.tokens or not np.allclose(g.entropy, alone.entropy, atol=1e-4):
                return False
        return True

    assert check()
    widened = kv.SHARED_DECODE_TYPES | {rt.model.config.model_type}
    try:
        kv.SHARED_DECODE_TYPES = widened
        broken = check()
    except RuntimeError:  # Falcon: the keys its own sdpa call gets miss the prefix
        broken = False
    finally:
        kv.SHARED_DECODE_TYPES = widened - {rt.model.config.model_type}
    assert not broken


def test_hooks_on_chosen_positions_see_the_block_they_saw_before(tiny, monkeypatch):
    """An outside check: with the suffixes prefilled in groups of like length, a steering hook on chosen positions
    ("prompt", "generated", [-1]) saw one-token groups as decode steps and moved 3 of 5 rows from the first token
    (0.076 nats), and [-5] raised on a two-token group. Such hooks now get the one block they got before, so every
    row equals decoding with a copy of the prefix per row, which they keep (a hook on chosen columns also acts on the
    prefix pass and on a padded row's recomputed prefix tail, so the shared layout would change what it steers:
    [-1] moved entropies by 2e-4). Broken variant: grouping them anyway."""
    from hooks.steer import add_direction
    from interp.runtime import generation

    bp = list(prompts(tiny, Protocol("few-shot", shots=2))[2].tokens)
    prefix, other = bp[:300], list(prompts(tiny)[1].tokens)
    suffixes = [other[:1], (other * 3)[:150], other[2:3], (other * 3)[:160], other[4:5]]
    v = np.random.default_rng(3).standard_normal(tiny.info.d_model) * 3.0
    rule = StopRule(max_new_tokens=6, eos=False, fence=False)

    def run(share, positions):
        tiny.share_decode = share
        try:
            hooks = [("blocks.1.hook_resid_pre", add_direction(v, positions=positions))]
            return tiny.continue_batch(prefix, suffixes, [Sampling()] * 5, rule, hooks=hooks)
        finally:
            tiny.share_decode = True

    def same(a, b):
        return all(x.tokens == y.tokens and np.allclose(x.entropy, y.entropy, atol=1e-5) for x, y in zip(a, b))

    for positions in ("prompt", "generated", [-1]):
        assert same(run(True, positions), run(False, positions)), positions
    monkeypatch.setattr(generation, "_uniform", lambda hooks: True)
    assert not same(run(True, "prompt"), run(False, "prompt"))


def test_only_add_direction_everywhere_counts_as_uniform():
    """`generate` computes a shared prefix once with a hook only if `add_direction(v)` (no positions) made it: a
    wrapper built with functools.wraps copies a hook's attributes but may act per row, so it is not uniform, and
    neither are hooks on chosen positions. A float32 check and a hook checked twice are looked through."""
    import functools

    from hooks.steer import add_direction, is_uniform
    from interp.runtime.forward import checked_hooks, unchecked

    v = np.ones(4)
    everywhere = add_direction(v)

    @functools.wraps(everywhere)
    def per_row(act, hook=None):
        return everywhere(act, hook) * 2

    assert is_uniform(everywhere) and not is_uniform(per_row)
    assert not any(is_uniform(add_direction(v, positions=p)) for p in ("prompt", "generated", [-1], slice(0, 2)))
    twice = checked_hooks(checked_hooks([("x", everywhere)]))[0][1]
    assert twice is not everywhere and unchecked(twice) is everywhere and is_uniform(unchecked(twice))
    assert not is_uniform(lambda act, hook=None: act) and not is_uniform(None)


def test_a_steered_bfloat16_generation_prefills_each_row_as_before(tiny_folder, monkeypatch):
    """In bfloat16 the shared prefix's other sums moved a steered row's token at step 6 (an outside check, tiny glm4),
    where each row's own prefill matched generating alone: a uniform hook shares the prefix in float32 only."""
    from hooks.steer import add_direction
    from interp.runtime import kv

    rt = Runtime.from_folder(tiny_folder, name="tiny-bf16", dtype="bfloat16")
    bp = [b.tokens for b in prompts(rt, Protocol("few-shot", shots=2))]
    hooks = [("blocks.1.hook_resid_pre", add_direction(np.ones(rt.info.d_model)))]
    called = []
    monkeypatch.setattr(kv, "prefix_cache", lambda *a, **k: called.append(1))
    rt.generate(bp, [Sampling()] * 3, StopRule(max_new_tokens=2, eos=False, fence=False), hooks=hooks)
    assert called == []


def test_the_length_check_s_tokenizer_is_handed_to_the_load_once(tiny_folder, monkeypatch):
    """The prompt-length check reads the folder's tokenizer before the model loads; the load takes that instance instead
    of loading it again (3.5 s for Gemma 3's vocabulary), once: a second load of the folder loads its own. The broken
    variant (no hand-over) loads it twice for one check and load."""
    import transformers

    from experiments.study.checks import check_lengths
    from interp.prompts import Protocol
    from interp.runtime import Runtime
    from interp.runtime import load as load_mod

    real = transformers.AutoTokenizer.from_pretrained.__func__
    calls = []

    def counting(cls, *a, **k):
        calls.append(str(a[0]))
        return real(cls, *a, **k)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(counting))
    monkeypatch.setattr(load_mod, "_HANDED", {})
    monkeypatch.setattr("interp.models.existing_folder", lambda model: tiny_folder)
    check_lengths("tiny", [(Protocol("zero-shot", 0), [])])
    checked = load_mod._HANDED[(str(tiny_folder.resolve()), False)]
    rt = Runtime.from_folder(tiny_folder, name="tiny")
    assert len(calls) == 1 and rt.tokenizer is checked and not load_mod._HANDED
    again = Runtime.from_folder(tiny_folder, name="tiny")
    assert len(calls) == 2 and again.tokenizer is not checked
