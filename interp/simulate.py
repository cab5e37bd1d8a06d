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

KINDS = ("planted", "null", "text-only", "text-order")
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
        for i in range(n):
            bag[i, rng.choice(self.vocab, size=self.words, replace=False)] = 1.0
        texts = [" ".join(f"w{j:02d}" for j in np.flatnonzero(row)) for row in bag]
        order = np.zeros(n)
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
        hidden = rng.normal(size=(n, self.latent))
        emb_mean = bag @ p["emb"] / self.words  # the input embeddings averaged over the prompt
        # population variances of the two effects, so that each explains its stated share of the target
        q = self.words / self.vocab
        text_var = q * (1 - q) * (p["text_w"] ** 2).sum(axis=0).mean()
        hidden_var = (p["hidden_w"] ** 2).sum(axis=0).mean()
        text = (bag[:, :self.relevant] - q) @ p["text_w"] / np.sqrt(text_var)
        if self.kind == "text-order":
            text = order[:, None] * p["text_w"][0] / np.sqrt((p["text_w"][0] ** 2).mean())
        hid = hidden @ p["hidden_w"] / np.sqrt(hidden_var)
        if self.kind == "null":
            shares = (0.0, 0.0)
        elif self.kind in ("text-only", "text-order"):
            shares = (self.text_share, 0.0)
        else:
            shares = (self.text_share, self.hidden_share)
        groups = None
        fam_y = fam_x = np.zeros((n, 1))
        fshare = 0.0
        if self.family_size:
            groups = np.arange(n) // self.family_size
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
                n_test: int = 2000, seed: int = 10_000, grouped: bool = True) -> dict[str, float]:
    """The expected pooled R^2, on new prompts, of the probe trained on `n_train` prompts with every choice made
    inside its own folds, per feature set (`resid`: the layer chosen too; `tfidf`; `emb_mean`); the mean over
    `draws` fresh training sets, each scored on its own fresh test set of `n_test` prompts. With families the
    training set is whole families (n_train a multiple of the family size), the test set new families (the
    estimand "new prompts of new families"), and the inner folds are grouped (`grouped`) as the stage's."""
    from interp.probes import LayerSweep, pooled_r2, tfidf_features

    out: dict[str, list[float]] = {f: [] for f in feature_sets}
    for r in range(draws):
        ds = pop.sample(n_train + n_test, seed + r)
        folds = [(np.arange(n_train), np.arange(n_train, n_train + n_test))]
        te = folds[0][1]
        for f in feature_sets:
            xs = {"resid": ds.xs, "tfidf": [tfidf_features(ds.texts)], "emb_mean": [ds.emb_mean]}[f]
            groups = None if ds.groups is None or not grouped else ds.groups
            res = LayerSweep(xs, grid, seed + r, folds=folds, groups=groups).best(ds.y)
            out[f].append(pooled_r2(ds.y[te], res.pred[te]))
    return {f: float(np.mean(v)) for f, v in out.items()}


def interval_replications(pop: Population, n: int, reps: int, grid, repeats: int = 1, seed: int = 100,
                          n_boot: int = 1000, grouped: bool = True) -> list[dict[str, Any]]:
    """Per simulated data set of n prompts: the probe's (layer chosen inside the folds) and the paper's TF-IDF
    baseline's intervals as the probe stage computes them (`interp.intervals`, `repeats` partitions), beside the
    prompt bootstrap of fixed out-of-fold predictions that the stage used before (issue 19). With families and
    `grouped`: grouped folds and the groups' sums (the stage's grouped procedure); `grouped=False`: the paper's
    procedure (prompt-level folds and fold sums), whatever the population."""
    from interp.intervals import cluster_sums, delta_interval, fold_sums, r2_interval, repeat_seed, test_over_train
    from interp.probes import LayerSweep, bootstrap_ci, delta_bootstrap_ci, tfidf_features

    out = []
    ratio = test_over_train(n, grid.outer)
    for r in range(reps):
        ds = pop.sample(n, seed + r)
        groups = ds.groups if grouped else None
        tf = tfidf_features(ds.texts)
        sse_p, sse_t, sst = [], [], []
        rec: dict[str, Any] = {}
        for j in range(repeats):
            probe = LayerSweep(ds.xs, grid, repeat_seed(r, j), groups=groups)
            text = LayerSweep([tf], grid, repeat_seed(r, j), groups=groups)
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
                           old_delta=delta_bootstrap_ci(ds.y, bp.pred, bt.pred, n_boot, r))
        folds = None if groups is None else grid.outer
        rec["new_r2"] = r2_interval(np.stack(sse_p), np.stack(sst), n, ratio, folds=folds)
        rec["new_delta"] = delta_interval(np.stack(sse_p), np.stack(sse_t), np.stack(sst), n, ratio, folds=folds)
        out.append(rec)
    return out


