"""The probe stage (Exp. 3, stage 1): consensus targets from a run's renders, per-layer probes on its
activations, the text baseline, the headline Delta R^2 with its permutation test, and controls.

Probes are always per task. `layout` is the headline (the paper's Exp. 3); `translation` is a labelled
positive control (`role: control`): there the prompt fully specifies the geometry, so a model that
reads its prompt at all should be decodable.

For every model with `RUN/activations/<model>/` (a folder of parts) and every task:
- targets: the consensus occupancy over the model's valid attempts (all of them, greedy and sampled,
  as the paper; `target_attempts: sampled` leaves the greedy one out; `exclude_trivial` drops trivial
  renders) under the protocol and medium the capture used; prompts with fewer than `min_attempts` such
  attempts are dropped and counted. Split-half targets from a seeded random split of each prompt's
  attempts give the reliability ceiling.
- target sets: `own`; with two or more models `shared` (per prompt, the mean of the other models'
  consensus over those that have one for it; which models contributed is recorded) and
  `specific` = own - shared; and `model:<other>` (cross-model selectivity: this model's activations,
  another model's targets).
- rows (`RUN/probes.jsonl`):
  * `kind: targets` / `skipped` / `ceiling` (split-half ceiling for own, shared and specific);
  * `features: text`: the TF-IDF text baseline per target;
  * `features: resid`, `layer` an index (0 is the embedding-layer control) or `best` (layer chosen
    inside the folds), per position: outer pooled R^2, prompt-bootstrap CI; for the own target a
    permuted-target p (`n_perm_layers` permutations) and BH q over every such row of the run;
  * `features: delta` (the headline, paper Table 3): Delta R^2 = best row - text baseline from the
    same outer folds, `delta_ci` (the corrected K-fold interval, interp/intervals.py), `p_perm`
    (permutation test of the best row that refits both probes, layer chosen inside the folds, on every
    permutation), `q_bh` (Benjamini-Hochberg over one family per question: every Delta test of the
    task; the row names its family), `n_perm`;
  * `features: beyond_text`: the probe against the strongest text baseline (`compared_with` lists them),
    Freedman-Lane's `p_fl`, and `text_readable` (how much of what the probe decodes the text features
    reproduce), which the verdict (`beyond_verdict`) needs below interp.baselines.READABLE_MAX.
  Every row says which grouping design ran (interp/grouping.py: `grouping`, `estimand`, `permutation`,
  `folds`, `perm_moved_share`); `delta_verdict` and `beyond_verdict` put a row in the words its procedure
  allows, the one place the report and the CLI take them from.
- plots `RUN/probes/<model>-<task>.png` and `...-shared.png`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from experiments.rundir import RunDir, derive_seed, reading, safe_name, writing
from experiments.stages.render import read_renders, render_stage, row_key
from interp.baselines import LEXICAL, beyond_outcome, freedman_lane, lexical_features, readable_share
from interp.intervals import (DEFAULT_REPEATS, NO_SIGNAL, Interval, at_the_mean, cluster_sums, fold_sums,
                              r2_interval, repeat_seed, test_over_train)
from interp.grouping import ESTIMANDS, VERDICT_SCOPE, design, moved_share
from interp.probes import (Grid, LayerSweep, benjamini_hochberg, carries_variance, occupancy, p_missing, perm_p, permutations,
                           split_half_ceiling)
from interp.prompts import items_by_id

PROBES = RunDir.PROBES
#: the text ceiling's candidates, in the order that breaks ties: the lexical readings, then the model's own input
#: embeddings (averaged over the request, and at the probed position)
BASELINES = LEXICAL + ("embedding-mean", "embedding@position")
ROLES = {"layout": "headline", "translation": "control"}


class ProbeError(ValueError):
    """A run that cannot be probed as asked."""


@dataclass(frozen=True)
class ProbeSettings:
    """How the probe stage runs. Every random draw (folds, permutations, bootstrap) derives from `seed`."""

    tasks: tuple[str, ...] = ("layout", "translation")  #: layout is the headline; translation a positive control
    min_attempts: int = 1  #: valid attempts a prompt needs for a consensus target (paper: all valid ones)
    exclude_trivial: bool = False  #: drop trivial (near-uniform) renders from the consensus
    target_attempts: str = "all"  #: which attempts form the consensus target: all (the paper) or sampled (TARGET_ATTEMPTS)
    n_perm: int = 2500  #: permutations of the headline Delta test (>= 2,500 reaches the paper's p <= 0.0004)
    n_perm_beyond: int | None = None  #: permutations of the beyond-text (Freedman-Lane) test (None: n_perm)
    n_perm_layers: int = 100  #: permutations per per-layer own-target row (the permuted-target control)
    n_boot: int = 10_000  #: prompt-bootstrap resamples (the stages that share these settings: selectivity)
    repeats: int = DEFAULT_REPEATS  #: partitions of the repeated CV behind every interval (interp/intervals.py)
    seed: int = 0  #: folds, permutations and bootstrap
    pca: tuple[int, ...] = (4, 8, 16, 32, 64)  #: PCA sizes chosen among inside the folds
    alphas: tuple[float, ...] = tuple(float(a) for a in np.logspace(-2, 5, 15))  #: ridge penalties likewise
    outer: int = 5  #: outer folds (the reported R^2 pools their out-of-fold predictions)
    inner: int = 5  #: inner folds (hyperparameter and layer choice)

    @property
    def perms_beyond(self) -> int:
        return self.n_perm if self.n_perm_beyond is None else self.n_perm_beyond

    @property
    def grid(self) -> Grid:
        return Grid(self.pca, self.alphas, self.outer, self.inner)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


TARGET_ATTEMPTS = {
    "all": "every valid attempt, greedy and sampled (the paper's consensus)",
    "sampled": "sampled attempts only: the greedy attempt (temperature 0) is left out, so a decision made by tiny logit "
               "differences at one token is not part of the target (the negative control's target)",
}


def consensus(run: Any, model: str, task: str, protocol: str, medium: str = "v1", min_attempts: int = 1,
              exclude_trivial: bool = False, renders: dict[str, dict[str, Any]] | None = None,
              attempts: str = "all", seed: int = 0) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """prompt id -> {own, half_a, half_b, n} for one model and task; and counts of prompts kept and dropped.

    `attempts`: which attempts form the consensus (TARGET_ATTEMPTS). The split halves (for the reliability ceiling)
    are a random split of each prompt's attempts, seeded by (seed, model, task, prompt): a fixed rule such as
    even/odd samples would put the greedy attempt always in one half."""
    if attempts not in TARGET_ATTEMPTS:
        raise ProbeError(f"target attempts {attempts!r}: one of {', '.join(TARGET_ATTEMPTS)}")
    rd = reading(run)
    renders = read_renders(rd) if renders is None else renders
    per: dict[str, list[tuple[int, np.ndarray]]] = {}
    seen: set[str] = set()
    for r in rd.rows(RunDir.GENERATIONS):
        if (r["model"], r["task"], r["protocol"], r.get("medium", "v1")) != (model, task, protocol, medium):
            continue
        seen.add(r["prompt_id"])
        if attempts == "sampled" and not r.get("temperature"):
            continue
        x = renders.get(row_key(r))
        if x is None or x["outcome"] != "ok" or (exclude_trivial and x["trivial"]):
            continue
        per.setdefault(r["prompt_id"], []).append((r["sample"], occupancy(x["pixels"], x["background"])))
    out = {}
    for pid in sorted(per):
        grids = per[pid]
        if len(grids) < min_attempts:
            continue
        grids.sort(key=lambda t: t[0])
        g = np.stack([t[1] for t in grids])
        halves: tuple[Any, Any] = (None, None)
        if len(grids) >= 2:
            order = np.random.default_rng(derive_seed(seed, model, task, pid, "split-half")).permutation(len(grids))
            a, b = order[: (len(grids) + 1) // 2], order[(len(grids) + 1) // 2:]
            halves = (g[a].mean(axis=0).ravel(), g[b].mean(axis=0).ravel())
        out[pid] = {"own": g.mean(axis=0).ravel(), "half_a": halves[0], "half_b": halves[1], "n": len(grids)}
    return out, {"prompts_seen": len(seen), "kept": len(out), "dropped": len(seen) - len(out)}


@dataclass
class TargetSet:
    """One probe target over a list of prompts, with what is needed for its ceiling."""

    name: str
    ids: list[str]
    y: np.ndarray  #: [n, 36]
    half_a: np.ndarray | None = None  #: [n_two, 36] half-consensus of even attempts (prompts with two halves)
    half_b: np.ndarray | None = None
    contributors: dict[str, int] | None = None  #: shared/specific: model -> prompts it contributed to


def target_sets(name: str, ids: list[str], targets: dict[str, dict[str, dict[str, Any]]]) -> tuple[list[TargetSet], dict[str, Any]]:
    """own, shared, specific and model:<other> targets of model `name` over its prompts `ids`.

    shared: per prompt the mean of the other models' consensus over those that have one (the paper's
    leave-one-model-out consensus; with uneven per-model coverage no model is dropped for lacking a
    prompt); prompts no other model covers are left out of shared and specific, and counted."""
    own = targets[name]
    out = [TargetSet("own", ids, np.stack([own[p]["own"] for p in ids]), *_halves(ids, [own]))]
    others = [m for m in targets if m != name]
    info: dict[str, Any] = {}
    if others:
        covered = [p for p in ids if any(p in targets[m] for m in others)]
        info = {"shared_prompts": len(covered), "shared_uncovered": len(ids) - len(covered)}
        if covered:
            contrib = {m: sum(p in targets[m] for p in covered) for m in others}
            contrib = {m: c for m, c in contrib.items() if c}
            shared = np.stack([np.mean([targets[m][p]["own"] for m in others if p in targets[m]], axis=0) for p in covered])
            y_own = np.stack([own[p]["own"] for p in covered])
            sa, sb = _shared_halves(covered, own, targets, others)
            out.append(TargetSet("shared", covered, shared, sa[1], sb[1], contrib))
            spec_a = spec_b = None
            if sa[0] is not None:
                spec_a, spec_b = sa[0] - sa[1], sb[0] - sb[1]
            out.append(TargetSet("specific", covered, y_own - shared, spec_a, spec_b, contrib))
        for m in others:
            both = [p for p in ids if p in targets[m]]
            if both:
                out.append(TargetSet(f"model:{m}", both, np.stack([targets[m][p]["own"] for p in both])))
    return out, info


def _halves(ids: list[str], sources: list[dict[str, dict[str, Any]]]) -> tuple[np.ndarray | None, np.ndarray | None]:
    two = [p for p in ids if sources[0][p]["half_b"] is not None]
    if len(two) < 3:
        return None, None
    return np.stack([sources[0][p]["half_a"] for p in two]), np.stack([sources[0][p]["half_b"] for p in two])


def _shared_halves(covered: list[str], own: dict[str, dict[str, Any]], targets: dict[str, dict[str, dict[str, Any]]],
                   others: list[str]) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """((own_a, shared_a), (own_b, shared_b)) over the covered prompts where every participant has two halves."""
    keep = []
    for p in covered:
        ms = [m for m in others if p in targets[m]]
        if own[p]["half_b"] is not None and all(targets[m][p]["half_b"] is not None for m in ms):
            keep.append((p, ms))
    if len(keep) < 3:
        return (None, None), (None, None)
    own_a = np.stack([own[p]["half_a"] for p, _ in keep])
    own_b = np.stack([own[p]["half_b"] for p, _ in keep])
    sh_a = np.stack([np.mean([targets[m][p]["half_a"] for m in ms], axis=0) for p, ms in keep])
    sh_b = np.stack([np.mean([targets[m][p]["half_b"] for m in ms], axis=0) for p, ms in keep])
    return (own_a, sh_a), (own_b, sh_b)


def json_number(v: float) -> float | None:
    """A statistic as stored in a row: rounded to 6 places, None when not finite."""
    return None if not np.isfinite(v) else round(float(v), 6)


def percentile_ci(stats: np.ndarray) -> list[float | None]:
    """The 95% percentile interval of the finite bootstrap statistics, as stored in a row."""
    finite = stats[np.isfinite(stats)]
    if not finite.size:
        return [None, None]
    lo, hi = np.quantile(finite, [0.025, 0.975])
    return [json_number(lo), json_number(hi)]


def _texts(run: Any, task: str, ids: list[str]) -> list[str]:
    recorded = reading(run).prompts()
    builtin = items_by_id()
    missing = [p for p in ids if (task, p) not in recorded and p not in builtin]
    if missing:
        raise ProbeError(f"{run} has no text for {task} prompts {missing[:3]} (no prompts.jsonl entry and not built in); "
                         "the text baseline needs them: regenerate with this version")
    return [recorded[(task, p)].text if (task, p) in recorded else builtin[p].text for p in ids]


def probe_stage(run: Any, models: list[str] | None = None, s: ProbeSettings = ProbeSettings(),
                progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    bad = [t for t in s.tasks if t not in ROLES]
    if bad:  # checked before the run is opened: an unknown task once wrote an empty probes.jsonl over the study's
        raise ProbeError(f"unknown task {bad[0]!r}: probes are per task, {' or '.join(ROLES)}")
    with writing(run) as rd:
        return _probe_stage(rd, models, s, progress)


def open_stores(rd: RunDir, models: list[str] | None) -> dict[str, Any]:
    """The run's activation stores by model name (the name the run uses), only `models` when given (names or
    their safe file names); the caller closes them. No store at all is a ProbeError naming the command."""
    from activations.store import ActivationStore

    files = rd.activation_stores()
    if not files:
        raise ProbeError(f"{rd.path} has no activations: run `ambench capture --out {rd.path}` first")
    stores = {}
    order = rd.prompt_order()  # rows in the run's canonical prompt order, whatever the order of the store's parts
    for f in files:
        st = ActivationStore(f, order)
        name = st.meta.get("name", st.meta["model"]["name"])
        if models is None or name in models or safe_name(name) in models:
            stores[name] = st
        else:
            st.close()
    return stores


def _probe_stage(rd: RunDir, models: list[str] | None, s: ProbeSettings,
                 progress: Callable[[str], None] | None) -> list[dict[str, Any]]:
    say = progress or (lambda m: None)

    stores = open_stores(rd, models)
    render_stage(rd)
    renders = read_renders(rd)
    if not stores:
        raise ProbeError(f"none of {models} has activations in {rd}")
    grid = s.grid
    rows: list[dict[str, Any]] = []
    try:
        for task in s.tasks:
            role = ROLES.get(task, "control")
            targets: dict[str, dict[str, dict[str, Any]]] = {}
            for name, st in stores.items():
                cons, counts = consensus(rd, name, task, st.meta["protocol"], st.meta.get("medium", "v1"),
                                         s.min_attempts, s.exclude_trivial, renders, s.target_attempts, s.seed)
                if not counts["prompts_seen"]:
                    continue
                targets[name] = cons
                say(f"{name} {task}: {counts['kept']} prompts with >= {s.min_attempts} valid attempts "
                    f"({counts['dropped']} of {counts['prompts_seen']} dropped)")
                rows.append({"model": name, "task": task, "role": role, "kind": "targets", **counts,
                             "min_attempts": s.min_attempts, "exclude_trivial": s.exclude_trivial,
                             "target_attempts": s.target_attempts,
                             "protocol": st.meta["protocol"], "medium": st.meta.get("medium", "v1"),
                             "final_site": st.meta.get("final_site", "pre-norm")})
            for name in targets:
                rows += _probe_model(rd, name, task, role, stores[name], targets, s, grid, say)
    finally:
        for st in stores.values():
            st.close()
    _adjust(rows)
    rd.write_rows(RunDir.PROBES, rows)
    plot_probes(rd, rows)
    return rows


class _Sums:
    """Fold sums of every probe over the partitions of the repeated CV: key -> lists over partitions of the folds'
    SSE and SST (interp.intervals)."""

    def __init__(self) -> None:
        self.sse: dict[tuple[Any, ...], list[np.ndarray]] = {}
        self.sst: dict[tuple[str, ...], list[np.ndarray]] = {}
        self.designs: dict[str, Any] = {}  #: target -> its grouping design (interp.grouping.Design)

    def add(self, key: tuple[Any, ...], target: str, y: np.ndarray, pred: np.ndarray, folds: Any,
            groups: np.ndarray | None = None) -> None:
        sse, sst = fold_sums(y, pred, folds) if groups is None else cluster_sums(y, pred, groups)
        self.sse.setdefault((target, *key), []).append(sse)
        if key[0] == "text":  # one SST per target and partition (every probe of a target shares its prompts)
            self.sst.setdefault((target,), []).append(sst)

    def r2(self, key: tuple[Any, ...], target: str, n: int, ratio: float) -> Interval:
        return r2_interval(np.stack(self.sse[(target, *key)]), np.stack(self.sst[(target,)]), n, ratio,
                           folds=self.designs[target].interval_folds)

    def delta(self, a: tuple[Any, ...], b: tuple[Any, ...], target: str, n: int, ratio: float) -> Interval:
        """The grouping design's Delta interval (paired, or the unpaired bound with few groups)."""
        return self.designs[target].delta_interval(np.stack(self.sse[(target, *a)]), np.stack(self.sse[(target, *b)]),
                                                   np.stack(self.sst[(target,)]), n, ratio)


