"""Activation patching from Python: any hook name by layer, head and position, exact scans batched, attribution patching.

`patch_scan(rt, corrupt, clean, metric, "blocks.{L}.attn.hook_z", heads="all")` is TransformerLens's
`patching.get_act_patch_attn_head_out_by_pos` for any hook name: for every (layer, position[, head]) site it
writes the clean run's activation into the corrupt run there and records `metric(logits)`. The promises:

- **Many patches per forward, and only the tokens a patch can change.** Each site is one row of a batch of
  copies of the corrupt prompt; a row's hook writes its own site only, so one forward of `batch_size` rows does
  `batch_size` patched runs (TransformerLens runs one forward per site). A patch at position p cannot change
  the tokens before p, so a forward whose rows patch positions >= p continues the corrupt run's KV cache of
  its first p tokens. A row's
  value is the one it gets alone, up to float rounding (tested against one site at a time and against
  `transformer_lens.patching` on the same weights), so batching is invisible to results.
- **Attribution patching, checked against the exact scan.** `attribution_scan` does one forward and one
  backward on the corrupt prompt and estimates every site's effect as grad . (clean - corrupt) summed over
  the site's features (Nanda 2023; Syed et al. 2023): a first-order Taylor approximation. Where the metric is
  linear in the patched activation the approximation is exact, and the tests check it is on such a case
  (the final norm's output and a logit difference) and fails for a broken sign; elsewhere it is a fast first
  pass to choose which sites to patch exactly.
- **Effects, not only values.** A `Scan` carries the unpatched corrupt metric (`baseline`) and the clean
  metric, so `effect` and `normalized` (0 = corrupt, 1 = clean) need no second call.

The metric takes logits [rows, seq, vocab] and returns one value per row ([rows]); the prompts are one clean
and one corrupt prompt of the same length (positions are indices into them, negative from the end).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from interp.runtime.forward import Recorder, batch_of, logits_of, position_axis

if TYPE_CHECKING:
    import pandas as pd
    import torch
    from jaxtyping import Float

Metric = Callable[..., Any]
#: effects within this share of a pair's metric size are float rounding (PairScan.settled): 5x the largest
#: batched-vs-single difference measured (2e-6 of the metric's size on SmolLM2 and Gemma 3)
ROUNDING = 1e-5


@dataclass
class Scan:
    """A patching scan: `values[site, pos]` or `values[site, pos, head]` of the metric with that site patched.

    Example::

        scan = rt.patch_scan(corrupt, clean, logit_diff, "blocks.{L}.hook_resid_pre")
        scan.effect, scan.normalized(), scan.to_frame()
    """

    values: Float[torch.Tensor, "site pos *head"]  #: metric of each patched run (attribution: baseline + estimate)
    names: list[str]  #: hook name of each site row
    positions: list[int]  #: token index of each pos column (into the prompt, from 0)
    heads: list[int] | None  #: head of each head column, None for whole-position patches
    baseline: float  #: metric of the corrupt run, nothing patched
    clean: float  #: metric of the clean run
    method: str = "exact"  #: exact | attribution
    layers: list[int] | None = field(default=None)  #: the layer of each site row when `names` came from a template

    @property
    def effect(self) -> Float[torch.Tensor, "site pos *head"]:
        """values - baseline: what patching the site moved the metric by."""
        return self.values - self.baseline

    def normalized(self) -> Float[torch.Tensor, "site pos *head"]:
        """(values - baseline) / (clean - baseline): 0 = the corrupt run, 1 = the clean run."""
        return self.effect / (self.clean - self.baseline)

    def to_frame(self) -> pd.DataFrame:
        """One row per site: name, layer, pos, head (if any), value, effect."""
        import pandas as pd

        rows = []
        for i, name in enumerate(self.names):
            for j, p in enumerate(self.positions):
                for k, h in enumerate(self.heads if self.heads is not None else [None]):
                    v = float(self.values[i, j, k] if self.heads is not None else self.values[i, j])
                    row = {"name": name, "layer": self.layers[i] if self.layers else None, "pos": p}
                    if self.heads is not None:
                        row["head"] = h
                    rows.append({**row, "value": v, "effect": v - self.baseline, "method": self.method})
        return pd.DataFrame(rows)


@dataclass
class PairScan:
    """A scan over N clean/corrupt pairs: per-pair values and, per site, the mean effect with its inference.

    `values[pair, site, pos]` or `[pair, site, pos, head]`; `baseline[pair]` and `clean[pair]` are each pair's
    unpatched corrupt and clean metrics. `effect` is per pair (values - baseline); `summary()` / `to_frame()` give
    per site the mean effect over pairs, a grouped interval, a sign-flip p against "no effect" and a BH q
    (`interp.pair_effects`: estimand, interval and test).

    Example::

        many = rt.patch_scan(corrupts, cleans, metrics, "blocks.{L}.hook_resid_pre", positions=[-1], groups=templates)
        many.to_frame(normalized=True), many.pair(0).values, many.to_frame(per_pair=True)
    """

    values: Float[torch.Tensor, "pair site pos *head"]
    names: list[str]
    positions: list[int]  #: position labels: the indices given (negative from each end), or j of per-pair lists
    heads: list[int] | None
    baseline: Float[torch.Tensor, " pair"]
    clean: Float[torch.Tensor, " pair"]
    method: str = "exact"
    layers: list[int] | None = None
    groups: list[Any] | None = None  #: each pair's group label (None: every pair its own group)
    pair_positions: list[list[int]] = field(default_factory=list)  #: each pair's token index of each pos column

    @property
    def n_pairs(self) -> int:
        return int(self.values.shape[0])

    def _shape(self, t: torch.Tensor) -> torch.Tensor:
        return t.reshape((-1,) + (1,) * (self.values.dim() - 1))

    @property
    def effect(self) -> Float[torch.Tensor, "pair site pos *head"]:
        """values - baseline, per pair."""
        return self.values - self._shape(self.baseline)

    def normalized(self) -> Float[torch.Tensor, "pair site pos *head"]:
        """Per pair (values - baseline) / (clean - baseline): 0 = the corrupt run, 1 = the clean run."""
        return self.effect / self._shape(self.clean - self.baseline)

    def pair(self, i: int) -> Scan:
        """Pair i's own `Scan`."""
        return Scan(self.values[i], self.names, self.pair_positions[i] if self.pair_positions else self.positions,
                    self.heads, float(self.baseline[i]), float(self.clean[i]), self.method, self.layers)

    def settled(self) -> Float[torch.Tensor, "pair site pos *head"]:
        """`effect` with float rounding set to 0: an effect within ROUNDING x max(1, |corrupt|, |clean|) of its pair's
        metric is 0, so no test reads the last bits of a batched forward as an effect (batched and one-at-a-time
        scans differ by up to ~2e-6 of the metric's size, perf/bench_patch_scan.py)."""
        import torch

        scale = torch.maximum(self.baseline.abs(), torch.nan_to_num(self.clean, nan=0.0).abs()).clamp(min=1.0)
        e = self.effect
        return torch.where(e.abs() <= ROUNDING * self._shape(scale), torch.zeros_like(e), e)

    def summary(self, level: float = 0.95, normalized: bool = False, n_flips: int = 9999, seed: int = 0) -> Any:
        """`interp.pair_effects.pair_inference` of every site's per-pair effects, rounding set to 0 (`settled`);
        normalized: of those effects / (clean - corrupt)."""
        from interp.pair_effects import pair_inference

        e = self.settled()
        if normalized:
            e = e / self._shape(self.clean - self.baseline)
        return pair_inference(e.reshape(self.n_pairs, -1).double().numpy(), self.groups, level, n_flips, seed)

    def to_frame(self, level: float = 0.95, normalized: bool = False, n_flips: int = 9999, seed: int = 0,
                 per_pair: bool = False) -> pd.DataFrame:
        """One row per site: name, layer, pos, head (if any), mean_effect, lo, hi, p, q, n_pairs, n_groups, the
        design's words (grouping, flips, min_p, level, seed); per_pair=True: one row per (pair, site) instead."""
        import pandas as pd

        if per_pair:
            frames = [self.pair(i).to_frame().assign(pair=i, group=None if self.groups is None else self.groups[i])
                      for i in range(self.n_pairs)]
            return pd.concat(frames, ignore_index=True)
        inf = self.summary(level, normalized, n_flips, seed)
        rows, k = [], 0
        for i, name in enumerate(self.names):
            for p in self.positions:
                for h in (self.heads if self.heads is not None else [None]):
                    row = {"name": name, "layer": self.layers[i] if self.layers else None, "pos": p}
                    if self.heads is not None:
                        row["head"] = h
                    rows.append({**row, "mean_effect": inf.mean[k], "lo": inf.lo[k], "hi": inf.hi[k], "p": inf.p[k],
                                 "q": inf.q[k], "n_pairs": inf.n_pairs, "n_groups": inf.n_groups,
                                 "normalized": normalized, "grouping": inf.grouping, "flips": inf.flips,
                                 "min_p": inf.min_p, "level": level, "seed": seed, "method": self.method})
                    k += 1
        return pd.DataFrame(rows)