#: how a permutation test treats families: the paper's (prompt-level folds and permutations), grouped folds with
#: whole-block + within-block permutations (the stage's), grouped folds with within-block permutations only
PROCEDURES = ("paper", "grouped", "within")


def delta_test_replications(pop: Population, n: int, reps: int, grid, n_perm: int, seed: int = 700,
                            procedure: str = "grouped") -> list[dict[str, Any]]:
    """Per simulated data set: the headline Delta (best row - TF-IDF) and its permutation p under `procedure`
    (PROCEDURES): the calibration of the test under a family null, and its power on a planted plan."""
    from interp.probes import LayerSweep, perm_p, permutations, tfidf_features

    if procedure not in PROCEDURES:
        raise ValueError(f"procedure {procedure!r}: one of {', '.join(PROCEDURES)}")
    out = []
    for r in range(reps):
        ds = pop.sample(n, seed + r)
        groups = None if procedure == "paper" else ds.groups
        probe = LayerSweep(ds.xs, grid, r, groups=groups)
        text = LayerSweep([tfidf_features(ds.texts)], grid, r, groups=groups)
        delta = probe.best(ds.y).r2 - text.layer(ds.y, 0).r2
        perms = permutations(n, n_perm, seed + r, groups, within_only=procedure == "within")
        null = probe.permuted_r2(ds.y, perms) - text.permuted_r2(ds.y, perms)
        out.append({"delta": delta, "p": perm_p(null, delta)})
    return out


def beyond_text_test(xs: Sequence[np.ndarray], texts: Sequence[str], y: np.ndarray, grid, n_perm: int, seed: int,
                     extra: dict[str, np.ndarray] | None = None, fitted: str = "cross",
                     without: Sequence[str] = ()) -> dict[str, Any]:
    """The beyond-text test of one data set, as the probe stage runs it: every lexical baseline (and `extra` ones,
    e.g. the averaged input embeddings) probed with nested CV, the strongest that carries variance is the ceiling,
    and Freedman-Lane's p of the probe's (layer chosen inside the folds) Delta against it. `fitted`: "cross", the
    ceiling's out-of-fold predictions (the stage's), or "in-sample", one fit on all prompts (the test before issue
    28, kept as the broken variant). `without`: baselines left out (a broken variant: no reading of word order)."""
    from interp.baselines import fitted_values, freedman_lane, lexical_features
    from interp.probes import LayerSweep, carries_variance

    feats = {**lexical_features(texts), **(extra or {})}
    feats = {k: v for k, v in feats.items() if carries_variance(v) and k not in without}
    sweeps = {k: LayerSweep([v], grid, seed) for k, v in feats.items()}
    res = {k: sw.layer(y, 0) for k, sw in sweeps.items()}
    r2 = {k: v.r2 for k, v in res.items()}
    top = max(r2, key=lambda k: (round(r2[k], 9), -list(r2).index(k)))
    probe = LayerSweep(xs, grid, seed)
    rp = probe.best(y).r2
    fit = res[top].pred if fitted == "cross" else fitted_values(feats[top], y, grid, seed)
    p_fl, _ = freedman_lane(probe, sweeps[top], fit, y, rp - r2[top], n_perm, seed)
    return {"baseline": top, "r2_baseline": r2[top], "r2_probe": rp, "beyond": rp - r2[top], "p_fl": p_fl,
            "baselines": r2, "probe": probe, "sweeps": sweeps}


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
                             fitted: str = "cross", without: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Per simulated data set: the beyond-text Delta against the strongest lexical baseline (the lexical readings
    of the text and the prompt's averaged input embeddings) with its Freedman-Lane p, and, for comparison, the
    paper's Delta against TF-IDF with its plain permutation p (null: targets independent of everything)."""
    from interp.probes import perm_p, permutations

    out = []
    for r in range(reps):
        ds = pop.sample(n, seed + r)
        got = beyond_text_test(ds.xs, ds.texts, ds.y, grid, n_perm, r, {"embedding-mean": ds.emb_mean}, fitted, without)
        probe, tfidf = got.pop("probe"), got.pop("sweeps")["tfidf"]
        perms = permutations(n, n_perm, r)
        null = probe.permuted_r2(ds.y, perms) - tfidf.permuted_r2(ds.y, perms)
        paper = got["r2_probe"] - got["baselines"]["tfidf"]
        out.append({**got, "paper_delta": paper, "p_paper": perm_p(null, paper)})
    return out


__all__ = ["DataSet", "FAMILIES", "KINDS", "PROCEDURES", "Population", "beyond_text_replications", "beyond_text_test",
           "organism_activations", "organism_prompts", "word_targets", "delta_test_replications",
           "expected_r2", "interval_replications"]
