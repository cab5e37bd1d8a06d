"""Statistics of repeated-attempt consistency on DINO features (paper appendix E.2/E.3), on arrays.

Given one model's renders grouped by prompt (the attempts of a prompt share a label):

- **Global coherence** (`prompt_coherence`), on CLS embeddings with the cosine distance
  d(a, b) = 1 - cos(a, b):
  * `d_intra` = mean over prompts of the mean distance between two attempts of that prompt;
  * `d_inter` = mean over unordered pairs of distinct prompts (p, q) of the mean distance between an
    attempt of p and an attempt of q;
  * `ratio` = d_intra / d_inter: 0 when every prompt's attempts coincide, about 1 when attempts
    carry nothing of their prompt (then within- and between-prompt pairs are draws of one law);
    lower = tighter within-prompt clusters (paper Table 7);
  * `silhouette`: scikit-learn's mean silhouette with the prompt as the cluster label, on the same
    cosine distances: about 1 for tight, separated prompt clusters; negative when attempts sit closer
    to another prompt's attempts than to their own. With no prompt structure at all it is about 0 for
    a few large clusters and clearly negative for many small ones (each render's nearest other prompt
    is the minimum over many noisy means: -0.24 for 60 prompts x 5 random attempts).
  Every prompt counts once in d_intra and every prompt pair once in d_inter, whatever its number of
  attempts; prompts need two attempts (callers drop the others and count them).
- **Local structure** (`local_distances`), on the last layer's patch keys, after the structure
  descriptor of Tumanyan et al. (2022, "Splicing ViT features"): for render i, K_i holds one key per
  canvas cell (unit-normalised) and S_i = K_i K_i^T is its cosine self-similarity, a cells x cells
  matrix that describes how the parts of the picture relate to each other, not what they are. For two
  attempts i, j of one prompt, with F_i the foreground cells of i (colour differs from its
  background) and M = F_i | F_j (so a part drawn in one attempt and absent or elsewhere in the other
  counts), the **local-structure distance** is the mean absolute difference of the two matrices over
  ordered pairs of distinct cells of M:
      d_loc(i, j) = sum_{c != c' in M} |S_i[c, c'] - S_j[c, c']| / (|M| (|M| - 1)),
  in [0, 2]; pairs with |M| < 2 are skipped. A mean (not Tumanyan's Frobenius norm) so that pictures
  with little and much foreground are on one scale. Per prompt: the mean over its attempt pairs; per
  model or tier: the mean over prompts.
- **The entropy confound** (`entropy_fit`): across models, Spearman's rho between mean per-token
  entropy and local-structure distance (exact permutation p-value up to 8 models, scipy's
  t-approximation above), and the **entropy-adjusted residual** of each model: an ordinary
  least-squares line distance = intercept + slope * entropy fitted across the models, residual =
  observed - fitted (negative: more locally consistent than its entropy predicts). With fewer than
  three models (a line through two points leaves no residual) or no spread in entropy, the numbers
  are None and `note` says why.
- **A 2-D map** (`project_2d`): UMAP (umap-learn) or t-SNE (scikit-learn) of the CLS embeddings,
  cosine metric, seeded.
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Any, Sequence

import numpy as np
from jaxtyping import Bool, Float, UInt8

#: up to this many models the Spearman p-value is exact (all n! orderings: 40,320 for 8)
EXACT_P_MAX = 8


def foreground(pixels: UInt8[np.ndarray, "n n 3"], background: Sequence[int]) -> Bool[np.ndarray, "cells"]:
    """Cells whose colour differs from the render's background (the occupancy targets' definition,
    `interp.probes.occupancy`), flattened row-major like the DINO patch tokens."""
    return np.any(np.asarray(pixels) != np.asarray(background, dtype=np.asarray(pixels).dtype), axis=-1).ravel()


def cosine_distances(x: Float[np.ndarray, "n d"]) -> Float[np.ndarray, "n n"]:
    """1 - cosine similarity, float64, exact zeros on the diagonal."""
    v = np.asarray(x, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    d = np.clip(1.0 - v @ v.T, 0.0, 2.0)
    np.fill_diagonal(d, 0.0)
    return d


def prompt_coherence(emb: Float[np.ndarray, "n d"], labels: Sequence[Any]) -> dict[str, Any]:
    """d_intra, d_inter, ratio and silhouette of embeddings grouped by prompt label (module docstring).

    Labels with a single member are an error (the caller keeps prompts with two or more attempts);
    with fewer than two prompts d_inter, ratio and silhouette are None."""
    from sklearn.metrics import silhouette_score

    labels = list(labels)
    names, idx = np.unique(np.asarray(labels, dtype=object).astype(str), return_inverse=True)
    counts = np.bincount(idx, minlength=len(names)).astype(np.float64)
    if len(labels) != len(emb):
        raise ValueError("one label per embedding")
    if len(names) and counts.min() < 2:
        raise ValueError("every prompt needs at least two attempts")
    out: dict[str, Any] = {"n_renders": len(labels), "n_prompts": len(names), "d_intra": None, "d_inter": None,
                           "ratio": None, "silhouette": None}
    if not len(names):
        return out
    d = cosine_distances(emb)
    g = np.zeros((len(labels), len(names)))
    g[np.arange(len(labels)), idx] = 1.0
    block = g.T @ d @ g  # [prompts, prompts]: summed distances between the attempts of p and of q
    intra = np.diag(block) / (counts * (counts - 1))
    out["d_intra"] = float(intra.mean())
    if len(names) >= 2:
        means = block / np.outer(counts, counts)
        iu = np.triu_indices(len(names), k=1)
        out["d_inter"] = float(means[iu].mean())
        out["ratio"] = out["d_intra"] / out["d_inter"] if out["d_inter"] > 0 else None
        out["silhouette"] = float(silhouette_score(d, idx, metric="precomputed"))
    return out


def self_similarity(keys: Float[np.ndarray, "m cells dk"]) -> Float[np.ndarray, "m cells cells"]:
    """Cosine self-similarity of each render's patch keys."""
    k = np.asarray(keys, dtype=np.float32)
    k = k / np.maximum(np.linalg.norm(k, axis=-1, keepdims=True), 1e-12)
    return np.einsum("mcd,med->mce", k, k)