@dataclass
class _PairSpec:
    corrupt: list[int]
    clean: list[int] | dict[str, torch.Tensor]
    metric: Metric
    positions: list[int] | None


def _one_metric(metric: Any) -> Metric:
    if not callable(metric):
        raise TypeError(f"metric must be a function of the logits returning one value per row, not "
                        f"{type(metric).__name__} (a list of metrics goes with a list of pairs)")
    return metric


def _pairs(rt: Any, corrupt: Any, clean: Any, metric: Any, names: Sequence[str], positions: Any,
           groups: Any) -> tuple[list[_PairSpec], list[int]] | None:
    """The N pairs of a many-pair call (with the position labels), or None for a one-pair call. Every argument is
    checked here, before any forward."""
    from interp.runtime.forward import bounded_rows

    rows = bounded_rows(rt, corrupt, "corrupt")
    cached = isinstance(clean, (list, tuple)) and len(clean) > 0 and all(isinstance(c, dict) for c in clean)
    clean_rows = None if cached or isinstance(clean, dict) else bounded_rows(rt, clean, "clean")
    if len(rows) == 1 and not (cached and len(clean) > 1) and not (clean_rows is not None and len(clean_rows) > 1):
        return None
    n = len(rows)
    if cached:
        cleans: list[Any] = list(clean)
    elif isinstance(clean, dict):
        raise ValueError(f"{n} corrupt prompts need {n} clean ones (or a list of {n} caches), not one cache")
    else:
        cleans = clean_rows
    if len(cleans) != n:
        raise ValueError(f"clean and corrupt must pair up: {n} corrupt prompts and {len(cleans)} clean ones")
    for i, (c, k) in enumerate(zip(rows, cleans)):
        if not isinstance(k, dict) and len(c) != len(k):
            raise ValueError(f"pair {i}: the clean prompt has {len(k)} tokens and the corrupt one {len(c)}; a pair's "
                             "prompts must have the same length (pairs may differ from each other)")
    if callable(metric):
        metrics = [metric] * n
    elif isinstance(metric, (list, tuple)) and len(metric) == n and all(callable(m) for m in metric):
        metrics = list(metric)
    else:
        raise TypeError(f"metric must be one function of the logits or a list of {n} (one per pair), not "
                        f"{type(metric).__name__}" + (f" of length {len(metric)}" if hasattr(metric, "__len__") else ""))
    lengths = [len(c) for c in rows]
    if positions is None:
        if len(set(lengths)) != 1:
            raise ValueError(f"the pairs differ in length ({min(lengths)}..{max(lengths)} tokens): name the positions "
                             "(negative indices count from each prompt's end, or give one list per pair)")
        per, labels = [None] * n, list(range(lengths[0]))
    else:
        if isinstance(positions, (str, bytes)) or not hasattr(positions, "__iter__"):
            raise TypeError(f"positions must be a list of token indices or one list per pair, not {positions!r}"[:200])
        positions = list(positions)
        if positions and all(isinstance(p, (list, tuple)) for p in positions):
            if len(positions) != n or len({len(p) for p in positions}) != 1:
                raise ValueError(f"positions per pair: {n} lists of one length (one per pair), got "
                                 f"{len(positions)} lists of lengths {sorted({len(p) for p in positions})}")
            per, labels = [list(p) for p in positions], list(range(len(positions[0])))
        else:
            per, labels = [list(positions)] * n, list(positions)
        for i, (pp, m) in enumerate(zip(per, lengths)):
            if any(isinstance(p, bool) or not isinstance(p, int) for p in pp):
                raise TypeError(f"positions must be token indices (ints), not {pp!r}"[:200])
            if any(not -m <= p < m for p in pp):
                raise ValueError(f"pair {i} has {m} tokens: positions {pp} must lie in -{m}..{m - 1}"[:200])
    if groups is not None:
        from interp.pair_effects import group_index

        group_index(groups, n)
    return [_PairSpec(c, k, m, p) for c, k, m, p in zip(rows, cleans, metrics, per)], labels


