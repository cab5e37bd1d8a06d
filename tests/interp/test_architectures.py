"""The architecture matrix: every supported architecture through every runtime feature, float32 and bf16.

For each tiny random model (tests/interp/archs.py) and dtype:
- load: `Runtime.from_folder` with the default options (remote code with its explicit flag);
- generate: batched greedy equals Hugging Face `generate` on a separately loaded model;
- capture: equals Hugging Face `output_hidden_states` (block inputs; the post-norm site equals its last
  entry; the pre-norm final site is what the final norm reads);
- patch: an identity prefill hook is an exact no-op (tokens and entropies bit for bit), and patching the
  layer-0 residual at the cut with another suffix's captured activations continues exactly as that
  suffix does (a constructed answer);
- steer: a zero steering vector is an exact no-op; a large one changes the tokens;
- continue: `continue_batch` over suffixes of different lengths equals generating each row alone
  (windowed architectures have an 8-token window, shorter than the prompt);
- bridge (float32, architectures TransformerBridge adapts): capture, patch and steer through the
  bridge equal the forward-hook path.
With AMBENCH_ARCH_MATRIX=path set, each case appends its results as a JSON line there
(`scripts/architecture_table.py` turns them into the table in docs/runtime.md).
"""

from __future__ import annotations

import copy
import json
import os
import time

import numpy as np
import pytest
import torch

from hooks.steer import add_direction
from interp.runtime import Runtime, Sampling, StopRule
from tests.interp.archs import ARCHS, PAPER_MODELS, WINDOW, WINDOWED, build_arch

TEXTS = ["Draw the flag of Germany. A cat sitting on a mat under a light blue sky.",
         "You write short Python programs that draw"]
RULE = StopRule(max_new_tokens=6, eos=False, fence=False)
NO_BRIDGE = {"custom"}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # 2-block models with d_model 32: each op is microseconds, and a second thread only adds the cost of
    # waking it (60x slower per op on a busy 2-core machine, measured)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("archs")
    return {a: build_arch(a, root / a) for a in ARCHS}


def _hf(folder, dtype, attention, remote):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation=attention,
                                                trust_remote_code=remote).eval()


