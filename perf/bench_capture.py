"""Capture memory: extra peak memory of 3-position capture vs the plain forward pass vs full run_with_cache.

    .venv/bin/python perf/bench_capture.py [--model smollm2-135m-instruct] [--batch 8] [--device cpu]

All variants run on the same left-padded batch (the first `--batch` translation prompts, few-shot
protocol, ~800-900 tokens each):
- `forward`: the model's forward pass, no hooks (logits of the last position only), the pass capture hooks into;
- `capture`: `Runtime.capture`, resid_pre of every block + final resid_post at 3 positions;
- `run_with_cache`: the bridge's `run_with_cache` over the same residual hooks, every position kept
  (eager attention, which the bridge forces, so its peak also holds the [heads, seq, seq] scores).

The measure is the peak of live tensor memory allocated during the call. On a CPU it comes from
torch's `MemTracker` (it follows every tensor the call allocates and frees, so it is deterministic;
peak RSS moves by ~10% between identical runs because of the allocator, which hides the effect
being measured). On CUDA it is `max_memory_allocated` minus the allocation before the call.
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    import torch

    from interp.prompts import POSITIONS, Protocol, build, translation_items
    from interp.runtime import Runtime

    rt = Runtime.load(args.model, device=args.device)
    proto = Protocol("few-shot", 1) if rt.info.chat else Protocol("completion", 1)
    built = [build(it, proto, rt.tokenizer) for it in translation_items()[: args.batch]]
    prompts = [b.tokens for b in built]
    positions = [[b.positions[k] for k in POSITIONS] for b in built]
    ids, mask, _ = rt.pad(prompts)
    names = rt.hook_names()

    def peak(fn) -> int:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            with torch.inference_mode():
                fn()
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - before
        from torch.distributed._tools.mem_tracker import MemTracker

        mt = MemTracker()
        with mt, torch.inference_mode():
            fn()
        snap = mt.get_tracker_snapshot("peak")
        return int(sum(stats.get("Total", 0) for stats in snap.values()))

    variants = {
        "forward": lambda: rt.model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1),
        "capture": lambda: rt.capture(prompts, positions),
        "run_with_cache": lambda: rt.bridge.run_with_cache(ids, attention_mask=mask, names_filter=lambda n: n in names,
                                                           logits_to_keep=1),
    }
    rows = {k: peak(fn) for k, fn in variants.items()}
    base = rows["forward"]
    print(f"model {args.model}, batch {args.batch}, padded {list(ids.shape)}, {int(mask.sum())} real tokens, device {args.device}")
    print(f"{'variant':<16} {'extra peak MiB':>15} {'vs forward':>11}")
    for v, b in rows.items():
        print(f"{v:<16} {b / 2**20:15.1f} {b / base:10.3f}x")
    print(f"capture adds {100 * (rows['capture'] - base) / base:+.2f}% over the plain forward pass; "
          f"run_with_cache adds {100 * (rows['run_with_cache'] - base) / base:+.2f}%")


if __name__ == "__main__":
    main()
