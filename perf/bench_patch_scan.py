"""Patching scans, ours against TransformerLens's own, side by side: node scans, path scans, many pairs.

    .venv/bin/python perf/bench_patch_scan.py [--models smollm2-135m-instruct gemma3-270m] [--layers 2] [--batch 64]

Both contenders run on the same TransformerBridge (the same weights, eager attention), the same prompts and the
same metric (a logit difference at the last token), and agree on every common site (the largest difference is
printed). Jobs, per model:

- `node`: every attention head's output (`blocks.{L}.attn.hook_z`) at every position of a 14-token prompt, over
  the first `--layers` layers. TransformerLens: `generic_activation_patch` with `layer_pos_head_vector_patch_setter`
  (what `get_act_patch_attn_head_out_by_pos` runs), one forward per site, as its docs call it. Ours:
  `Runtime.patch_scan(..., heads="all")`, `--batch` sites per forward, each continuing the corrupt prompt's KV
  cache before its position; once with logits at every position and once with `reads=[-1]` (the metric's one
  position: on Gemma's 262k vocabulary most of a forward is the logits).
- `path`: sender head (1, 0) into every later head's Q input. TransformerLens: `get_act_patch_direct_path` (one
  forward per receiver); ours: `Runtime.path_scan` (batched), with `reads=[-1]`. Refused by both on
  architectures whose attention output is normalised before the residual add (Gemma 3).
- `pairs`: 8 clean/corrupt pairs of one length, the residual stream (`blocks.{L}.hook_resid_pre`) at every layer
  and position. TransformerLens: `get_act_patch_resid_pre` on the batch of 8 pairs (one forward of 8 rows per
  site, the metric per pair); ours: the many-pair `patch_scan` with `reads=[-1]` (per-pair values and inference).

Timings are wall clock; the ratio per site (TransformerLens's seconds per site over ours) is what to read. Run it
on an otherwise idle machine (the 1-minute load average is printed at each job's start and end).
"""

from __future__ import annotations

import argparse
import os
import time

TEXT = "The Eiffel Tower is in the city of Paris, and the Colosseum is in the city of"
SWAPS = [" Rome", " London", " Berlin", " Madrid", " Vienna", " Tokyo", " Cairo", " Lima"]


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def _pair(rt, n_tok: int, swap: str):
    clean = rt.tokenizer(TEXT)["input_ids"][:n_tok]
    corrupt = list(clean)
    u = rt.tokenizer(swap)["input_ids"][-1]
    corrupt[4] = u
    t = clean[-1]
    return clean, corrupt, (lambda lg: lg[:, -1, t] - lg[:, -1, u])


def node(rt, args, rows):
    import pandas as pd
    import torch
    from transformer_lens import patching as tl_patching

    clean, corrupt, metric = _pair(rt, args.positions, SWAPS[0])
    layers = min(args.layers, rt.info.n_layers)
    load0 = _load()
    t0 = time.perf_counter()
    full = rt.patch_scan(corrupt, clean, metric, "blocks.{L}.attn.hook_z", heads="all", layers=range(layers),
                         batch_size=args.batch)
    t_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    kept = rt.patch_scan(corrupt, clean, metric, "blocks.{L}.attn.hook_z", heads="all", layers=range(layers),
                         batch_size=args.batch, reads=[-1])
    t_kept = time.perf_counter() - t0
    n = full.values.numel()
    _, clean_cache = rt.bridge.run_with_cache(torch.tensor([clean]), names_filter=lambda nm: nm.endswith("attn.hook_z"))
    heads = rt.bridge.cfg.n_heads
    index = pd.DataFrame([(la, p, h) for la in range(layers) for p in range(len(clean)) for h in range(heads)],
                         columns=["layer", "pos", "head"]).iloc[: args.tl_sites]
    t0 = time.perf_counter()
    theirs = tl_patching.generic_activation_patch(rt.bridge, torch.tensor([corrupt]), clean_cache,
                                                  lambda lg: metric(lg)[0],
                                                  patch_setter=tl_patching.layer_pos_head_vector_patch_setter,
                                                  activation_name="z", index_df=index).detach().cpu()
    t_tl = time.perf_counter() - t0
    at = tuple(torch.as_tensor(index[c].to_numpy().copy()) for c in ("layer", "pos", "head"))
    diff = max(float((full.values[at] - theirs).abs().max()), float((kept.values[at] - theirs).abs().max()))
    per_tl = t_tl / len(index)
    rows.append((rt.info.name, "node, logits everywhere", n, t_full, len(index), t_tl, per_tl / (t_full / n), diff, load0, _load()))
    rows.append((rt.info.name, "node, reads=[-1]", n, t_kept, len(index), t_tl, per_tl / (t_kept / n), diff, load0, _load()))