def _prepare(rt: Any, spec: _PairSpec, names: Sequence[str], i: int) -> tuple[Any, dict[str, torch.Tensor], Any]:
    """A pair's corrupt batch, clean activations of `names` and clean logits (None from a cache)."""
    try:
        cb, cache, clean_logits = _pair(rt, [spec.corrupt], spec.clean if isinstance(spec.clean, dict) else [spec.clean],
                                        names)
        _check_cached(cache, names, cb.lengths[0])
    except ValueError as e:
        raise ValueError(f"pair {i}: {e}") from None
    return cb, cache, clean_logits


def _many(rt: Any, prepared: tuple[list[_PairSpec], list[int]], names: list[str], layer_of: list[int] | None,
          heads: Any, method: str, progress: bool, scan: Callable[..., tuple[torch.Tensor, float, float]] | None,
          groups: Sequence[Any] | None = None,
          runner: Callable[[_PairSpec], tuple[torch.Tensor, float, float]] | None = None) -> PairScan:
    """Run `scan` on every pair (each batched over its sites) and stack the results into a PairScan; `runner(spec)`
    instead runs a pair whole (path patching), its values kept as it returns them."""
    import torch

    specs, labels = prepared
    # given caches are checked before any forward; a clean prompt's activations are computed when its pair runs
    # (N pairs' caches of every name would not fit in memory at once on a large model)
    for i, spec in enumerate(specs):
        if isinstance(spec.clean, dict):
            missing = [n for n in names if n not in spec.clean]
            if missing:
                raise ValueError(f"pair {i}: the clean cache lacks {missing}: cache them with run_with_cache(clean, names=...)")
            try:
                _check_cached(spec.clean, names, len(spec.corrupt))
            except ValueError as e:
                raise ValueError(f"pair {i}: {e}") from None
    it = range(len(specs))
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc=f"{method} scan", unit="pair")
    values, base, clean, where, hs = [], [], [], [], None
    for i in it:
        if runner is not None:
            out, b, c = runner(specs[i])
            values.append(out)
            base.append(b)
            clean.append(c)
            where.append(list(labels))
            continue
        cb, cache, clean_logits = _prepare(rt, specs[i], names, i)
        pos, h = _grid(names, cache, cb.lengths[0], specs[i].positions, heads)
        if i and h != hs:
            raise ValueError(f"pair {i}'s sites have other heads than pair 0's: scan them separately")
        hs = h
        out, b, c = scan(cb, cache, clean_logits, specs[i].metric, pos, hs)
        del cache
        values.append(out if hs is not None else out[..., 0])
        base.append(b)
        clean.append(c)
        where.append(pos)
    return PairScan(torch.stack(values), names, labels, hs, torch.tensor(base), torch.tensor(clean), method, layer_of,
                    None if groups is None else list(groups), where)


