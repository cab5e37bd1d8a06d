"""Simulated probe studies whose answers are constructed: the known cases that the intervals and tests of
`interp.intervals` are checked on (tests/interp/test_intervals.py, perf/bench_coverage.py).

A *population* fixes everything but the prompts: a vocabulary whose words carry word embeddings, the words that
move the target (the text effect), a hidden latent that no word states (the plan), how each layer mixes words
and latent, and the noise. A *data set* draws n prompts from it (each prompt: `words` words without
replacement, a hidden latent, target noise), so replications differ only in their prompts, as repeated studies
would. What each kind plants:

- `planted`: the target = text effect (`text_share` of its variance) + hidden latent (`hidden_share`) + noise;
  layers from `latent_from` on hold the latent, every layer holds the words.
- `null`: the target is noise, independent of words and activations.
- `text-only`: the target = text effect + noise; the layers hold only the prompt's words (a linear map of its
  bag of words, as the model's input embeddings give, plus noise): nothing beyond the text.
- `text-order` (issue 28): every prompt holds two marker words `ma` and `mb`, at least three words apart, in
  either order among its shuffled words; the target's text effect is their order only (`text_share`), and every
  layer holds the words and that order (a model that reads word order): nothing beyond the text, but only a
  reading of word order finds it (a bag of words or of 1-3 grams does not: the markers are never within a trigram).
- `text-place` (issue 39): every prompt holds a marker word `mk` at a uniform place among its shuffled words; the
  target's text effect is that place (linear), and every layer holds the words and the place along one direction.
- `text-count` (issue 39): a prompt holds `words` - 3 .. `words` + 3 words; the target's text effect is the word
  count and its parity (half each), and every layer holds both along two directions.
- `text-cooccur` (issue 39): markers `ma` and `mb` each in half of the prompts (else their stand-ins `fa`, `fb`, so
  that the word count says nothing), at uniform places; the target's text effect is their XOR (exactly one of them
  present), and every layer holds that XOR along one direction.
  These four are text-only: nothing is beyond the text, and the activations read the feature more exactly than a
  baseline can learn it from noisy targets.

Prompts in families (issue 28; `family_size` > 0): a data set draws n / family_size new families of
`family_size` prompts each (`DataSet.groups` labels them), as the paper's 15 subcategories x 10 prompts. A family
adds an effect shared by its prompts, with `family_share` of the target's variance:
- `family="independent"`: the activations carry one family effect and the targets another, independent of it:
  activations and targets are independent as wholes (with `kind="null"`, the family null);
- `family="shared"`: one family latent in both (a family-level association that new families share).
The estimand of a grouped cross-validation is "new prompts of new families": `expected_r2` trains on whole
families and scores on fresh ones.

Because the population can draw any number of new prompts, the estimand of a cross-validated R^2 (the expected
R^2 of the procedure trained on (K-1)/K of n prompts, on new prompts) is computed by `expected_r2`: train the
whole procedure (selection inside its own folds) on fresh training sets and score it on a large fresh test set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

KINDS = ("planted", "null", "text-only", "text-order", "text-place", "text-count", "text-cooccur")
#: the kinds whose target depends on the text only, through one exactly held text feature (issue 39's known answers)
TEXT_FEATURES = ("text-order", "text-place", "text-count", "text-cooccur")
FAMILIES = ("none", "independent", "shared")


@dataclass(frozen=True)
class Population:
    """What every data set of one simulated study shares (see the module docstring)."""

    kind: str = "planted"
    seed: int = 0  #: the population's own draws (vocabulary, embeddings, effects, mixing)
    vocab: int = 40
    words: int = 6  #: words per prompt
    relevant: int = 4  #: words that move the target
    latent: int = 4  #: dimensions of the hidden plan
    layers: int = 4
    d: int = 48  #: activation width
    outputs: int = 36
    text_share: float = 0.25  #: share of the target's variance the words explain
    hidden_share: float = 0.35  #: share the hidden latent explains (planted only)
    latent_from: int = 2  #: first layer that holds the latent
    act_noise: float = 1.0  #: activation noise sd (per coordinate; signal coordinates have sd ~1)
    family_size: int = 0  #: prompts per family (0: independent prompts)
    family: str = "none"  #: how families act (FAMILIES; see the module docstring)
    family_share: float = 0.3  #: share of the target's variance the family effect explains
    family_act: float = 1.0  #: scale of the family effect in the activations
    #: unequal families (issue 39): the sizes of the families, cycled until n prompts are drawn (with `family_size` > 0
    #: only as the switch that families exist); () for families of `family_size` each
    family_sizes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind {self.kind!r}: one of {', '.join(KINDS)}")
        if self.family not in FAMILIES or (self.family != "none") != (self.family_size > 0):
            raise ValueError(f"family {self.family!r} with family_size {self.family_size}: one of {', '.join(FAMILIES)}, "
                             "and a size > 0 exactly when it is not 'none'")

    def _draws(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        return {"emb": rng.normal(size=(self.vocab, self.d)),
                "text_w": rng.normal(size=(self.relevant, self.outputs)),
                "hidden_w": rng.normal(size=(self.latent, self.outputs)),
                "mix": rng.normal(size=(self.layers, self.latent, self.d)),
                "word_mix": rng.normal(size=(self.layers, self.d, self.d)) / np.sqrt(self.d),
                "fam_mix": rng.normal(size=(self.latent, self.d)),
                "fam_w": rng.normal(size=(self.latent, self.outputs))}

    def sample(self, n: int, seed: int) -> "DataSet":
        """n prompts of this population from generator `seed`."""
        p = self._draws()
        rng = np.random.default_rng([self.seed, seed])
        bag = np.zeros((n, self.vocab))
        counts = np.full(n, self.words)
        if self.kind == "text-count":
            counts = rng.integers(max(2, self.words - 3), min(self.vocab, self.words + 3) + 1, size=n)
        for i in range(n):
            bag[i, rng.choice(self.vocab, size=int(counts[i]), replace=False)] = 1.0
        texts = [" ".join(f"w{j:02d}" for j in np.flatnonzero(row)) for row in bag]
        order = np.zeros(n)
        feature = np.zeros((n, 0))  # the text features a text-feature kind's target and activations hold
        if self.kind == "text-order":
            texts = []
            for i in range(n):
                ws = [f"w{j:02d}" for j in rng.permutation(np.flatnonzero(bag[i]))]
                while True:  # two places at least 3 apart among words + 2
                    a, b = rng.choice(len(ws) + 2, size=2, replace=False)
                    if abs(int(a) - int(b)) >= 3:
                        break
                out = [None] * (len(ws) + 2)
                out[a], out[b] = "ma", "mb"
                rest = iter(ws)
                texts.append(" ".join(w if w is not None else next(rest) for w in out))
                order[i] = 1.0 if a < b else -1.0
        elif self.kind in ("text-place", "text-count", "text-cooccur"):
            texts, raw = [], []
            for i in range(n):
                ws = [f"w{j:02d}" for j in rng.permutation(np.flatnonzero(bag[i]))]
                if self.kind == "text-place":
                    at = int(rng.integers(0, len(ws) + 1))
                    ws.insert(at, "mk")
                    raw.append([at])
                elif self.kind == "text-count":
                    raw.append([len(ws), len(ws) % 2])
                else:  # a marker or its stand-in in each of two slots: the word count says nothing of the markers
                    has = rng.random(2) < 0.5
                    for m, h in zip(("ma", "mb"), has):
                        ws.insert(int(rng.integers(0, len(ws) + 1)), m if h else "f" + m[1])
                    raw.append([float(has[0] != has[1])])
                texts.append(" ".join(ws))
            f = np.asarray(raw, dtype=np.float64)
            feature = (f - f.mean(axis=0)) / np.where(f.std(axis=0) > 0, f.std(axis=0), 1.0)
        hidden = rng.normal(size=(n, self.latent))
        emb_mean = bag @ p["emb"] / counts[:, None]  # the input embeddings averaged over the prompt
        # population variances of the two effects, so that each explains its stated share of the target
        q = self.words / self.vocab
        text_var = q * (1 - q) * (p["text_w"] ** 2).sum(axis=0).mean()
        hidden_var = (p["hidden_w"] ** 2).sum(axis=0).mean()
        text = (bag[:, :self.relevant] - q) @ p["text_w"] / np.sqrt(text_var)
        if self.kind == "text-order":
            text = order[:, None] * p["text_w"][0] / np.sqrt((p["text_w"][0] ** 2).mean())
        if feature.shape[1]:  # each held feature along its own direction, equal shares, unit variance per output
            w = p["text_w"][: feature.shape[1]] if self.relevant >= feature.shape[1] else np.resize(p["text_w"], (feature.shape[1], self.outputs))
            text = feature @ w / np.sqrt((w ** 2).sum(axis=0).mean())
        hid = hidden @ p["hidden_w"] / np.sqrt(hidden_var)
        if self.kind == "null":
            shares = (0.0, 0.0)
        elif self.kind in ("text-only",) + TEXT_FEATURES:
            shares = (self.text_share, 0.0)
        else:
            shares = (self.text_share, self.hidden_share)
        groups = None
        fam_y = fam_x = np.zeros((n, 1))
        fshare = 0.0
        if self.family_size:
            groups = np.arange(n) // self.family_size
            if self.family_sizes:
                cycle = np.resize(np.asarray(self.family_sizes), n)  # enough sizes for n prompts
                groups = np.repeat(np.arange(n), cycle)[:n]
            nf = int(groups.max()) + 1
            lat_x = rng.normal(size=(nf, self.latent))  # new families in every data set
            lat_y = lat_x if self.family == "shared" else rng.normal(size=(nf, self.latent))
            fam_x = self.family_act * (lat_x @ p["fam_mix"])[groups]
            fam_y = (lat_y @ p["fam_w"] / np.sqrt((p["fam_w"] ** 2).sum(axis=0).mean()))[groups]
            fshare = self.family_share
        noise = rng.normal(size=(n, self.outputs)) * np.sqrt(1 - sum(shares) - fshare)
        y = np.sqrt(shares[0]) * text + np.sqrt(shares[1]) * hid + np.sqrt(fshare) * fam_y + noise
        words_part = emb_mean * np.sqrt(self.words)  # unit-scale coordinates
        xs = []
        for layer in range(self.layers):
            x = words_part @ p["word_mix"][layer] + self.act_noise * rng.normal(size=(n, self.d)) + fam_x
            if self.kind == "planted" and layer >= self.latent_from:
                x = x + hidden @ p["mix"][layer]
            if self.kind == "text-order":
                x = x + order[:, None] * p["mix"][layer][0]
            if feature.shape[1]:
                x = x + feature @ p["mix"][layer][: feature.shape[1]]
            xs.append(x)
        return DataSet(texts, xs, y, emb_mean, groups)


@dataclass
class DataSet:
    texts: list[str]
    xs: list[np.ndarray]  #: per layer [n, d]
    y: np.ndarray  #: [n, outputs]
    emb_mean: np.ndarray  #: [n, d] the prompt's input embeddings averaged (a lexical baseline's features)
    groups: np.ndarray | None = None  #: [n] family labels (None: independent prompts)


def expected_r2(pop: Population, n_train: int, feature_sets: Sequence[str], grid, draws: int = 40,
                n_test: int = 2000, seed: int = 10_000, grouped: bool = True, n_full: int | None = None
                ) -> dict[str, float]:
    """The expected pooled R^2, on new prompts, of the probe trained on `n_train` prompts with every choice made
    inside its own folds, per feature set (`resid`: the layer chosen too; `tfidf`, on the stage's baseline grid with
    every component; `emb_mean`); the mean over `draws` fresh training sets, each scored on its own fresh test set of
    `n_test` prompts. With families the training set is whole families (the first families of a fresh draw, up to
    the family boundary nearest `n_train`), the test set new families (the estimand "new prompts of new families"),
    and the inner folds are grouped (`grouped`) as the stage's. `n_full`: the size of the data sets whose procedure
    is meant: its grouping design (`interp.grouping.design`) then sets the folds, and n_train = (K-1)/K of it."""
    from interp.grouping import design
    from interp.probes import LayerSweep, pooled_r2, tfidf_features

    if n_full is not None and pop.family_size and grouped:
        dsg = design(pop.sample(n_full, seed - 1).groups, grid)
        grid = dsg.grid
        n_train = n_full - n_full // grid.outer
    out: dict[str, list[float]] = {f: [] for f in feature_sets}
    for r in range(draws):
        ds = pop.sample(n_train + n_test, seed + r)
        tr, te = np.arange(n_train), np.arange(n_train, n_train + n_test)
        if ds.groups is not None:
            ends = np.flatnonzero(np.r_[ds.groups[1:] != ds.groups[:-1], True]) + 1  # rows up to each family's end
            cut = int(ends[np.argmin(np.abs(ends - n_train))])
            tr, te = np.arange(cut), np.arange(cut, len(ds.groups))
        folds = [(tr, te)]
        for f in feature_sets:
            xs = {"resid": ds.xs, "tfidf": [tfidf_features(ds.texts)], "emb_mean": [ds.emb_mean]}[f]
            groups = None if ds.groups is None or not grouped else ds.groups
            g = grid.with_full() if f == "tfidf" else grid
            res = LayerSweep(xs, g, seed + r, folds=folds, groups=groups).best(ds.y)
            out[f].append(pooled_r2(ds.y[te], res.pred[te]))
    return {f: float(np.mean(v)) for f, v in out.items()}


def interval_replications(pop: Population, n: int, reps: int, grid, repeats: int = 1, seed: int = 100,
                          n_boot: int = 1000, grouped: bool = True) -> list[dict[str, Any]]:
    """Per simulated data set of n prompts: the probe's (layer chosen inside the folds) and the paper's TF-IDF
    baseline's intervals as the probe stage computes them (`interp.intervals`, `repeats` partitions; the grouping
    design of `interp.grouping`, the baseline on the stage's grid with every component), beside the prompt bootstrap
    of fixed out-of-fold predictions that the stage used before (issue 19), and whether the probe predicts the mean
    (`at_mean`: the stage reports "no signal" and no Delta interval then). With families and `grouped`: the stage's
    grouped procedure; `grouped=False`: the paper's procedure (prompt-level folds and fold sums), whatever the
    population."""
    from interp.grouping import design
    from interp.intervals import at_the_mean, cluster_sums, fold_sums, r2_interval, repeat_seed, test_over_train
    from interp.probes import LayerSweep, bootstrap_ci, delta_bootstrap_ci, tfidf_features

    out = []
    for r in range(reps):
        ds = pop.sample(n, seed + r)
        dsg = design(ds.groups if grouped else None, grid)
        groups, g = dsg.groups, dsg.grid
        ratio = test_over_train(n, g.outer)
        tf = tfidf_features(ds.texts)
        sse_p, sse_t, sst = [], [], []
        rec: dict[str, Any] = {"procedure": dsg.procedure}
        for j in range(repeats):
            probe = LayerSweep(ds.xs, g, repeat_seed(r, j), groups=groups)
            text = LayerSweep([tf], g.with_full(), repeat_seed(r, j), groups=groups)
            bp, bt = probe.best(ds.y), text.layer(ds.y, 0)
            if groups is None:
                a, b = fold_sums(ds.y, bp.pred, probe.outer)
                at = fold_sums(ds.y, bt.pred, probe.outer)[0]
            else:
                a, b = cluster_sums(ds.y, bp.pred, groups)
                at = cluster_sums(ds.y, bt.pred, groups)[0]
            sse_p.append(a), sse_t.append(at), sst.append(b)
            if j == 0:
                rec.update(r2=bp.r2, delta=bp.r2 - bt.r2, old_r2=bootstrap_ci(ds.y, bp.pred, n_boot, r),
                           old_delta=delta_bootstrap_ci(ds.y, bp.pred, bt.pred, n_boot, r),
                           at_mean=at_the_mean(ds.y, bp.pred, probe.outer))
        folds = dsg.interval_folds
        rec["new_r2"] = r2_interval(np.stack(sse_p), np.stack(sst), n, ratio, folds=folds)
        rec["new_delta"] = dsg.delta_interval(np.stack(sse_p), np.stack(sse_t), np.stack(sst), n, ratio)
        out.append(rec)
    return out


#: how a permutation test treats families: the paper's (prompt-level folds and permutations), the stage's grouping
#: design (`interp.grouping`: grouped folds, whole-block permutations among equal sizes or group reassignment when
#: sizes differ), grouped folds with within-block permutations only, and grouped folds with whole blocks exchanged
#: only among blocks of their size (the stage before issue 39, whatever the sizes)
PROCEDURES = ("paper", "grouped", "within", "same-size")


def delta_test_replications(pop: Population, n: int, reps: int, grid, n_perm: int, seed: int = 700,
                            procedure: str = "grouped") -> list[dict[str, Any]]:
    """Per simulated data set: the headline Delta (best row - TF-IDF) and its permutation p under `procedure`
    (PROCEDURES): the calibration of the test under a family null, and its power on a planted plan. Also the share
    of rows the permutations moved to another family (`moved`) and the grouping procedure that ran."""
    from interp.grouping import design, moved_share
    from interp.probes import LayerSweep, perm_p, permutations, tfidf_features

    if procedure not in PROCEDURES:
        raise ValueError(f"procedure {procedure!r}: one of {', '.join(PROCEDURES)}")
    out = []
    for r in range(reps):
        ds = pop.sample(n, seed + r)
        dsg = design(None if procedure == "paper" else ds.groups, grid)
        groups, g = dsg.groups, dsg.grid
        probe = LayerSweep(ds.xs, g, r, groups=groups)
        text = LayerSweep([tfidf_features(ds.texts)], g.with_full(), r, groups=groups)
        delta = probe.best(ds.y).r2 - text.layer(ds.y, 0).r2
        if procedure == "grouped":
            perms = dsg.permutations(n, n_perm, seed + r)
        else:
            perms = permutations(n, n_perm, seed + r, groups, within_only=procedure == "within")
        null = probe.permuted_r2(ds.y, perms) - text.permuted_r2(ds.y, perms)
        out.append({"delta": delta, "p": perm_p(null, delta), "moved": moved_share(ds.groups, perms),
                    "procedure": dsg.procedure, "scheme": dsg.scheme})
    return out


def beyond_text_test(xs: Sequence[np.ndarray], texts: Sequence[str], y: np.ndarray, grid, n_perm: int, seed: int,
                     extra: dict[str, np.ndarray] | None = None, fitted: str | None = None,
                     without: Sequence[str] = (), groups: np.ndarray | None = None,
                     baseline_grid: Any = "full", screened: bool = True, statistic: str = "both") -> dict[str, Any]:
    """The beyond-text test of one data set, as the probe stage runs it: every lexical baseline (and `extra` ones,
    e.g. the averaged input embeddings) probed with nested CV on the stage's baseline grid (`grid` with "every
    component", ridge on the whole design: `Grid.with_full`), the strongest that carries variance is the ceiling, and
    Freedman-Lane's p of the probe's (layer chosen inside the folds) Delta against it, with the permutations of the
    grouping design of `groups` (`interp.grouping`). Also the text features' readable share of what the probe decodes
    (`text_readable`: the best baseline's R^2 with the probe's out-of-fold predictions as its targets). `statistic`:
    "both", the stage's (`interp.baselines.both_p`: the larger p of the two tests below, each of the same null),
    "residual" alone (`interp.baselines.residual_test`: the probe's R^2 of what the ceiling leaves, null worlds from
    the ceiling's in-sample fit), or "difference" alone (the beyond-text Delta itself, the test before issue 39's last
    fix; alone it is that issue's broken variant). `fitted` (the difference only): "cross", the ceiling's out-of-fold
    predictions (that test's), or "in-sample", one fit on all prompts (the test before issue 28, its broken
    variant). `without`: baselines left out (a broken variant).
    `baseline_grid`: "full" (the stage's) or "pca" (the baselines on the probe's PCA grid only: the broken variant
    of issue 39). `screened`: the lexical readings also through their SCREEN most associated columns as ceilings
    (the stage's; False: the whole designs only, the test before)."""
    from interp.baselines import (LEXICAL, SCREEN, ScreenedSweep, both_p, ceiling_fit, freedman_lane, lexical_features,
                                  readable_share, residual_test)
    from interp.grouping import design
    from interp.probes import LayerSweep, carries_variance

    dsg = design(groups, grid)
    grid = dsg.grid
    bgrid = grid.with_full() if baseline_grid == "full" else grid
    feats = {**lexical_features(texts), **(extra or {})}
    feats = {k: v for k, v in feats.items() if carries_variance(v) and k not in without}
    sweeps = {k: LayerSweep([v], bgrid, seed, groups=dsg.groups) for k, v in feats.items()}
    probe = LayerSweep(xs, grid, seed, groups=dsg.groups)
    # each lexical reading also through its SCREEN columns most associated with the targets, as the stage does
    ceilings: dict[str, Any] = dict(sweeps)
    if screened:
        ceilings.update({f"{k}/{keep}": ScreenedSweep(v, y, grid, probe.outer, dsg.groups, keep)
                         for k, v in feats.items() if k in LEXICAL for keep in SCREEN if v.shape[1] > keep})
    if not ceilings:
        raise ValueError("no text baseline varies across these prompts (their texts read the same): no ceiling")
    res = {k: sw.layer(y, 0) for k, sw in ceilings.items()}
    r2 = {k: v.r2 for k, v in res.items()}
    top = max(r2, key=lambda k: (round(r2[k], 9), -list(r2).index(k)))
    best = probe.best(y)
    rp = best.r2
    perms = dsg.permutations(len(y), n_perm, seed)
    keep = int(top.split("/")[1]) if "/" in top else None
    r2_residual = p_residual = p_delta = None
    if statistic in ("both", "residual"):
        fit = ceiling_fit(feats[top.split("/")[0]], y, bgrid, seed, dsg.groups, keep)
        p_residual, _, r2_residual = residual_test(probe, ceilings[top], fit, y, perms)
    if statistic in ("both", "difference"):
        # cross-fitted values (that test's), or one fit on all prompts (the test before issue 28; a screened ceiling's
        # columns screened on all of them too), whose folds never knew the groups
        fit = (res[top].pred if (fitted or "cross") == "cross"
               else ceiling_fit(feats[top.split("/")[0]], y, bgrid, seed, None, keep))
        p_delta, _ = freedman_lane(probe, ceilings[top], fit, y, rp - r2[top], n_perm, seed, perms=perms)
    p_fl = both_p(p_delta, p_residual) if statistic == "both" else (p_residual if statistic == "residual" else p_delta)
    readable, readable_by, _ = readable_share(best.pred, feats, sweeps, bgrid, probe.outer, dsg.groups)
    return {"baseline": top, "r2_baseline": r2[top], "r2_probe": rp, "beyond": rp - r2[top], "p_fl": p_fl,
            "r2_residual": r2_residual, "p_delta": p_delta, "p_residual": p_residual,
            "baselines": r2, "text_readable": readable, "text_readable_by": readable_by, "probe": probe,
            "sweeps": sweeps, "design": dsg}


def organism_prompts(name: str = "random-planner", swapped: bool = False, seed: int = 0) -> tuple[list[Any], np.ndarray]:
    """The held-out prompts of a committed organism, and per prompt its order bit: with `swapped`, a seeded half of
    them say "by the {place}" before "at {time}" (bit 1; the two words never adjacent), for a target that depends
    on word order only."""
    from interp.organisms import WEIGHTS
    from interp.prompts import PromptItem, load_prompts

    items = load_prompts(WEIGHTS / name / "prompts.jsonl")
    bits = np.zeros(len(items))
    if swapped:
        import re

        flip = np.random.default_rng(seed).random(len(items)) < 0.5
        out = []
        for it, f in zip(items, flip):
            m = re.search(r"(at \w+) (by the \w+)", it.text)
            text = it.text.replace(m.group(0), f"{m.group(2)} {m.group(1)}") if (f and m) else it.text
            bits[len(out)] = float(bool(f and m))
            out.append(PromptItem(it.id, it.task, text, it.subject))
        items = out
    return items, bits


def organism_activations(items: Sequence[Any], name: str = "random-planner", position: str = "last") -> list[np.ndarray]:
    """Per site [n, d_model] residual-stream activations of a committed organism (a real trained transformer) at a
    token position of each prompt (zero-shot protocol), as the capture stage takes them."""
    from interp.prompts import Protocol, build
    from interp.runtime import Runtime

    rt = Runtime.load(f"organism:{name}", device="cpu")
    built = [build(i, Protocol("zero-shot", 0), rt.tokenizer) for i in items]
    acts = rt.capture([b.tokens for b in built], [[b.positions[position]] for b in built])[:, :, 0, :].numpy()
    return [acts[:, layer].astype(np.float64) for layer in range(acts.shape[1])]


def word_targets(feature: np.ndarray, reps: int, share: float = 0.3, outputs: int = 36, seed: int = 0
                 ) -> list[np.ndarray]:
    """`reps` target sets [n, outputs] that depend on the text only through one prompt-level feature (a word's
    presence, a word order bit): share * that feature along a random direction + noise, each seeded."""
    z = (feature - feature.mean()) / feature.std()
    out = []
    for r in range(reps):
        rng = np.random.default_rng([seed, r])
        out.append(np.sqrt(share) * z[:, None] * rng.normal(size=outputs) + np.sqrt(1 - share) * rng.normal(size=(len(z), outputs)))
    return out


def beyond_text_replications(pop: Population, n: int, reps: int, grid, n_perm: int, seed: int = 500,
                             fitted: str | None = None, without: Sequence[str] = (), baseline_grid: str = "full",
                             screened: bool = True, statistic: str = "both") -> list[dict[str, Any]]:
    """Per simulated data set: the beyond-text Delta against the strongest lexical baseline (the lexical readings
    of the text and the prompt's averaged input embeddings) with its Freedman-Lane p, and, for comparison, the
    paper's Delta against TF-IDF with its plain permutation p (null: targets independent of everything)."""
    from interp.probes import perm_p

    out = []
    for r in range(reps):
        ds = pop.sample(n, seed + r)
        got = beyond_text_test(ds.xs, ds.texts, ds.y, grid, n_perm, r, {"embedding-mean": ds.emb_mean}, fitted, without,
                               groups=ds.groups, baseline_grid=baseline_grid, screened=screened, statistic=statistic)
        probe, tfidf, dsg = got.pop("probe"), got.pop("sweeps")["tfidf"], got.pop("design")
        perms = dsg.permutations(n, n_perm, r)
        null = probe.permuted_r2(ds.y, perms) - tfidf.permuted_r2(ds.y, perms)
        paper = got["r2_probe"] - got["baselines"]["tfidf"]
        out.append({**got, "paper_delta": paper, "p_paper": perm_p(null, paper)})
    return out


__all__ = ["DataSet", "FAMILIES", "KINDS", "TEXT_FEATURES", "PROCEDURES", "Population", "beyond_text_replications", "beyond_text_test",
           "organism_activations", "organism_prompts", "word_targets", "delta_test_replications",
           "expected_r2", "interval_replications"]
