"""The causal stage (issue 41): is the layout a probe reads before the drawing the one the drawing uses?

The paper's causal experiment edits the code text, not the activations, so it cannot show that the layout a probe
reads at the last prompt token drives what the model draws. This stage asks it of each model of a study, at the
site where its layout probe is best (the `own` target at the `last` position: the layer with the highest R^2):

1. **Readable?** The probe stage's best-layer row at that position (nested CV over layers, so the choice of layer
   is inside the folds) and the row of the layer moved (the one that nested CV chose most often) must both have
   their R^2 interval above 0. If it does not, nothing is moved ("not readable";
   `when="always"` runs the interventions anyway and still says "not readable").
2. **Used?** `interp.causal.causal_site` on the prompts with a target: the interchange along the targets' concept
   subspace (each drawing measured nearer its source prompt than a random decoy, a randomisation test whose p and
   grouped interval need no model of how the intervention disrupts the drawing) and LEACE erasure against the
   erasure of shuffled targets (descriptive). Drawings are made as the probe's targets were: sampled (the study's
   temperature, one seed per prompt shared by every arm) when the targets were sampled attempts only, else greedy;
   each is run through the sandbox's process pool.

The verdict rule is `interp.causal.causal_outcome`; `verdict(row)` gives it in words that say what the test showed,
one of three sentences (used / readable but not shown to be used / not readable). Rows go to RUN/causal.jsonl, one
per model (`input` hashes what produced it: a rerun with the same probes, prompts and settings keeps it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np

from experiments.rundir import RunDir, RunError, content_hash, derive_seed, writing

CAUSAL = RunDir.CAUSAL
WHEN = ("readable", "always")


@dataclass(frozen=True)
class CausalSettings:
    """Where and how the causal test runs."""

    task: str = "layout"  #: the task whose probe is tested (the paper's question is the layout task's)
    position: str = "last"  #: the capture position of the site (the interventions act on the last prompt token)
    rank: int = 3  #: principal components of the targets that form the concept moved
    max_prompts: int = 64  #: prompts with a target used (a seeded draw when there are more)
    methods: tuple[str, ...] = ("interchange", "erasure")
    when: str = "readable"  #: run the interventions only where the probe is readable, or "always"
    temperature: float = 0.0  #: drawings' temperature (0: greedy); the study sets it from its target attempts
    max_new_tokens: int = 128  #: tokens per drawing
    seed: int = 0
    level: float = 0.95
    alpha: float = 0.05  #: the interchange's p must be at most this (and its interval above 0) for "used"

    def __post_init__(self) -> None:
        from interp.prompts import TASKS, POSITIONS

        if self.task not in TASKS:
            raise RunError(f"causal task {self.task!r}: use {' or '.join(TASKS)}")
        if self.position != "last":
            raise RunError(f"causal position {self.position!r}: the interventions act on the last prompt token ('last'; "
                           f"the capture positions are {', '.join(POSITIONS)})")
        if self.when not in WHEN:
            raise RunError(f"causal when {self.when!r}: {' or '.join(WHEN)}")
        if self.rank < 1 or self.max_prompts < 4 or self.max_new_tokens < 1 or not 0 < self.level < 1 \
                or not 0 < self.alpha < 1 or self.temperature < 0:
            raise RunError("causal settings: rank >= 1, max_prompts >= 4, max_new_tokens >= 1, level and alpha in "
                           "(0, 1), temperature >= 0")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["methods"] = list(self.methods)
        return d

    def draws(self, site: dict[str, Any] | None) -> bool:
        """Whether the test at `site` (`site_of`) draws with the model (so it must be loaded): where the probe is
        readable, or everywhere with `when="always"`; never without probe rows."""
        return site is not None and (bool(site["readable"]) or self.when == "always")


def site_of(probes: list[dict[str, Any]], model: str, s: CausalSettings) -> dict[str, Any] | None:
    """The site where `model`'s own-target probe is best at the settings' position, and whether it is readable there:
    {layer, r2 (that layer's repeated-CV mean), layer_ci, best_r2, best_ci, readable, n}; None without probe rows.

    The layer is the one the nested CV over layers chose most often in its outer folds (the `best` row's `chosen`;
    ties: the higher per-layer R^2, then the lower layer), so the layer moved is the one the readable probe uses;
    without `chosen`, the layer with the highest repeated-CV R^2. Readable: the best row's interval (the choice of
    layer inside the folds) *and* that layer's own interval lie above 0."""
    rows = [r for r in probes if r.get("model") == model and r.get("task") == s.task and r.get("target") == "own"
            and r.get("features") == "resid" and r.get("position") == s.position]
    layers = {r["layer"]: r for r in rows if isinstance(r.get("layer"), int) and r.get("r2") is not None}
    best = next((r for r in rows if r.get("layer") == "best"), None)
    if not layers or best is None:
        return None

    def r2(r: dict[str, Any]) -> float:  # rounded: no choice rests on the last bits of a float
        return round(r.get("r2_mean") if r.get("r2_mean") is not None else r["r2"], 6)

    votes: dict[int, int] = {}
    for c in best.get("chosen") or []:
        if isinstance(c, dict) and c.get("layer") in layers:
            votes[c["layer"]] = votes.get(c["layer"], 0) + 1
    pick = (max(votes, key=lambda li: (votes[li], r2(layers[li]), -li)) if votes
            else max(layers, key=lambda li: (r2(layers[li]), -li)))
    ci = best.get("ci") or [None, None]
    own = layers[pick].get("ci") or [None, None]
    readable = None if ci[0] is None or own[0] is None else bool(ci[0] > 0 and own[0] > 0)
    return {"layer": pick, "r2": r2(layers[pick]), "layer_ci": own, "chosen_by": "nested CV" if votes else "best R^2",
            "best_r2": best.get("r2"), "best_ci": ci, "readable": readable,
            "n": best.get("n_prompts", layers[pick].get("n_prompts")), "grouping": best.get("grouping")}


def causal_stage(rt: Any, run: Any, model: str, s: CausalSettings = CausalSettings(),
                 say: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """The causal test of `model` in `run` (loaded as `rt`); returns its row (also in RUN/causal.jsonl)."""
    with writing(run) as rd:
        return _causal_stage(rt, rd, model, s, say)


def _causal_stage(rt: Any, rd: RunDir, model: str, s: CausalSettings, say: Callable[[str], None]) -> dict[str, Any]:
    from experiments.cuts import protocol_from_label
    from experiments.stages.probe import consensus, json_number, prompt_groups
    from experiments.stages.render import read_renders
    from interp.causal import causal_outcome, causal_site
    from interp.prompts import build
    from interp.runtime import Sampling, StopRule

    base = {"model": model, "task": s.task, "position": s.position, "settings": s.as_dict()}
    probes = rd.rows(RunDir.PROBES)
    site = site_of(probes, model, s)
    targets_row = next((r for r in probes if r.get("model") == model and r.get("task") == s.task
                        and r.get("kind") == "targets"), None)
    if site is None or targets_row is None:
        row = {**base, "outcome": "no-test", "reason": "no probe rows for this model and task (the probe stage did "
                                                       "not run or skipped it)"}
        return _write(rd, model, s, row)
    attempts = targets_row.get("target_attempts", "all")
    temperature = s.temperature
    row: dict[str, Any] = {**base, "site": site, "n_prompts": min(targets_row.get("kept", 0), s.max_prompts),
                           "target_attempts": attempts,
                           "drawings": "greedy" if temperature == 0 else f"sampled at temperature {temperature:g}"}
    if not s.draws(site):  # decided from the probe rows alone: nothing is read, loaded or drawn
        row.update(outcome=causal_outcome(site["readable"], None),
                   reason="the probe does not decode the layout at its best site (R^2 interval not above 0): there is "
                          "nothing readable to move")
        return _write(rd, model, s, row)
    cons, _ = consensus(rd, model, s.task, targets_row["protocol"], targets_row.get("medium", "v1"),
                        targets_row.get("min_attempts", 1), targets_row.get("exclude_trivial", False), read_renders(rd),
                        attempts)  # the consensus's seed splits halves only, not the `own` target read here
    ids = sorted(cons)
    if len(ids) > s.max_prompts:
        pick = np.random.default_rng(derive_seed(s.seed, model, s.task, "causal-prompts")).choice(len(ids), s.max_prompts,
                                                                                                 replace=False)
        ids = [ids[i] for i in sorted(pick)]
    row["n_prompts"] = len(ids)
    if rt is None:
        raise RunError(f"{model}: the causal test draws with the model: load it (the runtime was not given)")
    inp = content_hash(ids, [cons[p]["own"].tolist() for p in ids], site, s.as_dict(), attempts, rt.info.weights_digest)
    done = next((r for r in rd.rows(CAUSAL) if r.get("model") == model and r.get("task") == s.task
                 and r.get("input") == inp), None)
    if done is not None:
        say(f"{model}: causal test kept (same probes, prompts, settings and weights)")
        return done
    row["input"] = inp
    protocol = protocol_from_label(targets_row["protocol"], targets_row.get("medium", "v1"))
    built = [build(rd.prompt_item(s.task, p), protocol, rt.tokenizer, chat=rt.info.chat) for p in ids]
    fences = {b.open_fence for b in built}
    if len(fences) > 1:
        raise RunError(f"{model}: the {s.task} prompts mix open and closed code fences; the causal test draws them in "
                       "one batch with one stop rule")
    sampling = [Sampling(temperature, derive_seed(s.seed, model, s.task, p, "causal-draw") if temperature else 0)
                for p in ids]
    groups = prompt_groups(rd, s.task, ids)
    say(f"{model}: causal test at layer {site['layer']} ({s.position}) on {len(ids)} prompts: "
        f"{' and '.join(s.methods)}, {row['drawings']}")
    seed = derive_seed(s.seed, model, s.task, "causal")
    try:
        res = causal_site(rt, [b.tokens for b in built], np.stack([cons[p]["own"] for p in ids]), site["layer"],
                          rank=s.rank, methods=s.methods, seed=seed, groups=None if groups is None else list(groups),
                          level=s.level, sampling=sampling,
                          stop=StopRule(max_new_tokens=s.max_new_tokens, open_fence=built[0].open_fence),
                          openers=[b.opener for b in built])
    except ValueError as e:  # e.g. targets that do not vary over these prompts: one sentence, the run unchanged
        raise RunError(f"{model}: the causal test cannot run here: {e}") from None
    row.update(seed=seed, grouping="groups" if groups is not None else "prompts",
               methods={m: {k: (json_number(v) if isinstance(v, float) else v) for k, v in sm.items()}
                        for m, sm in res.summary.items()},
               per_prompt=[{**r, "prompt": ids[r["prompt"]],
                            **{k: ids[r[k]] for k in ("source", "decoy") if r.get(k) is not None}}
                           for r in res.rows])
    row["outcome"] = causal_outcome(site["readable"], row["methods"].get("interchange"), s.alpha)
    ic = row["methods"].get("interchange") or {}
    if row["outcome"] == "no-test":
        row["reason"] = ic.get("reason") or (
            f"the interchange's design cannot reach p <= {s.alpha:g} (min p {ic.get('min_p')}: too few groups)"
            if (ic.get("min_p") or 0) > s.alpha else "the interchange's statistic is missing")
    return _write(rd, model, s, row)


def _write(rd: RunDir, model: str, s: CausalSettings, row: dict[str, Any]) -> dict[str, Any]:
    keep = [r for r in rd.rows(CAUSAL) if (r.get("model"), r.get("task")) != (model, s.task)]
    rd.write_rows(CAUSAL, keep + [row])
    return row


def _fmt(v: Any, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def verdict(row: dict[str, Any]) -> str:
    """The causal row's verdict in words that say what its test showed (the rule: `interp.causal.causal_outcome`)."""
    site = row.get("site") or {}
    where = f"layer {site.get('layer')}, `{row.get('position', 'last')}`" if site else "no site"
    bc, lc = site.get("best_ci") or [None, None], site.get("layer_ci") or [None, None]
    read = (f"probe R^2 {_fmt(site.get('best_r2'))} [{_fmt(bc[0])}, {_fmt(bc[1])}] (nested CV over layers, n "
            f"{site.get('n')}), at this layer {_fmt(site.get('r2'))} [{_fmt(lc[0])}, {_fmt(lc[1])}]") if site else ""
    ic = (row.get("methods") or {}).get("interchange") or {}
    eff = (f"interchange effect {_fmt(ic.get('effect'))} [{_fmt(ic.get('effect_lo'))}, {_fmt(ic.get('effect_hi'))}], "
           f"p {_fmt(ic.get('p'), 4)}, n {ic.get('n')} prompts "
           + (f"in {ic.get('n_groups')} groups" if row.get("grouping") == "groups" else "(each its own unit)")
           ) if ic.get("n") else ""
    outcome = row.get("outcome")
    if outcome == "used":
        return (f"used: moving the layout the probe reads ({where}; {read}) moves the drawing towards the source "
                f"prompt's ({eff})")
    if outcome == "readable-not-shown":
        return (f"readable but not shown to be used: the probe decodes the layout ({where}; {read}), and moving it "
                f"did not move the drawing beyond chance ({eff})")
    if outcome == "not-readable":
        tail = f"; the interventions ran anyway: {eff}" if eff else "; nothing was moved"
        return f"not readable: the probe does not decode the layout at its best site ({where}; {read}){tail}"
    return f"no test: {row.get('reason', 'the statistic is missing')}"


__all__ = ["CAUSAL", "CausalSettings", "causal_stage", "site_of", "verdict"]
