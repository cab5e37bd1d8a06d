"""Path patching: one sender head's clean output reaching one receiver at a time, every other reader left corrupt.

`path_scan(rt, corrupt, clean, metric, sender=(L, H), receivers="q")` is TransformerLens's
`patching.get_act_patch_direct_path` (Wang et al. 2022's path patching, the edge A -> B): the sender's
clean-minus-corrupt write, `(z_clean - z_corrupt)[:, :, H] @ W_O[H]`, is added at every position to one receiver's
own input, while every other component still reads the corrupt run. Receivers:

- `"q"`, `"k"`, `"v"`: each head of every later layer, through its own pre-norm copy of the residual stream (the
  bridge's split Q/K/V input, `blocks.{l}.attn.hook_{q,k,v}_input`); the receiver's changed output then flows on as
  in the corrupt run. K and V are refused on grouped-query models (a key/value head serves several query heads, so
  "one head's K input" is not defined), as TransformerLens refuses them.
- `"resid"`: the residual stream entering each later block (`blocks.{l}.hook_resid_pre`) and the one the
  unembedding reads (`blocks.{n-1}.hook_resid_post`, labelled layer n_layers): the sender's direct path to
  everything from that layer on, skipping the blocks between.

**Batched.** Each receiver is one row of a batch of copies of the corrupt prompt, and a row's hook adds the
sender's write to its own receiver only, so one forward does `batch_size` receivers (TransformerLens: one forward
per receiver). Values equal TransformerLens's to float rounding (tests/interp/test_paths.py). N pairs give a
`PairScan` with per-receiver inference, as `patch_scan` does.

    >>> scan = rt.path_scan(corrupt, clean, logit_diff, sender=(0, 1), receivers="q")
    >>> scan.values.shape        # [later layer, 1, head]: the metric with the path into that head patched
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from interp.runtime.forward import batch_of, bounded_rows
from interp.runtime.patching import PairScan, Scan, _many, _one_metric, _pairs, _reads, _values

if TYPE_CHECKING:
    import torch

RECEIVERS = ("q", "k", "v", "resid")
#: the position label of a path scan's one column: the sender's write is added at every position
EVERY = "every"


def _check(rt: Any, sender: Any, receivers: Any, batch_size: Any) -> tuple[int, int]:
    if receivers not in RECEIVERS:
        raise ValueError(f"receivers must be one of {', '.join(map(repr, RECEIVERS))}, not {receivers!r}")
    if (not isinstance(sender, (tuple, list)) or len(sender) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) for x in sender)):
        raise TypeError(f"sender must be a (layer, head) pair of ints, not {sender!r}"[:200])
    layer, head = sender
    n_layers, n_heads = rt.info.n_layers, rt.bridge.cfg.n_heads
    if not 0 <= layer < n_layers - (0 if receivers == "resid" else 1):
        raise ValueError(f"sender layer must lie in 0..{n_layers - (1 if receivers == 'resid' else 2)} (a later "
                         f"layer must receive), not {layer}")
    if not 0 <= head < n_heads:
        raise ValueError(f"sender head must lie in 0..{n_heads - 1}, not {head}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer (receivers per forward), not {batch_size!r}")
    if receivers != "resid":
        from transformer_lens import patching as tl_patching

        tl_patching._check_direct_path_support(rt.bridge, [layer], receivers)
    return layer, head


def _sites(rt: Any, layer: int, receivers: str) -> tuple[list[str], list[int], list[int] | None]:
    n = rt.info.n_layers
    if receivers == "resid":
        later = list(range(layer + 1, n))
        return [f"blocks.{l}.hook_resid_pre" for l in later] + [f"blocks.{n - 1}.hook_resid_post"], later + [n], None
    later = list(range(layer + 1, n))
    return [f"blocks.{l}.attn.hook_{receivers}_input" for l in later], later, list(range(rt.bridge.cfg.n_heads))


def _adder(delta: torch.Tensor, rows: list[int], heads: list[int] | None) -> Any:
    """A hook adding `delta` [pos, d_model] to rows `rows` (at head heads[i] of a split Q/K/V input)."""
    import torch

    r = torch.tensor(rows, dtype=torch.long)
    h = None if heads is None else torch.tensor(heads, dtype=torch.long)

    def fn(act: torch.Tensor, hook: Any = None) -> torch.Tensor:
        out = act.clone()
        d = delta.to(act.device, act.dtype)
        rr = r.to(act.device)
        if h is None:
            out[rr] += d
        else:
            out[rr, :, h.to(act.device)] += d
        return out

    return fn


def _path_one(rt: Any, corrupt: list[int], clean: list[int], metric: Any, layer: int, head: int, receivers: str,
              batch_size: int, reads: Any = None) -> tuple[torch.Tensor, float, float]:
    """One pair: values [site, 1, head or 1], the corrupt and the clean metric."""
    import torch
    from transformer_lens import patching as tl_patching

    z = f"blocks.{layer}.attn.hook_z"
    names, _, hs = _sites(rt, layer, receivers)
    cb, kb = batch_of(rt, [corrupt]), batch_of(rt, [clean])
    bridge = rt.bridge
    keep = _reads(reads, len(corrupt))
    extra = {} if keep is None else {"logits_to_keep": torch.tensor(keep)}
    with torch.inference_mode():
        clean_logits, clean_cache = bridge.run_with_cache(kb.ids, names_filter=[z])
        base_logits, base_cache = bridge.run_with_cache(cb.ids, names_filter=[z])
        if keep is not None:
            clean_logits, base_logits = clean_logits[:, keep], base_logits[:, keep]
        w_o = bridge.blocks[layer].attn.W_O[head]
        delta = (clean_cache[z][0, :, head] @ w_o - base_cache[z][0, :, head] @ w_o)  # [pos, d_model]
        baseline = float(_values(metric, base_logits, 1)[0])
        clean_value = float(_values(metric, clean_logits, 1)[0])
        sites = [(i, k) for i in range(len(names)) for k in (range(len(hs)) if hs is not None else [None])]
        out = torch.empty((len(names), 1, len(hs) if hs is not None else 1), dtype=torch.float32)
        ctx = tl_patching._split_qkv_input(bridge) if receivers != "resid" else _nothing()
        with ctx:
            for start in range(0, len(sites), batch_size):
                chunk = sites[start:start + batch_size]
                by_name: dict[int, tuple[list[int], list[int]]] = {}
                for row, (i, k) in enumerate(chunk):
                    rows, heads = by_name.setdefault(i, ([], []))
                    rows.append(row)
                    heads.append(hs[k] if k is not None else 0)
                hooks = [(names[i], _adder(delta, r, h if hs is not None else None)) for i, (r, h) in by_name.items()]
                with rt._attached(hooks, "bridge"):
                    logits = bridge(cb.ids.repeat(len(chunk), 1), **extra)
                values = _values(metric, logits, len(chunk)).detach().float().cpu()
                for row, (i, k) in enumerate(chunk):
                    out[i, 0, k or 0] = values[row]
    return out, baseline, clean_value


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def path_scan(rt: Any, corrupt: Any, clean: Any, metric: Any, sender: tuple[int, int], receivers: str = "q",
              batch_size: int = 64, groups: Sequence[Any] | None = None, progress: bool = False,
              reads: Sequence[int] | None = None) -> Scan | PairScan:
    """Path patching from `sender` = (layer, head) into every later receiver (see the module).

    Args:
        corrupt, clean: one prompt each (texts or token lists of one length), or N of each (a `PairScan`).
        metric: logits [rows, seq, vocab] -> one value per row; with N pairs one for all or a list of N.
        sender: the (layer, head) whose clean-minus-corrupt output is sent.
        receivers: "q", "k" or "v" (every head of every later layer) or "resid" (every later layer's residual
            stream and the unembedding's input).
        batch_size: receivers per forward.
        groups: with N pairs, one label per pair (intervals and sign flips follow them).
        reads: the token indices whose logits the metric reads (as in `patch_scan`): logits there only.

    Returns a `Scan` whose `names` are the receivers' hook names, `layers` their layers, `positions` the one
    label "every" (the write is added at every position) and `heads` the receiving heads (None for "resid").
    """
    bounded_rows(rt, corrupt, "corrupt")  # before the bridge boots (issue 42's attack: 0.9 s and 80 MB before the refusal)
    bounded_rows(rt, clean, "clean")
    layer, head = _check(rt, sender, receivers, batch_size)
    names, layer_of, hs = _sites(rt, layer, receivers)
    pairs = _pairs(rt, corrupt, clean, metric, names, [-1], groups)
    if pairs is None:
        if groups is not None:
            raise ValueError("groups= labels the pairs of a many-pair scan; one pair has no groups")
        cb, kb = batch_of(rt, corrupt), batch_of(rt, clean)
        if len(cb.offsets) != 1 or len(kb.offsets) != 1 or cb.lengths != kb.lengths:
            raise ValueError(f"clean and corrupt prompts must be one prompt each, of the same length "
                             f"({kb.lengths} vs {cb.lengths} tokens)")
        _reads(reads, cb.lengths[0])
        out, baseline, clean_value = _path_one(rt, cb.ids[0].tolist(), kb.ids[0].tolist(), _one_metric(metric), layer,
                                               head, receivers, batch_size, reads)
        return Scan(out if hs is not None else out[..., 0], names, [EVERY], hs, baseline, clean_value,
                    f"path from {layer}.{head} into {receivers}", layer_of)
    specs, _ = pairs
    if any(isinstance(s.clean, dict) for s in specs):
        raise TypeError("path_scan takes clean prompts (texts or token lists), not caches")
    for i, spec in enumerate(specs):
        _reads(reads, len(spec.corrupt), i)
    scan = _many(rt, ([s for s in specs], [EVERY]), [], layer_of, None, f"path from {layer}.{head} into {receivers}",
                 progress, None, groups, runner=lambda spec: _path_one(rt, spec.corrupt, spec.clean, spec.metric, layer,
                                                                       head, receivers, batch_size, reads))
    scan.names, scan.heads = names, hs
    if hs is None:
        scan.values = scan.values[..., 0] if scan.values.dim() == 4 else scan.values
    return scan


__all__ = ["RECEIVERS", "path_scan"]
