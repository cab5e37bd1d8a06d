"""The patch stage (beyond the paper): activation patching at the cut statement.

For cuts whose moved and as-is statement lines have the same number of tokens, resid_pre of layer L at
the statement's token positions of one arm is replaced by the other arm's (both directions), while the
statement block is processed, and continuations are sampled; the continuation rate per layer shows which
layers carry the geometric state. Work units are (cut, layer) pairs in plan order, resumable (keyed by
the whole attempt key, the cut, the layer and the direction, with a hash of the inputs) and shardable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from bench.intervene.splice import continued_drawing
from experiments.rundir import AttemptKey, RunDir, RunError, content_hash, derive_seed, writing
from experiments.cuts import cut_tokens, plan_cuts, prompt_items
from experiments.patching_table import patching_table, plot_patching
from hooks.patch import replace_last

PATCHING = RunDir.PATCHING


@dataclass(frozen=True)
class PatchSettings:
    """Activation patching at the cut statement (beyond the paper)."""

    task: str = "layout"  #: patching is per task, on the same cuts as the intervention stage
    layers: tuple[int, ...] | None = None  #: resid_pre layers to patch (None: every block)
    moved_arm: str = "moved-unused"  #: the arm swapped with null-asis
    continuations: int = 9  #: continuations per cut, layer and direction
    temperature: float = 0.7  #: sampling temperature of the continuations
    max_new_tokens: int = 64  #: tokens per continuation
    seed: int = 0  #: every continuation's seed derives from it, the attempt key, cut, layer, direction and k
    limit: int | None = None  #: only the first N cuts that can be patched (two statements of equal token counts)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


DIRECTIONS = ("moved->asis", "asis->moved")


def patching_unit(r: Any) -> tuple:
    """A patching row's place within its attempt (the canonical order of patching.jsonl): cut, layer, direction."""
    return (r["cut"], r["layer"], DIRECTIONS.index(r["direction"]) if r["direction"] in DIRECTIONS else len(DIRECTIONS))


def layers_of(s: PatchSettings, rt: Any) -> list[int]:
    """The patched layers: the settings' (checked against the model) or every block."""
    return list(range(rt.info.n_layers)) if s.layers is None else list(s.layers)


def patch_stage(rt: Any, run: Any, model: str | None = None, s: PatchSettings = PatchSettings(),
                progress: Callable[[int], None] | None = None, shard: tuple[int, int] | None = None) -> dict[str, Any]:
    """Patch resid_pre of layer L at the cut statement's tokens between `s.moved_arm` and null-asis, both
    ways, and sample continuations; one row per (attempt key, cut, layer, direction) in RUN/patching.jsonl.
    Cuts whose two statement lines have different token counts cannot be aligned and are counted as
    skipped (those met before `s.limit` aligned cuts were found). Returns counts computed from the rows on disk."""
    # resid_pre of block L, or L = n_layers: the final residual (the runtime's sites, as captured)
    bad = [x for x in (s.layers or ()) if not 0 <= x <= rt.info.n_layers]
    if bad:  # checked before the run is opened: layer 99 once emptied patching.jsonl and then failed
        raise RunError(f"patching layer {bad[0]}: the model's sites are 0..{rt.info.n_layers}")
    with writing(run) as rd:
        return _patch(rt, rd, model or rt.info.name, s, progress, shard)