def site_names(rt: Any, names: str | Sequence[str], layers: Sequence[int] | None = None) -> tuple[list[str], list[int] | None]:
    """Hook names from a template with `{L}` (expanded over `layers`, default every block) or a list of names."""
    if isinstance(names, str) and "{L}" in names:
        layers = list(range(rt.info.n_layers)) if layers is None else list(layers)
        if any(not 0 <= layer < rt.info.n_layers for layer in layers):
            raise ValueError(f"layers must lie in 0..{rt.info.n_layers - 1}")
        out = [names.replace("{L}", str(layer)) for layer in layers]
        if not out:
            raise ValueError("layers= is empty: no site to scan")
        rt.check_names(out)
        return out, layers
    if layers is not None:
        raise ValueError("layers= goes with a name template containing {L}, e.g. 'blocks.{L}.attn.hook_z'")
    if isinstance(names, (bytes, dict)) or not (isinstance(names, str) or hasattr(names, "__iter__")):
        raise TypeError(f"names must be a hook name, a template with {{L}} or a list of names, not {type(names).__name__}")
    out = [names] if isinstance(names, str) else list(names)
    if not out or not all(isinstance(n, str) for n in out):
        raise TypeError(f"names must be a hook name, a template with {{L}} or a non-empty list of names, not {names!r}"[:200])
    rt.check_names(out)
    return out, None


def _values(metric: Metric, logits: torch.Tensor, rows: int) -> Float[torch.Tensor, " rows"]:
    import torch

    got = metric(logits)
    if got is None or isinstance(got, (str, bytes, dict)):
        raise TypeError(f"the metric returned {type(got).__name__}: it must return one number per row (a tensor or "
                        f"array of shape [{rows}])")
    try:
        out = torch.as_tensor(got)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"the metric returned {type(got).__name__}, not one number per row (shape [{rows}])") from None
    if out.dim() != 1 or out.shape[0] != rows:
        raise ValueError(f"the metric must return one value per row (shape [{rows}]), got shape {tuple(out.shape)}")
    return out


def _pair(rt: Any, corrupt: Any, clean: Any, names: Sequence[str]) -> tuple[Any, dict[str, torch.Tensor], float]:
    """The corrupt batch (one row), the clean activations of `names` (full, on the model's device) and the clean
    logits. `clean` is the clean prompt, or a cache from `run_with_cache(clean, names)` (its logits then unknown)."""
    cb = batch_of(rt, corrupt)
    if len(cb.offsets) != 1:
        raise ValueError("patching takes one corrupt prompt (each patched run is one row of a batch of its copies)")
    if isinstance(clean, dict):
        missing = [n for n in names if n not in clean]
        if missing:
            raise ValueError(f"the clean cache lacks {missing}: cache them with run_with_cache(clean, names=...)")
        return cb, {n: clean[n] for n in names}, None
    kb = batch_of(rt, clean)
    if len(kb.offsets) != 1 or kb.lengths != cb.lengths:
        raise ValueError(f"clean and corrupt prompts must be one prompt each, of the same length "
                         f"({kb.lengths} vs {cb.lengths} tokens)")
    rec = Recorder(rt, names, None, device=None)
    logits = logits_of(rt, kb, rec.hooks(), rt._path(rec.hooks()))
    return cb, rec.result(), logits