def _same(a, b):
    return [g.tokens for g in a] == [g.tokens for g in b] and [g.entropy for g in a] == [g.entropy for g in b]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_architecture(arch, dtype, folders):
    t0 = time.perf_counter()
    tdtype = getattr(torch, dtype)
    remote = arch == "custom"
    rt = Runtime.from_folder(folders[arch], name=arch, dtype=tdtype, trust_remote_code=remote)
    res = {"arch": arch, "dtype": dtype, "architecture": rt.info.architecture, "attention": rt.info.attention,
           "window": WINDOW if arch in WINDOWED else None}
    prompts = [rt.tokenizer(t)["input_ids"] for t in TEXTS]
    assert len(prompts[0]) > 2 * WINDOW and len(prompts[0]) != len(prompts[1])
    hf = _hf(folders[arch], tdtype, rt.info.attention, remote)
    ids, mask, offsets = rt.pad(prompts)
    pos_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    n = rt.info.n_layers
    res["load"] = True

    # generate == Hugging Face greedy (its own decode loop and cache, sliding-window layers included)
    mine = rt.generate(prompts, [Sampling()] * 2, RULE)
    gc = copy.deepcopy(hf.generation_config)
    gc.eos_token_id, gc.max_new_tokens, gc.do_sample, gc.pad_token_id = None, RULE.max_new_tokens, False, rt.pad_id
    with torch.inference_mode():
        ref = hf.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
    assert [g.tokens for g in mine] == ref[:, ids.shape[1]:].tolist()
    res["generate"] = True

    # capture == Hugging Face hidden states at the chosen positions
    positions = [[0, len(p) // 2, len(p) - 1] for p in prompts]
    pre = rt.capture(prompts, positions)
    post = rt.capture(prompts, positions, layers=[n], final="post-norm")
    with torch.inference_mode():
        hs = hf(input_ids=ids, attention_mask=mask, position_ids=pos_ids, output_hidden_states=True).hidden_states
        normed = rt.sites.norm(pre[:, n].to(tdtype)).float()
    tol = 1e-5 if dtype == "float32" else 1e-2
    err = 0.0
    for i, (off, pos) in enumerate(zip(offsets, positions)):
        at = [off + p for p in pos]
        for layer in range(n):
            err = max(err, (pre[i, layer] - hs[layer][i, at].float()).abs().max().item())
        err = max(err, (post[i, 0] - hs[n][i, at].float()).abs().max().item())
        err = max(err, (normed[i] - hs[n][i, at].float()).abs().max().item())
    assert err <= tol, err
    res["capture"] = True
    res["capture_max_abs_diff"] = err

    # patch: identity is an exact no-op; layer-0 patch with a donor's activations == continuing the donor
    prefix, donor, target = prompts[0][:20], prompts[0][20:23], prompts[1][:3]
    assert len(prefix) > WINDOW
    base = rt.continue_batch(prefix, [target], [Sampling()], RULE)
    ident = rt.continue_batch(prefix, [target], [Sampling()], RULE, prefill_hooks=[("blocks.0.hook_resid_pre", lambda a, hook: a)])
    assert _same(base, ident)
    donor_acts = rt.capture([prefix + donor], [[20, 21, 22]], layers=[0])[0, 0]

    def put(act, hook=None):
        act[:, -3:, :] = donor_acts.to(act.device, act.dtype)
        return act

    patched = rt.continue_batch(prefix, [target], [Sampling()], RULE, prefill_hooks=[("blocks.0.hook_resid_pre", put)])
    as_donor = rt.continue_batch(prefix, [donor], [Sampling()], RULE)
    assert patched[0].tokens == as_donor[0].tokens and patched[0].tokens != base[0].tokens
    res["patch"] = True

    # steer: zero vector is an exact no-op; a large vector changes what is generated
    zero = rt.generate(prompts, [Sampling()] * 2, RULE, hooks=[("blocks.1.hook_resid_pre", add_direction(np.zeros(rt.info.d_model)))])
    assert _same(mine, zero)
    push = np.random.default_rng(0).standard_normal(rt.info.d_model) * 20.0
    steered = rt.generate(prompts, [Sampling()] * 2, RULE, hooks=[("blocks.1.hook_resid_pre", add_direction(push))])
    assert [g.tokens for g in steered] != [g.tokens for g in mine]
    res["steer"] = True

    # continue == generate alone, suffixes of different lengths (padding never inside a window)
    suffixes = [prompts[0][20:21], prompts[0][20:23], prompts[1][:5]]
    samp = [Sampling(), Sampling(1.0, 3), Sampling(1.0, 4)]
    shared = rt.continue_batch(prefix, suffixes, samp, RULE)
    for sfx, s, g in zip(suffixes, samp, shared):
        assert rt.generate([prefix + sfx], [s], RULE)[0].tokens == g.tokens
    res["continue"] = True

    # the bridge agrees with the forward hooks (float32; eager vs the model's kernel: rounding only)
    if arch in NO_BRIDGE:
        res["bridge"] = None
    elif dtype == "float32":
        with rt.via_bridge():
            b_pre = rt.capture(prompts, positions)
            b_patched = rt.continue_batch(prefix, [target], [Sampling()], RULE, prefill_hooks=[("blocks.0.hook_resid_pre", put)])
            b_steered = rt.generate(prompts, [Sampling()] * 2, RULE, hooks=[("blocks.1.hook_resid_pre", add_direction(push))])
        assert (b_pre - pre).abs().max().item() <= 1e-4
        assert b_patched[0].tokens == patched[0].tokens
        assert [g.tokens for g in b_steered] == [g.tokens for g in steered]
        res["bridge"] = True
    res["seconds"] = round(time.perf_counter() - t0, 2)
    out = os.environ.get("AMBENCH_ARCH_MATRIX")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(res) + "\n")


@pytest.mark.parametrize("arch", sorted(set(PAPER_MODELS.values())))
def test_paper_architectures_run_from_the_default_command_line(arch, folders, tmp_path):
    """`ambench generate --model FOLDER` with no other model option; remote code only with its flag."""
    from typer.testing import CliRunner

    from experiments.cli import app

    argv = ["generate", "--model", str(folders[arch]), "--task", "translation", "--limit", "1", "--samples", "0",
            "--max-new-tokens", "4", "--no-check", "--out", str(tmp_path / "run")]
    res = CliRunner().invoke(app, argv)
    if arch == "custom":
        assert res.exit_code == 2 and "--trust-remote-code" in res.output and "Traceback" not in res.output
        res = CliRunner().invoke(app, argv + ["--trust-remote-code"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (tmp_path / "run" / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["n_tokens"] >= 1