def _interval_fields(iv: Interval, value: str) -> dict[str, Any]:
    """The row fields of an interval: the repeated-CV estimate it is centred on, the interval, its standard error."""
    return {f"{value}_mean": json_number(iv.value), "ci": [json_number(iv.lo), json_number(iv.hi)], "se": json_number(iv.se)}


def _probe_model(run: RunDir, name: str, task: str, role: str, st: Any, targets: dict[str, dict[str, dict[str, Any]]],
                 s: ProbeSettings, grid: Grid, say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every row of one model and task (see the module docstring)."""
    base = {"model": name, "task": task, "role": role, "seed": s.seed, "target_attempts": s.target_attempts}
    rowmap = st.rows_of(task)
    ids = [p for p in rowmap if p in targets[name]]
    if len(ids) < 2 * grid.outer:
        say(f"{name} {task}: only {len(ids)} prompts with targets and activations; "
            f"{2 * grid.outer} needed for {grid.outer}-fold nested CV: no probes")
        return [{**base, "kind": "skipped", "reason": f"{len(ids)} prompts < {2 * grid.outer}"}]
    rows: list[dict[str, Any]] = []
    tsets, info = target_sets(name, ids, targets)
    if info:
        rows.append({**base, "kind": "shared_coverage", **info,
                     "contributors": next((t.contributors for t in tsets if t.name == "shared"), None)})
    positions = list(st.positions)
    n_layers = st.shape[1]
    features: dict[tuple[str, ...], dict[str, Any]] = {}  # per prompt list: the feature matrices
    for t in tsets:
        key = tuple(t.ids)
        if key not in features:
            index = [rowmap[p] for p in t.ids]
            lex = lexical_features(_texts(run, task, t.ids))
            per_pos = {pos: [st.layer(layer, pos)[index] for layer in range(n_layers)] for pos in positions}
            emb_mean = st.embed_mean(index)  # None for a store captured before issue 19
            d = design(prompt_groups(run, task, t.ids), grid)
            if d.note:
                say(f"{name} {task}: {d.note}")
            features[key] = {"lexical": lex, "pos": per_pos, "emb_mean": emb_mean, "groups": d.groups, "design": d}

    def sweeps(j: int) -> dict[tuple[str, ...], dict[str, Any]]:
        seed = repeat_seed(s.seed, j)
        out = {}
        for key, f in features.items():
            g, fg = f["groups"], f["design"].grid
            lex = {b: LayerSweep([x], fg.with_full(), seed, groups=g) for b, x in f["lexical"].items()}
            if f["emb_mean"] is not None:
                lex["embedding-mean"] = LayerSweep([f["emb_mean"]], fg, seed, groups=g)
            out[key] = {"lex": lex, "pos": {pos: LayerSweep(xs, fg, seed, groups=g) for pos, xs in f["pos"].items()}}
        return out

    headline = ("own", "shared", "specific")
    from experiments.progress import bar  # (target, position) units as they are done (shown on a terminal only)

    units = bar((max(1, s.repeats) + 1) * len(tsets) * len(st.positions), f"probes {name} {task}", "target x position",
                leave=False)
    sums = _Sums()
    first: dict[tuple[Any, ...], Any] = {}  # the study's own partition's results, for the rows' point estimates
    kept: dict[tuple[str, ...], dict[str, Any]] = {}
    for j in range(max(1, s.repeats)):
        say(f"{name} {task}: partition {j + 1} of {max(1, s.repeats)} of the repeated cross-validation")
        sw_all = sweeps(j)
        if j == 0:
            kept = sw_all
        for t in tsets:
            sw = sw_all[tuple(t.ids)]
            folds = next(iter(sw["pos"].values())).outer
            g = features[tuple(t.ids)]["groups"]
            sums.designs[t.name] = features[tuple(t.ids)]["design"]
            lex = {b: x.layer(t.y, 0) for b, x in sw["lex"].items()}
            for b, res in lex.items():
                sums.add(("text" if b == "tfidf" else "lexical", b), t.name, t.y, res.pred, folds, g)
            for pos, lsweep in sw["pos"].items():
                units.update(1)
                units.set_postfix_str(f"partition {j + 1}: {t.name} at {pos}, {lsweep.n_layers} layers")
                if j == 0:
                    say(f"{name} {task}: {t.name} target, position {pos}, {lsweep.n_layers} layers")
                lsweep_res = {layer: lsweep.layer(t.y, layer) for layer in range(lsweep.n_layers)}
                for layer, res in lsweep_res.items():
                    sums.add(("resid", pos, layer), t.name, t.y, res.pred, folds, g)
                best = lsweep.best(t.y)
                sums.add(("resid", pos, "best"), t.name, t.y, best.pred, folds, g)
                sums.add(("lexical", f"embedding@position:{pos}"), t.name, t.y, lsweep_res[0].pred, folds, g)
                if j == 0:
                    first[(t.name, pos, "layers")] = lsweep_res
                    first[(t.name, pos, "best")] = best
            if j == 0:
                first[(t.name, "lex")] = lex
        del sw_all
    for t in tsets:
        f, sw = features[tuple(t.ids)], kept[tuple(t.ids)]
        dsg = f["design"]
        ratio = test_over_train(len(t.ids), dsg.grid.outer)
        g = f["groups"]
        tb = {**base, "target": t.name, "n_prompts": len(t.ids), "repeats": max(1, s.repeats), **dsg.fields()}
        if t.contributors is not None:
            tb["shared_models"] = sorted(t.contributors)
        if t.half_a is not None and t.name in headline:
            c = split_half_ceiling(t.half_a, t.half_b)
            rows.append({**tb, "kind": "ceiling", "n_prompts": int(t.half_a.shape[0]),
                         **{k: json_number(v) for k, v in c.items()}})
        lex = first[(t.name, "lex")]
        text = lex["tfidf"]
        rows.append({**tb, "features": "text", "layer": None, "position": "-", "r2": json_number(text.r2),
                     **_interval_fields(sums.r2(("text", "tfidf"), t.name, len(t.ids), ratio), "r2"), "chosen": text.chosen})
        for b, res in lex.items():
            if b != "tfidf":
                rows.append({**tb, "features": "lexical", "baseline": b, "layer": None, "position": "-",
                             "r2": json_number(res.r2), **_interval_fields(sums.r2(("lexical", b), t.name, len(t.ids), ratio), "r2"),
                             "chosen": res.chosen})
        for pos, lsweep in sw["pos"].items():
            units.update(1)
            units.set_postfix_str(f"{len(rows)} rows; {t.name} at {pos}"
                                  + (f": {s.n_perm} permutations" if s.n_perm and t.name in headline else ""))
            for layer, res in first[(t.name, pos, "layers")].items():
                row = {**tb, "features": "resid", "layer": layer, "position": pos, "r2": json_number(res.r2),
                       **_interval_fields(sums.r2(("resid", pos, layer), t.name, len(t.ids), ratio), "r2"), "chosen": res.chosen}
                if t.name == "own" and s.n_perm_layers and np.isfinite(res.r2):
                    perms = dsg.permutations(len(t.ids), s.n_perm_layers, derive_seed(s.seed, name, task, pos, layer, "layer-perm"))
                    null = lsweep.permuted_r2(t.y, perms, layers=[layer])
                    row.update(**p_fields("p_perm", null, res.r2), null_mean=_null_mean(null), n_perm=s.n_perm_layers,
                               **_moved(g, perms))
                rows.append(row)
            best = first[(t.name, pos, "best")]
            rows.append({**tb, "features": "resid", "layer": "best", "position": pos, "r2": json_number(best.r2),
                         **_interval_fields(sums.r2(("resid", pos, "best"), t.name, len(t.ids), ratio), "r2"), "chosen": best.chosen})
            if t.name not in headline:
                continue
            delta = best.r2 - text.r2
            div = sums.delta(("resid", pos, "best"), ("text", "tfidf"), t.name, len(t.ids), ratio)
            drow = {**tb, "features": "delta", "layer": "best", "position": pos, "delta_r2": json_number(delta),
                    "r2_resid": json_number(best.r2), "r2_text": json_number(text.r2), "delta_mean": json_number(div.value),
                    "delta_ci": [json_number(div.lo), json_number(div.hi)], "se": json_number(div.se),
                    "n_perm": s.n_perm, "p_perm": None, "chosen_layers": [c["layer"] for c in best.chosen]}
            if at_the_mean(t.y, best.pred, lsweep.outer):
                drow.update(signal=NO_SIGNAL, delta_ci=[None, None])
            if s.n_perm and np.isfinite(delta):
                pseed = derive_seed(s.seed, name, task, t.name, pos, "delta-perm")
                perms = dsg.permutations(len(t.ids), s.n_perm, pseed)
                null = lsweep.permuted_r2(t.y, perms) - sw["lex"]["tfidf"].permuted_r2(t.y, perms)
                drow.update(**p_fields("p_perm", null, delta), null_mean=_null_mean(null), perm_seed=pseed,
                            **_moved(g, perms))
            if g is not None:
                drow["paper"] = _paper_delta(f, t, pos, grid, s, name, task)
            rows.append(drow)
            rows.append(_beyond_text(tb, t, pos, lsweep, sw, f, best, sums, ratio, s, name, task))
    units.close()
    return rows


def _beyond_text(tb: dict[str, Any], t: TargetSet, pos: str, lsweep: LayerSweep, sw: dict[str, Any], f: dict[str, Any],
                 best: Any, sums: _Sums, ratio: float, s: ProbeSettings, name: str, task: str) -> dict[str, Any]:
    """The row of the claim "beyond the prompt's text": the probe against the strongest lexical baseline (the text
    ceiling, chosen by its repeated-CV R^2; ties in the order of BASELINES), with the Freedman-Lane test."""
    cands = {b: ("text", b) if b == "tfidf" else ("lexical", b) for b in sw["lex"]}
    cands["embedding@position"] = ("lexical", f"embedding@position:{pos}")
    r2s = {b: sums.r2(k, t.name, len(t.ids), ratio).value for b, k in cands.items()}
    # a baseline whose features carry no variance (the same token's embedding at a fixed template position in every
    # prompt) predicts the training mean: its R^2 (about 0) beat lexical baselines that overfit on few prompts, it
    # became the ceiling, and the test then asked whether the activations beat the mean (issue 28). Never a ceiling.
    excluded = {b: "its features are the same for every prompt (no variance): it can only predict the mean"
                for b in cands if not carries_variance(_baseline_x(b, f, pos))}
    order = [b for b in BASELINES if b in r2s and b not in excluded]
    # the strongest by its estimate rounded to 1e-9 (rounding never picks the ceiling), ties in the listed order
    top = max(order, key=lambda b: (round(r2s[b], 9) if np.isfinite(r2s[b]) else -np.inf, -order.index(b)))
    bsweep = lsweep if top == "embedding@position" else sw["lex"][top]
    blayers = [0] if top == "embedding@position" else None
    bres = bsweep.layer(t.y, 0)
    delta = best.r2 - bres.r2
    iv = sums.delta(("resid", pos, "best"), cands[top], t.name, len(t.ids), ratio)
    # how much of what the probe decodes the text features read when they are given it without noise (the probe's
    # out-of-fold predictions as their targets): near 1, the decoded layout is a reading of these text features that
    # the activations make more exactly than a baseline learns it from noisy targets, not a plan (issue 39)
    share, by, _ = readable_share(best.pred, {b: _baseline_x(b, f, pos) for b in order},
                                  {b: lsweep if b == "embedding@position" else sw["lex"][b] for b in order},
                                  f["design"].grid, lsweep.outer, f["groups"])
    row = {**tb, "features": "beyond_text", "layer": "best", "position": pos, "baseline": top,
           "baselines": {b: json_number(v) for b, v in r2s.items()}, "compared_with": order,
           "r2_resid": json_number(best.r2),
           "r2_baseline": json_number(bres.r2), "delta_beyond": json_number(delta), "delta_mean": json_number(iv.value),
           "delta_ci": [json_number(iv.lo), json_number(iv.hi)], "se": json_number(iv.se), "n_perm": s.perms_beyond,
           "p_fl": None, "text_readable": json_number(share), "text_readable_by": by}
    if at_the_mean(t.y, best.pred, lsweep.outer):
        row.update(signal=NO_SIGNAL, delta_ci=[None, None])
    if excluded:
        row["excluded_baselines"] = excluded
    if f["emb_mean"] is None:
        row["missing_baselines"] = {"embedding-mean": "the activations were captured without it (before issue 19): "
                                                      "capture again to add it"}
    if s.perms_beyond and np.isfinite(delta):
        # cross-fitted: the ceiling's out-of-fold predictions, what it reads of new prompts. Its in-sample fit (before
        # issue 28) carried its own overfit into every null world, where it re-read it and the activations could
        # not: a text-only target on real activations was "beyond the text" in 30-50% of data sets
        fitted = bres.pred
        pseed = derive_seed(s.seed, name, task, t.name, pos, "beyond-text-perm")
        perms = f["design"].permutations(len(t.ids), s.perms_beyond, pseed)
        p, null = freedman_lane(lsweep, _OneLayer(bsweep, blayers), fitted, t.y, delta, s.perms_beyond, pseed,
                                perms=perms)
        row.update(**p_fields("p_fl", null, delta), null_mean=_null_mean(null), perm_seed=pseed, **_moved(f["groups"], perms))
    return row


def delta_verdict(r: dict[str, Any]) -> str:
    """The headline Delta row's verdict, in the words its procedure allows (interp.grouping.VERDICT_SCOPE): the one
    rule the report and the CLI print. Significant means q < 0.05 and the interval above 0."""
    if r.get("signal") == NO_SIGNAL:
        return NO_SIGNAL
    proc = r.get("grouping", "none")
    scope = VERDICT_SCOPE.get(proc, VERDICT_SCOPE["none"])
    q, lo = r.get("q_bh"), (r.get("delta_ci") or [None])[0]
    if q is None:
        return _no_test(r, "p_perm")
    sig = q < 0.05 and lo is not None and lo > 0
    if proc == "too-few-groups":
        return (f"associated with the layout above the TF-IDF baseline {scope}" if sig
                else f"not shown above the TF-IDF baseline ({scope})")
    return f"decodable above the text baseline {scope}" if sig else "not shown above the text baseline at this power"


def _no_test(r: dict[str, Any], p: str) -> str:
    """Why a row has no test: the missing p's recorded reason (a NaN in the null), else no permutations were asked."""
    why = r.get(f"{p}_missing")
    return f"no test: {why}" if why else "no test (no permutations)"


def beyond_verdict(r: dict[str, Any]) -> str:
    """The beyond-text row's verdict (`interp.baselines.beyond_outcome` decides; this says it): it names the text
    features it was compared with, never "the text"."""
    feats = ", ".join(r.get("compared_with") or [r.get("baseline", "?")])
    scope = VERDICT_SCOPE.get(r.get("grouping", "none"), VERDICT_SCOPE["none"])
    outcome = beyond_outcome(r.get("q_bh", r.get("p_fl")), (r.get("delta_ci") or [None])[0], r.get("text_readable"),
                             r.get("signal") == NO_SIGNAL)
    readable = r.get("text_readable")
    share = "?" if readable is None else f"{max(0.0, readable):.0%}"
    return {"beyond": f"beyond these text features ({feats}) {scope}; they reproduce {share} of what the probe decodes",
            "reads-text": f"reads these text features more exactly than the baselines learn them (they reproduce {share} "
                          f"of what the probe decodes, {r.get('text_readable_by')} best): a reading of the text, not "
                          "evidence of a plan",
            "share-missing": f"the test rejects against these text features ({feats}), but how much of what the probe "
                             "decodes they reproduce could not be measured: neither a plan nor a reading of the text "
                             "is claimed",
            "not-shown": f"not shown beyond these text features ({feats})",
            "no-signal": NO_SIGNAL,
            "no-test": _no_test(r, "p_fl")}[outcome]


def _moved(groups: np.ndarray | None, perms: np.ndarray) -> dict[str, Any]:
    """The row field with the share of rows a permutation moved to another group (grouped rows only)."""
    share = moved_share(groups, perms)
    return {} if share is None else {"perm_moved_share": json_number(share)}


def prompt_groups(run: Any, task: str, ids: list[str]) -> np.ndarray | None:
    """Each prompt's group label (the recorded prompt's `group`, else the built-in prompt's: a layout prompt's
    subcategory); None when no prompt has one. A prompt without a group among grouped ones is its own group."""
    recorded = reading(run).prompts()
    builtin = items_by_id()
    labels = []
    for p in ids:
        item = recorded.get((task, p))
        g = item.group if item is not None else ""
        if not g and p in builtin and builtin[p].task == task and (item is None or item.text == builtin[p].text):
            g = builtin[p].group
        labels.append(g)
    if not any(labels):
        return None
    return np.array([g if g else f"prompt:{p}" for g, p in zip(labels, ids)])


def _paper_delta(f: dict[str, Any], t: TargetSet, pos: str, grid: Grid, s: ProbeSettings, name: str, task: str
                 ) -> dict[str, Any]:
    """The headline Delta by the paper's procedure on grouped prompts (prompt-level folds and permutations): kept for
    comparability with the paper, labelled; it answers "new prompts of the same groups", and its permutation test
    is not calibrated when groups share a layout (issue 28: p <= 0.05 in 92% of data sets under a family null)."""
    probe = LayerSweep(f["pos"][pos], grid, s.seed)
    text = LayerSweep([f["lexical"]["tfidf"]], grid.with_full(), s.seed)
    r2p, r2t = probe.best(t.y).r2, text.layer(t.y, 0).r2
    out: dict[str, Any] = {"procedure": "the paper's: prompt-level folds and permutations, groups ignored",
                           "estimand": ESTIMANDS["paper"], "delta_r2": json_number(r2p - r2t),
                           "r2_resid": json_number(r2p), "r2_text": json_number(r2t), "p_perm": None}
    if s.n_perm and np.isfinite(r2p - r2t):
        pseed = derive_seed(s.seed, name, task, t.name, pos, "delta-perm")
        perms = permutations(len(t.ids), s.n_perm, pseed)
        null = probe.permuted_r2(t.y, perms) - text.permuted_r2(t.y, perms)
        out.update(**p_fields("p_perm", null, r2p - r2t), perm_seed=pseed)
    return out


def p_fields(name: str, null: np.ndarray, observed: float) -> dict[str, Any]:
    """A row's p-value fields: `name` = the permutation p, or None with `<name>_missing` saying why (a NaN in the
    null or the statistic is a missing value, never a p-value: issue 28)."""
    p = perm_p(null, observed)
    if np.isfinite(p):
        return {name: p}
    return {name: None, f"{name}_missing": p_missing(null, observed)}


def _null_mean(null: np.ndarray) -> float | None:
    return json_number(float(np.mean(null))) if len(null) and np.all(np.isfinite(null)) else None


def _baseline_x(b: str, f: dict[str, Any], pos: str) -> np.ndarray:
    """The feature matrix of baseline b at position pos."""
    return f["pos"][pos][0] if b == "embedding@position" else (f["emb_mean"] if b == "embedding-mean" else f["lexical"][b])


class _OneLayer:
    """A sweep seen as the baseline: its R^2 of any targets with the layer fixed (the embedding at the position is
    layer 0 of the position's sweep)."""

    def __init__(self, sweep: LayerSweep, layers: list[int] | None) -> None:
        self.sweep, self.layers = sweep, layers

    def r2_of(self, targets: Any, count: int, outputs: int, layers: Any = None) -> np.ndarray:
        return self.sweep.r2_of(targets, count, outputs, self.layers)


def _adjust(rows: list[dict[str, Any]]) -> None:
    """BH q-values: per-layer permuted-target rows over the whole run; and one family per question (issue 39): every
    headline Delta test of a task and target (each model and position: the report's verdict on the target draws on
    any of them) and, apart, every beyond-text test of a task and target. Before, a family was one (task, target,
    position) with one test per model, so under a global null with 3 positions some position showed q <= .05 far more
    often than 5%. Targets stay apart: own is the headline question, shared and specific the paper's decomposition."""
    layer_rows = [r for r in rows if r.get("features") == "resid" and "p_perm" in r]
    for r, q in zip(layer_rows, benjamini_hochberg([r["p_perm"] for r in layer_rows])):
        r["q_bh"] = round(q, 6)
    for features, p, what in (("delta", "p_perm", "Delta test"), ("beyond_text", "p_fl", "beyond-text test")):
        families: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in rows:
            if r.get("features") == features and r.get(p) is not None:
                families.setdefault((r["task"], r["target"]), []).append(r)
        for (task, target), fam in families.items():
            models = len({r["model"] for r in fam})
            positions = sorted({r["position"] for r in fam})
            for r, q in zip(fam, benjamini_hochberg([r[p] for r in fam])):
                r["q_bh"] = round(q, 6)
                r["bh_family"] = (f"every {what} of task {task}, target {target}: {len(fam)} tests ({models} model(s) x "
                                  f"positions {', '.join(positions)})")


def sweep_table(rows: list[dict[str, Any]], model: str, task: str, targets: tuple[str, ...]) -> Any:
    """The probe rows of one model, task and targets as `interp.sweep.probe_sweep`'s table (columns target, position,
    layer, n, r2, lo, hi, text_r2, text_lo, text_hi), with the split-half ceiling per target in `attrs["ceiling"]`:
    what a user gets from Python, so that the report's figure is drawn by the same `plot_sweep`."""
    import pandas as pd

    def num(v: Any) -> float:
        return float("nan") if v is None else float(v)

    mine = [r for r in rows if r.get("model") == model and r.get("task") == task and r.get("target") in targets]
    text = {r["target"]: r for r in mine if r.get("features") == "text"}
    out = []
    for r in mine:
        if r.get("features") != "resid" or not isinstance(r.get("layer"), int):
            continue
        tx = text.get(r["target"], {})
        ci, tci = r.get("ci") or [None, None], tx.get("ci") or [None, None]
        out.append({"target": r["target"], "position": r["position"], "layer": r["layer"], "n": r.get("n_prompts"),
                    "r2": num(r.get("r2")), "lo": num(ci[0]), "hi": num(ci[1]), "text_r2": num(tx.get("r2")),
                    "text_lo": num(tci[0]), "text_hi": num(tci[1])})
    table = pd.DataFrame(out, columns=["target", "position", "layer", "n", "r2", "lo", "hi", "text_r2", "text_lo",
                                       "text_hi"])
    table.attrs["ceiling"] = {r["target"]: r["ceiling"] for r in mine
                              if r.get("kind") == "ceiling" and r.get("ceiling") is not None}
    return table


def plot_probes(rd: RunDir, rows: list[dict[str, Any]]) -> list[Path]:
    """`RUN/probes/<model>-<task>.png` (own target) and `...-shared.png` (shared vs specific), drawn by
    `interp.sweep.plot_sweep` from the rows' table (`sweep_table`): the figure a user draws from Python."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from interp.sweep import plot_sweep

    out = []
    for model, task in sorted({(r["model"], r["task"]) for r in rows if "task" in r}):
        for kind, tnames in (("", ("own",)), ("-shared", ("shared", "specific"))):
            table = sweep_table(rows, model, task, tnames)
            if table.empty:
                continue
            final = next((r.get("final_site", "pre-norm") for r in rows if r.get("kind") == "targets" and r["model"] == model), "pre-norm")
            n = int(table["n"].max()) if table["n"].notna().any() else None
            lines = ["position"] if kind == "" else ["target", "position"]
            fig = plot_sweep(table, lines=lines, title=f"{model} ({task}): occupancy probe"
                             f"{' - shared vs specific' if kind else ''}" + (f", n = {n} prompts" if n else ""),
                             xlabel="layer L = input of block L (0 = embeddings); last = final residual, "
                             + ("before the final norm" if final == "pre-norm" else "after the final norm"))
            out.append(rd.save_figure(fig, f"{RunDir.PROBE_PLOTS}/{safe_name(model)}-{task}{kind}.png"))
            plt.close(fig)
    return out