def _check_cached(cache: dict[str, torch.Tensor], names: Sequence[str], n_tokens: int) -> None:
    for n in names:
        t = cache[n]
        if t.shape[0] != 1 or t.shape[position_axis(n)] != n_tokens:
            raise ValueError(f"the clean activation of {n} has shape {tuple(t.shape)}: cache one prompt of {n_tokens} "
                             "tokens at every position (positions=None)")


def _grid(names: Sequence[str], cache: dict[str, torch.Tensor], n_tokens: int, positions: Sequence[int] | None,
          heads: Sequence[int] | str | None) -> tuple[list[int], list[int] | None]:
    if positions is not None and any(isinstance(p, bool) or not isinstance(p, int) for p in positions):
        raise TypeError(f"positions must be token indices (ints) or None (every position), not {list(positions)!r}"[:200])
    pos = list(range(n_tokens)) if positions is None else [p + n_tokens if p < 0 else p for p in positions]
    if any(not 0 <= p < n_tokens for p in pos):
        raise ValueError(f"positions must lie in 0..{n_tokens - 1} (or count back from the end)")
    if heads is None:
        return pos, None
    counts = set()
    for n in names:
        t = cache[n]
        if t.dim() != 4:
            raise ValueError(f"{n} has no head axis (shape {tuple(t.shape)}): patch it by position (heads=None)")
        counts.add(t.shape[1] if position_axis(n) == 2 else t.shape[2])
    if len(counts) != 1:
        raise ValueError(f"the sites have different head counts {sorted(counts)}: scan them separately")
    n_heads = counts.pop()
    if isinstance(heads, str) and heads != "all":
        raise ValueError(f"heads must be 'all', None (whole positions) or a list of head indices, not {heads!r}")
    hs = list(range(n_heads)) if isinstance(heads, str) else list(heads)
    if any(isinstance(h, bool) or not isinstance(h, int) for h in hs):
        raise TypeError(f"heads must be head indices (ints), not {hs!r}"[:200])
    if any(not 0 <= h < n_heads for h in hs):
        raise ValueError(f"heads must lie in 0..{n_heads - 1}")
    return pos, hs


def _by_position(t: torch.Tensor, name: str) -> torch.Tensor:
    """A view with positions on axis 1 ([batch, pos, ...]): attention patterns [b, head, q, k] -> [b, q, head, k]."""
    return t.transpose(1, 2) if position_axis(name) == 2 else t


def patch_hook(donor: torch.Tensor, name: str, rows: Sequence[int], cols: Sequence[int],
               heads: Sequence[int] | None, first: int = 0) -> Callable[..., Any]:
    """A hook writing `donor`'s values (the clean activation, [1, ...]) into row rows[i] at position cols[i] (and
    head heads[i]); every other row and position keeps its own values. `first` is the position of the pass's
    first column (a pass that continues a KV cache of the first `first` tokens)."""
    import torch

    r = torch.tensor(list(rows), dtype=torch.long)
    c = torch.tensor(list(cols), dtype=torch.long)
    h = None if heads is None else torch.tensor(list(heads), dtype=torch.long)
    src = _by_position(donor, name)[0]

    def fn(act: torch.Tensor, hook: Any = None) -> torch.Tensor:
        out = act.clone()
        view = _by_position(out, name)
        rr, cc = r.to(act.device), c.to(act.device)
        s = src.to(act.device, act.dtype)
        if h is None:
            view[rr, cc - first] = s[cc]
        else:
            hh = h.to(act.device)
            view[rr, cc - first, hh] = s[cc, hh]
        return out

    return fn


def _extend(rt: Any, ids: torch.Tensor, first: int, cache: Any, path: str,
            keep: Sequence[int] | None = None) -> tuple[torch.Tensor, Any]:
    """Logits of every column of `ids` (tokens first.. of each row, unpadded) on top of `cache` (the first `first`
    tokens), and the grown cache; `keep` (column indices into `ids`): logits of those columns only."""
    import torch

    rows, width = ids.shape
    mask = torch.ones((rows, first + width), dtype=torch.long, device=ids.device)
    pos = torch.arange(first, first + width, device=ids.device)[None].expand(rows, -1)
    extra = {} if keep is None or not rt._logits_to_keep else {"logits_to_keep": torch.tensor(list(keep), device=ids.device)}
    if path == "bridge":
        logits, cache = rt.bridge(ids, return_type="logits_and_cache", attention_mask=mask, past_key_values=cache,
                                  use_cache=True, position_ids=pos, **extra)
    else:
        out = rt.model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True, position_ids=pos, **extra)
        logits, cache = out.logits, out.past_key_values
    if keep is not None and not extra:  # a model without logits_to_keep: every column computed, the kept ones read
        logits = logits[:, list(keep)]
    return logits, cache


