"""A prefix shared by a batch's rows, read once: generation and capture with and without it, side by side.

    .venv/bin/python perf/bench_shared_prefix.py [--model smollm2-135m-instruct] [--tokens 128] [--repeats 1]

The quick study's shapes on its model (few-shot protocol, two worked examples: 807 tokens every prompt shares):
- `generate`: the 60 layout attempts (30 prompts, a greedy and a sampled attempt each, the fence stop, `--tokens`
  new tokens at most) in batches of 24 and in one batch, each with the prefix decoded once
  (`interp.runtime.kv.share_prefix`) and with a copy per row (`rt.share_decode = False`, the layout before);
- `capture`: the 20 translation prompts at their last token, every layer, with the suffixes prefilled in groups of
  like length (`kv.length_groups`) and in one block (the grouping replaced by one group).
Every contender's tokens are compared with the first's (the same rows, so they must match) and each contender's
wall time is given with its ratio to the first of its kind. Run it on an otherwise idle machine; one thread
(OMP_NUM_THREADS=1), as the main job runs the study.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()

    import numpy as np
    import torch

    from interp.prompts import Protocol, build, layout_items, translation_items
    from interp.runtime import Runtime, Sampling, StopRule, kv

    rt = Runtime.load(args.model, device="cpu")
    proto = Protocol("few-shot", 2) if rt.info.chat else Protocol("completion", 2)
    lay = [build(it, proto, rt.tokenizer) for it in layout_items([f"{a}{b}-0{k}" for a in "123" for b in "ABCDE" for k in "01"])]
    rows = [b.tokens for b in lay for _ in range(2)]
    samp = [Sampling(0.0 if i % 2 == 0 else 0.7, 1000 + i) for i in range(len(rows))]
    rule = StopRule(max_new_tokens=args.tokens, open_fence=lay[0].open_fence)
    rt.generate(rows[:2], samp[:2], StopRule(max_new_tokens=1, open_fence=lay[0].open_fence))  # the examples' cache
    print(f"model {rt.info.name}, {torch.get_num_threads()} threads, {len(rows)} layout attempts of <= {args.tokens} "
          f"tokens; best of {args.repeats}")
    print(f"{'contender':<40} {'s':>7} {'ratio':>6}  same tokens")
    first_t, first_tokens = None, None
    for share in (False, True):
        for batch in (24, len(rows)):
            rt.share_decode = share
            best, got = float("inf"), None
            for _ in range(args.repeats):
                t = time.perf_counter()
                got = [g.tokens for i in range(0, len(rows), batch) for g in rt.generate(rows[i:i + batch], samp[i:i + batch], rule)]
                best = min(best, time.perf_counter() - t)
            first_t, first_tokens = first_t or best, first_tokens or got
            name = f"generate, batches of {batch}, prefix {'once' if share else 'per row'}"
            print(f"{name:<40} {best:7.1f} {best / first_t:5.2f}x  {got == first_tokens}")
    rt.share_decode = True

    tr = [build(it, proto, rt.tokenizer) for it in translation_items([f"s{i:03d}" for i in range(20)])]
    prompts, positions = [b.tokens for b in tr], [[b.positions["last"]] for b in tr]
    grouped = kv.length_groups
    first_t, ref = None, None
    for groups in (False, True):
        kv.length_groups = grouped if groups else (lambda lengths: [list(range(len(lengths)))])
        try:
            best, got = float("inf"), None
            for _ in range(args.repeats):
                t = time.perf_counter()
                got = rt.capture(prompts, positions).numpy()
                best = min(best, time.perf_counter() - t)
        finally:
            kv.length_groups = grouped
        first_t, ref = first_t or best, got if ref is None else ref
        scale = float(np.abs(ref).max())
        name = f"capture, {'groups of like length' if groups else 'one block'}"
        print(f"{name:<40} {best:7.1f} {best / first_t:5.2f}x  max diff {float(np.abs(got - ref).max()) / scale:.1e} of the scale")


if __name__ == "__main__":
    main()