def local_distances(keys: Float[np.ndarray, "m cells dk"], fg: Bool[np.ndarray, "m cells"]) -> list[float]:
    """d_loc (module docstring) for every pair i < j of one prompt's m attempts, in pair order; pairs
    whose joint foreground has fewer than two cells are left out."""
    s = self_similarity(keys)
    fg = np.asarray(fg, dtype=bool)
    out = []
    for i, j in itertools.combinations(range(len(s)), 2):
        m = fg[i] | fg[j]
        k = int(m.sum())
        if k < 2:
            continue
        diff = np.abs(s[i][np.ix_(m, m)].astype(np.float64) - s[j][np.ix_(m, m)])
        np.fill_diagonal(diff, 0.0)  # the diagonal is 1 - 1 by construction; rounding is not a distance
        out.append(float(diff.sum() / (k * (k - 1))))
    return out


def _spearman_p_exact(x: np.ndarray, y: np.ndarray, rho: float) -> float:
    from scipy.stats import rankdata

    rx, ry = rankdata(x), rankdata(y)
    perms = np.array(list(itertools.permutations(range(len(y)))))
    ryp = ry[perms]
    rxc, rypc = rx - rx.mean(), ryp - ryp.mean(axis=1, keepdims=True)
    r = (rypc @ rxc) / (np.sqrt((rxc ** 2).sum()) * np.sqrt((rypc ** 2).sum(axis=1)))
    return float(np.mean(np.abs(r) >= abs(rho) - 1e-12))


def entropy_fit(entropy: Sequence[float], distance: Sequence[float]) -> dict[str, Any]:
    """Spearman rho (and p) between the models' mean entropy and local-structure distance, the OLS line
    of distance on entropy, and each model's residual (observed - fitted), in the input order."""
    from scipy.stats import spearmanr

    x, y = np.asarray(entropy, dtype=np.float64), np.asarray(distance, dtype=np.float64)
    n = len(x)
    out: dict[str, Any] = {"n_models": n, "rho": None, "p": None, "p_method": None, "slope": None, "intercept": None,
                           "fitted": [None] * n, "residual": [None] * n, "note": None}
    if len(y) != n:
        raise ValueError("one distance per entropy")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("entropies and distances must be finite numbers")
    if n < 3:
        out["note"] = f"needs at least 3 models with both numbers (has {n}): a line through {n} point(s) leaves no residual"
        return out
    if np.ptp(x) == 0:
        out["note"] = "every model has the same mean entropy: no correlation or line can be fitted"
        return out
    slope, intercept = np.polyfit(x, y, 1)
    fitted = intercept + slope * x
    out.update(slope=float(slope), intercept=float(intercept), fitted=[float(v) for v in fitted],
               residual=[float(v) for v in y - fitted])
    if np.ptp(y) == 0:
        out["note"] = "every model has the same local-structure distance: Spearman's rho is undefined"
        return out
    rho = float(spearmanr(x, y).statistic)
    out["rho"] = rho
    if n <= EXACT_P_MAX:
        out["p"], out["p_method"] = _spearman_p_exact(x, y, rho), f"exact (all {math.factorial(n)} orderings)"
    else:
        out["p"], out["p_method"] = float(spearmanr(x, y).pvalue), "t-approximation (scipy)"
    return out


def project_2d(emb: Float[np.ndarray, "n d"], method: str = "umap", seed: int = 0,
               neighbors: int = 15) -> Float[np.ndarray, "n 2"]:
    """A seeded 2-D map of embeddings (cosine metric): UMAP (`umap-learn`) or t-SNE (scikit-learn).
    Needs at least 4 points; neighbours / perplexity shrink to what the number of points allows."""
    x = np.asarray(emb, dtype=np.float32)
    n = len(x)
    if n < 4:
        raise ValueError(f"a 2-D map needs at least 4 renders (has {n})")
    if method == "umap":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "n_jobs overridden by random_state": one thread is the price of a seed
            import umap

            reducer = umap.UMAP(n_components=2, n_neighbors=max(2, min(neighbors, n - 1)), metric="cosine",
                                random_state=seed, init="spectral" if n > 10 else "random")
            return np.asarray(reducer.fit_transform(x), dtype=np.float64)
    if method == "tsne":
        from sklearn.manifold import TSNE

        # exact gradients below 500 points: Barnes-Hut's tree costs more than it saves there (40 points
        # took 5-60 s with it on 2 busy cores, 0.5 s exact)
        tsne = TSNE(n_components=2, perplexity=float(max(1.0, min(30.0, (n - 1) / 3))), metric="cosine", init="pca",
                    random_state=seed, method="exact" if n <= 500 else "barnes_hut")
        return np.asarray(tsne.fit_transform(x), dtype=np.float64)
    raise ValueError(f"unknown projection {method!r}: use umap or tsne")