def _first_tokens(cache: Any, p: int, rows: int) -> Any:
    """A copy of a batch-1 KV cache cut to its first `p` tokens and repeated for `rows` rows: the corrupt prompt's
    cache before a patched position (the same keys and values as computing those p tokens alone: causal)."""
    import copy

    layers = getattr(cache, "layers", None)
    if layers is None or any("Sliding" in type(layer).__name__ for layer in layers):
        raise ValueError(f"cannot cut a {type(cache).__name__}; the runtime passes a full DynamicCache")
    out = copy.copy(cache)
    out.layers = []
    for layer in layers:
        new = copy.copy(layer)
        if getattr(layer, "keys", None) is not None and getattr(layer, "is_initialized", True):
            new.keys = layer.keys[:, :, :p].repeat(rows, 1, 1, 1)
            new.values = layer.values[:, :, :p].repeat(rows, 1, 1, 1)
        out.layers.append(new)
    return out


def _scan_one(rt: Any, cb: Any, cache: dict[str, torch.Tensor], clean_logits: Any, metric: Metric, names: list[str],
              pos: list[int], hs: list[int] | None, batch_size: int,
              reads: list[int] | None = None) -> tuple[torch.Tensor, float, float]:
    """One pair's exact scan: values [site, pos, head or 1], the corrupt run's metric and the clean run's.

    `reads` (token indices, increasing): the only positions whose logits the metric reads; each forward then
    computes logits there only, and a site after the last of them takes the corrupt run's value without a forward
    (a patch cannot reach an earlier token's logits)."""
    import torch

    head_ix = range(len(hs)) if hs is not None else [None]
    path = rt._path([(n, None) for n in names])
    out = torch.empty((len(names), len(pos), len(hs) if hs is not None else 1), dtype=torch.float32)
    with torch.inference_mode():
        rec = Recorder(rt, names, None, device=None)
        with rt._attached(rec.hooks(), path):
            base_logits, base_cache = _extend(rt, cb.ids, 0, rt._new_cache(), path, reads)
        own = rec.result()
        baseline = float(_values(metric, base_logits, 1)[0])
        if clean_logits is not None and reads is not None:
            clean_logits = clean_logits[:, reads]
        clean_value = float(_values(metric, clean_logits, 1)[0]) if clean_logits is not None else float("nan")
        # sites in position order, `batch_size` per forward; a forward starts at its first site's position
        sites = sorted(itertools.product(range(len(pos)), range(len(names)), head_ix), key=lambda x: (pos[x[0]], x[1]))
        # a site whose clean activation equals the corrupt one bit for bit is an identity patch: the corrupt value,
        # exactly (not a batched forward's rounding, which a many-pair test could read as an effect); likewise a
        # site after the last position the metric reads
        todo = []
        for pj, ni, hk in sites:
            n = names[ni]
            a, b = _by_position(cache[n], n)[0, pos[pj]], _by_position(own[n], n)[0, pos[pj]]
            if hk is not None:
                a, b = a[hs[hk]], b[hs[hk]]
            if torch.equal(a.to(b.device, b.dtype), b) or (reads is not None and pos[pj] > reads[-1]):
                out[ni, pj, hk or 0] = baseline
            else:
                todo.append((pj, ni, hk))
        sites = todo
        for start in range(0, len(sites), batch_size):
            chunk = sites[start:start + batch_size]
            m, first = len(chunk), min(pos[pj] for pj, _, _ in chunk)
            by_name: dict[int, tuple[list[int], list[int], list[int]]] = {}
            for row, (pj, ni, hk) in enumerate(chunk):
                rows, cols, heads_ = by_name.setdefault(ni, ([], [], []))
                rows.append(row)
                cols.append(pos[pj])
                heads_.append(hs[hk] if hk is not None else 0)
            hooks = [(names[ni], patch_hook(cache[names[ni]], names[ni], r, c, h if hs is not None else None, first=first))
                     for ni, (r, c, h) in by_name.items()]
            kv = _first_tokens(base_cache, first, m) if first else rt._new_cache()
            keep = None if reads is None else [r - first for r in reads if r >= first]
            with rt._attached(hooks, path):
                tail, _ = _extend(rt, cb.ids[:, first:].repeat(m, 1), first, kv, path, keep)
            if reads is None:
                logits = torch.cat([base_logits[:, :first].expand(m, -1, -1).to(tail.dtype), tail], dim=1)
            else:
                before = sum(r < first for r in reads)
                logits = torch.cat([base_logits[:, :before].expand(m, -1, -1).to(tail.dtype), tail], dim=1)
            values = _values(metric, logits, m).detach().float().cpu()
            for row, (pj, ni, hk) in enumerate(chunk):
                out[ni, pj, hk or 0] = values[row]
    return out, baseline, clean_value


