"""Head x position activation-patching scan: ours (`Runtime.patch_scan`) against TransformerLens's own, side by side.

    .venv/bin/python perf/bench_patch_scan.py [--model smollm2-135m-instruct] [--layers 30] [--batch 64]

The job (issue 30): patch every attention head's output (`blocks.{L}.attn.hook_z`) at every position of a
14-token prompt from a clean run into a corrupt one and record a logit difference; on SmolLM2 that is
30 layers x 9 heads x 14 positions = 3,780 patched runs. Both contenders run on the same TransformerBridge
(the same weights, eager attention) and the same clean/corrupt pair:
- `transformer_lens`: `transformer_lens.patching.get_act_patch_attn_head_out_by_pos`, one forward per site, called
  as its docs show (no inference mode added); with `--layers K` < all or `--tl-sites N`, `generic_activation_patch`
  with the same setter over the `index_df` of those sites (the first N of ours: TransformerLens runs one forward
  of the same size per site, so its time per site does not depend on which sites);
- `ambench`: `Runtime.patch_scan(..., heads="all", batch_size=--batch)` over the same layers, `--batch` sites per
  forward, each continuing the corrupt prompt's KV cache before its position.
Both scan the same sites and agree on them (the largest difference is printed). Each site is one forward of
the same size for TransformerLens, so its time is linear in the sites: `--layers 2` on a loaded 2-core machine
measures the ratio of the full scan in minutes. Timings are wall clock under whatever load the machine has
(printed); the ratio is what to read.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--layers", type=int, default=None, help="scan the first K layers (default: all)")
    ap.add_argument("--batch", type=int, default=64, help="patched runs per forward (ours)")
    ap.add_argument("--positions", type=int, default=14, help="prompt length in tokens")
    ap.add_argument("--tl-sites", type=int, default=None,
                    help="TransformerLens runs only the first N of the scanned sites (default: all); per-site ratio")
    args = ap.parse_args()

    import pandas as pd
    import torch
    from transformer_lens import patching as tl_patching

    from interp.runtime import Runtime

    rt = Runtime.load(args.model, device="cpu")
    text = "The Eiffel Tower is in the city of Paris, and the Colosseum is in the city of"
    clean = rt.tokenizer(text)["input_ids"][: args.positions]
    corrupt = list(clean)
    swap = rt.tokenizer(" Rome")["input_ids"][-1]
    corrupt[4] = swap  # one token changed: the scan shows where its information flows
    t, u = clean[-1], swap

    def metric(logits):
        return logits[:, -1, t] - logits[:, -1, u]

    n_layers, n_heads = rt.info.n_layers, rt.bridge.cfg.n_heads
    tl_layers = n_layers if args.layers is None else min(args.layers, n_layers)
    print(f"# {rt.info.name}: {n_layers} layers x {n_heads} heads x {len(clean)} positions = "
          f"{n_layers * n_heads * len(clean)} sites; scanning {tl_layers} layers; torch threads {torch.get_num_threads()}; "
          f"load {os.getloadavg()[0]:.1f} at the start")

    rt.bridge  # noqa: B018 - booted before any timing
    t0 = time.perf_counter()
    ours = rt.patch_scan(corrupt, clean, metric, "blocks.{L}.attn.hook_z", heads="all", layers=range(tl_layers),
                         batch_size=args.batch)
    t_ours = time.perf_counter() - t0
    n_ours = ours.values.numel()
    print(f"ambench: {n_ours} sites in {t_ours:.1f} s", flush=True)

    _, clean_cache = rt.bridge.run_with_cache(torch.tensor([clean]), names_filter=lambda n: n.endswith("attn.hook_z"))
    index = pd.DataFrame([(layer, p, h) for layer in range(tl_layers) for p in range(len(clean)) for h in range(n_heads)],
                         columns=["layer", "pos", "head"])
    if args.tl_sites is not None:
        index = index.iloc[: args.tl_sites].reset_index(drop=True)
    t0 = time.perf_counter()
    if tl_layers == n_layers and args.tl_sites is None:
        theirs = tl_patching.get_act_patch_attn_head_out_by_pos(rt.bridge, torch.tensor([corrupt]), clean_cache,
                                                                lambda lg: metric(lg)[0])
        flat = theirs.detach().reshape(-1)
    else:
        flat = tl_patching.generic_activation_patch(rt.bridge, torch.tensor([corrupt]), clean_cache, lambda lg: metric(lg)[0],
                                                    patch_setter=tl_patching.layer_pos_head_vector_patch_setter,
                                                    activation_name="z", index_df=index).detach()
    t_tl = time.perf_counter() - t0
    n_tl = len(index)
    # our values in the index's order ([layer, pos, head], as `index` lists them)
    mine = ours.values[tuple(torch.as_tensor(index[c].to_numpy().copy()) for c in ("layer", "pos", "head"))]
    diff = float((mine - flat.cpu()).abs().max())

    per_tl, per_ours = t_tl / n_tl, t_ours / n_ours
    print(f"{'contender':<18} {'sites':>6} {'seconds':>9} {'ms/site':>9}")
    print(f"{'transformer_lens':<18} {n_tl:>6} {t_tl:>9.1f} {1000 * per_tl:>9.2f}")
    print(f"{'ambench':<18} {n_ours:>6} {t_ours:>9.1f} {1000 * per_ours:>9.2f}")
    same = "the same sites" if n_tl == n_ours else f"per site (TransformerLens on the first {n_tl} of our {n_ours})"
    print(f"ratio: ambench {per_tl / per_ours:.1f}x faster {same}; "
          f"largest difference on the common sites {diff:.2e}; load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