def _patch(rt: Any, rd: RunDir, model: str, s: PatchSettings, progress: Callable[[int], None] | None,
           shard: tuple[int, int] | None) -> dict[str, Any]:
    from interp.runtime import Sampling, StopRule

    # a unit resumes only under the same settings: another command's settings once dropped the study's rows as
    # stale and wrote its own; now it is refused, naming them, before anything changes
    rd.record_config(f"patch/{model}/{s.task}", {**s.as_dict(), "layers": layers_of(s, rt)})
    item = prompt_items(rd)
    layers = layers_of(s, rt)
    skipped = 0
    # every cut, in plan order; `limit` counts the cuts that can be patched (their two statements align token for
    # token), so a model whose first cuts change token counts still gets its patched cuts (issue 40: SmolLM2's
    # first two never aligned, and the quick study had no patching at all)
    cuts, _ = plan_cuts(rd, model, s.task)
    src = {DIRECTIONS[0]: (s.moved_arm, "null-asis"), DIRECTIONS[1]: ("null-asis", s.moved_arm)}
    inputs = {(c["key"], c["cut"]): content_hash(c["answer"], [(a.arm, a.prefix) for a in c["arms"]], s.moved_arm,
                                                 s.continuations, s.temperature, s.max_new_tokens, s.seed) for c in cuts}
    rows = rd.rows(PATCHING)
    fresh = [x for x in rows if inputs.get((AttemptKey.of(x), x["cut"]), x.get("input")) == x.get("input")]
    if len(fresh) < len(rows):
        rd.write_rows(PATCHING, fresh)
    done = {(AttemptKey.of(x), x["cut"], x["layer"], x["direction"]) for x in fresh}
    wrote = len(fresh) < len(rows)
    unit = -1
    aligned = 0
    for c in cuts:
        if s.limit and aligned >= s.limit:
            break
        if s.moved_arm not in {a.arm for a in c["arms"]}:
            continue
        key = c["key"]
        shared, suffixes = cut_tokens(rt, c, item(key.task, key.prompt_id))
        if len(suffixes[s.moved_arm]) != len(suffixes["null-asis"]):
            skipped += 1
            continue
        aligned += 1
        span = len(suffixes["null-asis"])
        mine = []
        for layer in layers:
            unit += 1
            if shard is None or unit % shard[1] == shard[0]:
                mine.append(layer)
        todo_layers = [layer for layer in mine if any((key, c["cut"], layer, d) not in done for d in src)]
        if progress and len(layers) - len(todo_layers):
            progress(len(layers) - len(todo_layers))
        if not todo_layers:
            continue
        # each arm's residual stream at the statement tokens, every patched layer in one capture pass
        acts = {}
        for arm in (s.moved_arm, "null-asis"):
            toks = shared + suffixes[arm]
            acts[arm] = rt.capture([toks], [list(range(len(toks) - span, len(toks)))], layers)[0]  # [layers, span, d]
        for li, layer in enumerate(layers):
            if layer not in todo_layers:
                continue
            hook_name = rt.hook_names([layer])[0]
            for direction, (donor, target) in src.items():
                if (key, c["cut"], layer, direction) in done:
                    continue

                seeds = [derive_seed(s.seed, *key, c["cut"], "patch", layer, direction, k) for k in range(s.continuations)]
                gens = rt.continue_batch(shared, [suffixes[target]] * s.continuations, [Sampling(s.temperature, x) for x in seeds],
                                         StopRule(max_new_tokens=s.max_new_tokens, open_fence=True),
                                         prefill_hooks=[(hook_name, replace_last(acts[donor][li]))])
                cont = [continued_drawing(g.text) for g in gens]
                rd.append(PATCHING, [{**key.fields(), "cut": c["cut"], "layer": layer, "direction": direction,
                                      "moved_arm": s.moved_arm, "continuations": s.continuations, "continued": cont,
                                      "rate": float(np.mean(cont)), "seeds": seeds, "input": inputs[(key, c["cut"])]}])
                done.add((key, c["cut"], layer, direction))
                wrote = True
            if progress:
                progress(1)
    if wrote:  # a unit redone after the others (a repaired row) comes back to its place
        rd.sort_rows(PATCHING, patching_unit)
    rows = [x for x in rd.rows(PATCHING) if (x["model"], x["task"]) == (model, s.task)]
    return {"model": model, "task": s.task, "rows": len(rows), "cuts": len({(AttemptKey.of(x), x["cut"]) for x in rows}),
            "layers": sorted({x["layer"] for x in rows}), "cuts_with_unequal_token_counts": skipped}


__all__ = ["PATCHING", "PatchSettings", "patch_stage", "patching_table", "plot_patching"]