def _reads(reads: Any, n_tok: int, pair: int | None = None) -> list[int] | None:
    """`reads` resolved to increasing token indices of a prompt of n_tok tokens (negative from its end)."""
    if reads is None:
        return None
    where = "" if pair is None else f"pair {pair}: "
    if isinstance(reads, (str, bytes)) or not hasattr(reads, "__iter__"):
        raise TypeError(f"reads must be a list of token indices the metric reads (e.g. [-1]), not {reads!r}"[:200])
    reads = list(reads)
    if not reads or any(isinstance(r, bool) or not isinstance(r, int) for r in reads):
        raise TypeError(f"reads must be a non-empty list of token indices (ints), not {reads!r}"[:200])
    if any(not -n_tok <= r < n_tok for r in reads):
        raise ValueError(f"{where}reads {reads} must lie in -{n_tok}..{n_tok - 1} (the prompt has {n_tok} tokens)"[:200])
    return sorted({r + n_tok if r < 0 else r for r in reads})


def _check_batch_size(batch_size: Any) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer (patched runs per forward), not {batch_size!r}")


def patch_scan(rt: Any, corrupt: Any, clean: Any, metric: Metric | Sequence[Metric], names: str | Sequence[str],
               positions: Sequence[int] | Sequence[Sequence[int]] | None = None, heads: Sequence[int] | str | None = None,
               layers: Sequence[int] | None = None, batch_size: int = 64, groups: Sequence[Any] | None = None,
               progress: bool = False, reads: Sequence[int] | None = None) -> Scan | PairScan:
    """Exact activation patching at every (site, position[, head]), `batch_size` patched runs per forward.

    Args:
        corrupt: the prompt patched into: a text or a token list (one pair), or a list of N texts / token lists
            (N pairs; a `PairScan` is returned).
        clean: the prompt the activations come from: as `corrupt` (pair i = corrupt[i], clean[i], of the same
            length), or a cache from `run_with_cache(clean, names=...)` (one pair) or a list of N such caches.
        metric: logits [rows, seq, vocab] -> one value per row ([rows]); with N pairs one metric for all or a
            list of N (e.g. each pair's own logit difference).
        names: hook names, or a template with `{L}` expanded over `layers` (default every block).
        positions: None = every position (pairs must then have one length); a list of token indices (negative
            counts from each prompt's end, so -1 is every pair's last token); or one list per pair of equal
            count (positions named per pair, e.g. from `plain_prompt(...).positions`).
        heads: None patches whole positions; "all" or a list of head indices patches one head at a time
            (hook names with a head axis, e.g. `hook_z`).
        batch_size: patched runs per forward: larger is faster until memory runs out (each row holds one
            copy of the prompt's activations and logits).
        groups: with N pairs, a label per pair (its template or family): intervals and sign flips follow them.
        progress: a progress bar over pairs.
        reads: the token indices whose logits the metric reads (e.g. [-1]; negative from each prompt's end). Each
            forward then computes logits there only, and the metric receives logits [rows, len(reads), vocab]
            in increasing position order (so `logits[:, -1]` is still the last one): on a 262k vocabulary most
            of a forward's work is the logits of every position. Sites after the last read take the corrupt
            value without a forward. None: logits at every position.

    A patch at position p changes nothing before p (attention is causal), so the patched runs at p continue the
    corrupt run's KV cache cut to its first p tokens and compute tokens p.. only; the metric sees the corrupt
    run's logits before p, which are those of the patched run. Sites go in position order, `batch_size` per
    forward, and a forward starts at the first position among its rows (rows patched later compute a few
    tokens they could have taken from the cache: fewer, fuller forwards).

        >>> scan = rt.patch_scan(corrupt, clean, metric, "blocks.{L}.hook_resid_pre", positions=[-1])
        >>> scan.values.shape            # [layer, position]
        >>> many = rt.patch_scan(corrupts, cleans, metrics, "blocks.{L}.hook_resid_pre", positions=[-1], groups=g)
        >>> many.to_frame()              # per site: mean effect, interval, sign-flip p, BH q
    """
    _check_batch_size(batch_size)
    names, layer_of = site_names(rt, names, layers)
    pairs = _pairs(rt, corrupt, clean, metric, names, positions, groups)
    if pairs is None:
        if groups is not None:
            raise ValueError("groups= labels the pairs of a many-pair scan; one pair has no groups")
        if reads is not None:  # before the clean run's forward
            from interp.runtime.forward import as_rows

            _reads(reads, len(as_rows(rt.tokenizer, corrupt)[0]))
        cb, cache, clean_logits = _pair(rt, corrupt, clean, names)
        n_tok = cb.lengths[0]
        _check_cached(cache, names, n_tok)
        pos, hs = _grid(names, cache, n_tok, positions, heads)
        out, baseline, clean_value = _scan_one(rt, cb, cache, clean_logits, _one_metric(metric), names, pos, hs, batch_size,
                                               _reads(reads, n_tok))
        values = out if hs is not None else out[..., 0]
        return Scan(values, names, pos, hs, baseline, clean_value, "exact", layer_of)
    for i, spec in enumerate(pairs[0]):
        _reads(reads, len(spec.corrupt), i)
    return _many(rt, pairs, names, layer_of, heads, "exact", progress,
                 lambda cb, cache, cl, m, pos, hs: _scan_one(rt, cb, cache, cl, m, names, pos, hs, batch_size,
                                                            _reads(reads, cb.lengths[0])), groups)