def path(rt, args, rows):
    import torch
    from transformer_lens import patching as tl_patching

    clean, corrupt, metric = _pair(rt, args.positions, SWAPS[0])
    load0 = _load()
    try:
        t0 = time.perf_counter()
        ours = rt.path_scan(corrupt, clean, metric, sender=(1, 0), receivers="q", batch_size=args.batch, reads=[-1])
        t_ours = time.perf_counter() - t0
    except ValueError as e:
        rows.append((rt.info.name, f"path: refused ({str(e)[:70]}...)", 0, 0.0, 0, 0.0, float("nan"), float("nan"), load0, _load()))
        return
    _, cc = rt.bridge.run_with_cache(torch.tensor([clean]))
    _, kc = rt.bridge.run_with_cache(torch.tensor([corrupt]))
    t0 = time.perf_counter()
    theirs = tl_patching.get_act_patch_direct_path(rt.bridge, torch.tensor([corrupt]), cc, kc, lambda lg: metric(lg)[0],
                                                   1, 0, "q", verbose=False).cpu()
    t_tl = time.perf_counter() - t0
    n = ours.values.numel()
    diff = float((ours.values[:, 0] - theirs[2:]).abs().max())
    rows.append((rt.info.name, "path (1,0) -> every later q", n, t_ours, n, t_tl, t_tl / t_ours, diff, load0, _load()))


def pairs(rt, args, rows):
    import torch
    from transformer_lens import patching as tl_patching

    made = [_pair(rt, args.positions, s) for s in SWAPS[: args.pairs]]
    cleans, corrupts = [m[0] for m in made], [m[1] for m in made]
    t = torch.tensor([c[-1] for c in cleans])
    u = torch.tensor([k[4] for k in corrupts])
    metrics = [m[2] for m in made]
    load0 = _load()
    t0 = time.perf_counter()
    ours = rt.patch_scan(corrupts, cleans, metrics, "blocks.{L}.hook_resid_pre", batch_size=args.batch, reads=[-1])
    t_ours = time.perf_counter() - t0
    _, clean_cache = rt.bridge.run_with_cache(torch.tensor(cleans), names_filter=lambda nm: nm.endswith("hook_resid_pre"))
    rows_ = torch.arange(len(cleans))

    def batch_metric(lg):  # TransformerLens's metric returns one number: we keep each pair's value in a list
        vals = lg[rows_, -1, t] - lg[rows_, -1, u]
        seen.append(vals.detach().cpu())
        return vals.mean()

    seen: list = []
    t0 = time.perf_counter()
    tl_patching.get_act_patch_resid_pre(rt.bridge, torch.tensor(corrupts), clean_cache, batch_metric)
    t_tl = time.perf_counter() - t0
    theirs = torch.stack(seen).reshape(rt.info.n_layers, len(cleans[0]), len(cleans)).permute(2, 0, 1)
    diff = float((ours.values - theirs).abs().max())
    n = ours.values[0].numel()
    rows.append((rt.info.name, f"{len(cleans)} pairs, resid_pre x every position", n, t_ours, n, t_tl, t_tl / t_ours, diff,
                 load0, _load()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gemma3-270m"])
    ap.add_argument("--jobs", nargs="+", default=["node", "path", "pairs"])
    ap.add_argument("--layers", type=int, default=2, help="node job: scan the first K layers")
    ap.add_argument("--tl-sites", type=int, default=40, help="node job: TransformerLens runs the first N of our sites")
    ap.add_argument("--batch", type=int, default=64, help="patched runs per forward (ours)")
    ap.add_argument("--positions", type=int, default=14, help="prompt length in tokens")
    ap.add_argument("--pairs", type=int, default=8)
    args = ap.parse_args()

    import torch

    from interp.runtime import Runtime

    rows: list[tuple] = []
    for name in args.models:
        rt = Runtime.load(name, device="cpu")
        rt.bridge  # noqa: B018 - booted before any timing
        print(f"# {rt.info.name}: {rt.info.n_layers} layers, {rt.bridge.cfg.n_heads} heads, vocabulary "
              f"{rt.bridge.cfg.d_vocab}; torch threads {torch.get_num_threads()}", flush=True)
        for job in args.jobs:
            {"node": node, "path": path, "pairs": pairs}[job](rt, args, rows)
            r = rows[-1]
            print(f"  {r[1]}: ours {r[2]} sites {r[3]:.1f} s, TransformerLens {r[4]} sites {r[5]:.1f} s, "
                  f"{r[6]:.1f}x per site, max diff {r[7]:.1e}", flush=True)
        del rt
    print("\n| model | job | ambench | TransformerLens | ratio per site | largest difference | load (start, end) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for m, job, n, t, n_tl, t_tl, ratio, diff, l0, l1 in rows:
        if n == 0:
            print(f"| {m} | {job} | - | - | - | - | {l0}, {l1} |")
            continue
        print(f"| {m} | {job} | {n} sites in {t:.1f} s ({1000 * t / n:.0f} ms/site) | {n_tl} sites in {t_tl:.1f} s "
              f"({1000 * t_tl / n_tl:.0f} ms/site) | {ratio:.1f}x | {diff:.1e} | {l0}, {l1} |")


if __name__ == "__main__":
    main()
