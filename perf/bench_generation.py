"""Generation throughput: the runtime vs Hugging Face `generate` on the same weights, side by side.

    .venv/bin/python perf/bench_generation.py [--model smollm2-135m-instruct] [--tokens 64] [--repeats 3]

For b = 1 and b = 8 (the first b translation prompts, few-shot protocol, left padded), every contender
generates exactly `--tokens` new tokens greedily (no early stop):
- `hf`: `AutoModelForCausalLM.generate` on a separately loaded plain model (its default attention);
- `runtime`: `Runtime.generate` with no hooks;
- `runtime+steer`: the same with one steering hook (`hooks.steer.add_direction` at the middle block's
  resid_pre, every position of every step), on the forward-hook path the stages use;
- `runtime+patch`: the same with one patching hook (writes donor activations over the prompt's last
  three positions at the middle block, at the prefill; a pass-through at later steps);
- `steer via bridge`: the steering hook through the TransformerBridge (`Runtime.via_bridge`), the path
  every hooked call took before issue 15;
- `bridge.generate`: TransformerBridge's own generate loop.
Rounds alternate between contenders so machine noise hits all of them; the table reports the median
tokens/s (new tokens x batch / wall time) and each contender's ratio to `hf`. `contenders` and `measure`
are also what perf/gpu_check.py times on the GPU.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

CONTENDERS = ("hf", "runtime", "runtime+steer", "runtime+patch", "steer via bridge", "bridge.generate")


def contenders(rt, hf, prompts, tokens: int, names: tuple[str, ...] = CONTENDERS) -> dict[str, Callable[[], None]]:
    """One closure per contender, each generating exactly `tokens` new tokens greedily for every prompt row."""
    import numpy as np
    import torch

    from hooks.steer import add_direction
    from interp.runtime import Sampling, StopRule

    b = len(prompts)
    rule = StopRule(max_new_tokens=tokens, eos=False, fence=False)
    ids, mask, _ = rt.pad(prompts)

    def run_hf() -> None:
        with torch.inference_mode():
            out = hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                              do_sample=False, pad_token_id=rt.pad_id)
        assert out.shape[1] - ids.shape[1] == tokens

    def run_rt() -> None:
        g = rt.generate(prompts, [Sampling()] * b, rule)
        assert all(len(x.tokens) == tokens for x in g)

    site = f"blocks.{rt.info.n_layers // 2}.hook_resid_pre"
    steer = [(site, add_direction(np.full(rt.info.d_model, 0.01, dtype=np.float32)))]
    donor = torch.zeros(3, rt.info.d_model)

    def put(act, hook=None):
        if act.shape[1] > 1:  # the prefill: the prompt's last three positions
            act[:, -3:, :] = donor.to(act.device, act.dtype)
        return act

    def run_steer() -> None:
        rt.generate(prompts, [Sampling()] * b, rule, hooks=steer)

    def run_patch() -> None:
        rt.generate(prompts, [Sampling()] * b, rule, hooks=[(site, put)])

    def run_steer_bridge() -> None:
        with rt.via_bridge():
            rt.generate(prompts, [Sampling()] * b, rule, hooks=steer)

    def run_bridge() -> None:
        with torch.inference_mode():
            rt.bridge.generate(ids, attention_mask=mask, max_new_tokens=tokens, stop_at_eos=False, do_sample=False,
                               verbose=False, return_type="tokens")

    every = {"hf": run_hf, "runtime": run_rt, "runtime+steer": run_steer, "runtime+patch": run_patch,
             "steer via bridge": run_steer_bridge, "bridge.generate": run_bridge}
    return {name: every[name] for name in names}


def measure(fns: dict[str, Callable[[], None]], repeats: int, sync: Callable[[], None] = lambda: None) -> dict[str, list[float]]:
    """Wall seconds of each contender per round; rounds alternate between contenders so machine noise hits all."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync()
            t = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t)
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", default="1,8")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from interp.prompts import Protocol, build, translation_items
    from interp.runtime import Runtime

    torch.manual_seed(0)
    rt = Runtime.load(args.model, device="cpu")
    hf = AutoModelForCausalLM.from_pretrained(rt.info.path, dtype=torch.float32).eval()
    proto = Protocol("few-shot", 1) if rt.info.chat else Protocol("completion", 1)
    items = translation_items()
    print(f"model {rt.info.name}, {torch.get_num_threads()} threads, {args.tokens} new tokens, median of {args.repeats}")
    print(f"{'b':>3} {'contender':<17} {'tok/s':>8} {'vs hf':>7}")
    for b in [int(x) for x in args.batches.split(",")]:
        prompts = [build(it, proto, rt.tokenizer).tokens for it in items[:b]]
        fns = contenders(rt, hf, prompts, args.tokens)
        fns["runtime"]()  # warm-up (and boots the bridge, outside the timings)
        fns["steer via bridge"]()
        times = measure(fns, args.repeats)
        base = b * args.tokens / statistics.median(times["hf"])
        for name in fns:
            tps = b * args.tokens / statistics.median(times[name])
            print(f"{b:>3} {name:<17} {tps:8.1f} {tps / base:6.2f}x")


if __name__ == "__main__":
    main()