def _delta(clean: torch.Tensor, corrupt: torch.Tensor) -> torch.Tensor:
    """What patching moves a site by: clean minus corrupt (a test breaks it to check the known answer can fail)."""
    return clean - corrupt


def _attribute_one(rt: Any, cb: Any, cache: dict[str, torch.Tensor], clean_logits: Any, metric: Metric,
                   names: list[str], pos: list[int], hs: list[int] | None) -> tuple[torch.Tensor, float, float]:
    """One pair's attribution estimates: values (baseline + estimate) [site, pos, head or 1], baseline, clean."""
    import torch

    rec = Recorder(rt, names, None, keep_graph=True)
    logits = logits_of(rt, cb, rec.hooks(), rt._path(rec.hooks()), grad=True)
    acts = rec.result()
    value = _values(metric, logits, 1)[0]
    if not value.requires_grad:
        raise ValueError("the metric's value carries no gradient: compute it from the logits with torch operations "
                         "(no .detach(), .item(), numpy or a new tensor) for attribution patching")
    if not all(a.requires_grad for a in acts.values()):
        raise ValueError("attribution patching needs gradients through the model: its parameters have requires_grad off")
    grads = torch.autograd.grad(value, [acts[n] for n in names], allow_unused=True)
    baseline = float(value.detach())
    clean_value = float(_values(metric, clean_logits, 1)[0]) if clean_logits is not None else float("nan")
    per = []
    for n, g in zip(names, grads):
        a = acts[n].detach()
        if g is None:  # the metric does not depend on the recorded tensor: a zero estimate would be a silent lie
            raise ValueError(f"no gradient reaches {n} from the metric: the site does not feed the logits it reads")
        d = _delta(cache[n].to(a.device, torch.float32), a.float())
        prod = _by_position(g.float() * d, n)[0]  # [pos, ...]
        prod = prod[pos]
        if hs is None:
            per.append(prod.reshape(len(pos), -1).sum(-1, keepdim=True))
        else:
            per.append(prod[:, hs].reshape(len(pos), len(hs), -1).sum(-1))
    est = torch.stack(per).detach().cpu()
    return baseline + est, baseline, clean_value


def attribution_scan(rt: Any, corrupt: Any, clean: Any, metric: Metric | Sequence[Metric], names: str | Sequence[str],
                     positions: Sequence[int] | Sequence[Sequence[int]] | None = None,
                     heads: Sequence[int] | str | None = None, layers: Sequence[int] | None = None,
                     groups: Sequence[Any] | None = None, progress: bool = False) -> Scan | PairScan:
    """Attribution patching: every site's effect estimated as grad . (clean - corrupt) from one forward and one
    backward of the corrupt prompt; the same `Scan` as `patch_scan` (values = baseline + estimated effect).

    Arguments as `patch_scan` (N pairs give a `PairScan` with per-site inference); the metric must be computed
    from the logits with torch operations (its gradient is taken). A first-order estimate: exact where the
    metric is linear in the site, elsewhere a fast first pass to choose the sites to patch exactly.

        >>> est = rt.attribution_scan(corrupt, clean, metric, "blocks.{L}.hook_resid_pre", positions=[-1])
        >>> est.effect                   # [layer, position], estimated effect of patching each site
    """
    names, layer_of = site_names(rt, names, layers)
    pairs = _pairs(rt, corrupt, clean, metric, names, positions, groups)
    if pairs is None:
        if groups is not None:
            raise ValueError("groups= labels the pairs of a many-pair scan; one pair has no groups")
        cb, cache, clean_logits = _pair(rt, corrupt, clean, names)
        n_tok = cb.lengths[0]
        _check_cached(cache, names, n_tok)
        pos, hs = _grid(names, cache, n_tok, positions, heads)
        out, baseline, clean_value = _attribute_one(rt, cb, cache, clean_logits, _one_metric(metric), names, pos, hs)
        return Scan(out if hs is not None else out[..., 0], names, pos, hs, baseline, clean_value, "attribution", layer_of)
    return _many(rt, pairs, names, layer_of, heads, "attribution", progress,
                 lambda cb, cache, cl, m, pos, hs: _attribute_one(rt, cb, cache, cl, m, names, pos, hs), groups)


__all__ = ["PairScan", "Scan", "attribution_scan", "patch_hook", "patch_scan", "site_names"]
