"""Linear probes for layout plans: occupancy targets, nested-CV ridge probes, controls and statistics.

Targets
- `occupancy(pixels, background)`: a 6x6 grid, the share of non-background cells in each 4x4 block
  of a 24x24 render. Background: the colour of the last full-canvas `fill()` (white when the program
  never fills; for SVG, the most frequent border colour), see `experiments.render.background_of`.
- A model's target for a prompt is the consensus: the per-cell mean over its valid, non-trivial
  attempts; prompts with fewer than `min_attempts` such attempts are dropped (and counted).
- Shared component = consensus of the other models (leave-one-model-out); specific = own - shared.

The probe: standardise -> PCA(k) -> ridge(alpha), 36 outputs at once. Nested cross-validation: the
outer KFold gives out-of-fold predictions; inside each outer training set an inner KFold picks
(k, alpha) (and the layer, for `nested_cv_layers`) by the mean over inner folds of the fold's pooled
R^2. The reported score is the **outer pooled R^2**: 1 - SSE / SST summed over all prompts and cells,
SST around each cell's mean over all prompts.

Speed: one SVD per (fold, layer) serves every PCA size and every alpha. With standardised training
data Z = U S V^T, PCA(k) scores are U_k S_k and ridge on them has the closed form
beta_i = S_i / (S_i^2 + alpha) * U_i^T y_c, so a test prediction for every (k, alpha) costs one small
matrix product. This equals scikit-learn's StandardScaler -> PCA(svd_solver="full") -> Ridge
(perf/bench_probes.py checks R^2 to 1e-9 against GridSearchCV inside cross_val_predict).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

GRID_SIZE = 6
DEFAULT_PCA = (4, 8, 16, 32, 64)
DEFAULT_ALPHAS = tuple(float(a) for a in np.logspace(-2, 5, 15))


def occupancy(pixels: np.ndarray, background: Sequence[int], blocks: int = GRID_SIZE) -> np.ndarray:
    """(blocks, blocks) share of cells that differ from `background` in each block of an (n, n, 3) raster."""
    n = pixels.shape[0]
    if n % blocks:
        raise ValueError(f"a {n}x{n} raster does not split into {blocks}x{blocks} blocks")
    fg = np.any(pixels != np.asarray(background, dtype=pixels.dtype), axis=-1).astype(np.float64)
    b = n // blocks
    return fg.reshape(blocks, b, blocks, b).mean(axis=(1, 3))


def pooled_r2(y: np.ndarray, p: np.ndarray) -> float:
    """1 - SSE/SST pooled over samples and outputs (SST around each output's mean)."""
    sst = float(((y - y.mean(axis=0)) ** 2).sum())
    if sst == 0:
        return float("nan")
    return 1.0 - float(((y - p) ** 2).sum()) / sst


@dataclass(frozen=True)
class Grid:
    pca: tuple[int, ...] = DEFAULT_PCA
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    outer: int = 5
    inner: int = 5

    def usable_pca(self, n_train: int, d: int) -> list[int]:
        ks = [k for k in self.pca if k <= min(n_train, d)]
        return ks or [min(n_train, d)]


def _standardise(xtr: np.ndarray, xte: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu = xtr.mean(axis=0)
    sd = xtr.std(axis=0)
    sd[sd == 0] = 1.0
    return (xtr - mu) / sd, (xte - mu) / sd


def _pca_scores(ztr: np.ndarray, zte: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k left singular vectors U_k and values S_k of ztr, and the test PCA scores zte V_k.

    With fewer samples than features (the usual case: 145 prompts, d_model in the thousands) it works on
    the n x n Gram matrix: ztr ztr^T = U S^2 U^T and V_k = ztr^T U_k / S_k; otherwise a thin SVD."""
    n, d = ztr.shape
    if n <= d:
        w, u = np.linalg.eigh(ztr @ ztr.T)
        order = np.argsort(w)[::-1]
        w, u = w[order], u[:, order]
        keep = w > w[0] * 1e-12 if w[0] > 0 else np.zeros_like(w, dtype=bool)
        kk = min(k, int(keep.sum()))
        u, s = u[:, :kk], np.sqrt(w[:kk])
        pte = (zte @ ztr.T) @ (u / s)
        return u, s, pte
    u, s, vt = np.linalg.svd(ztr, full_matrices=False)
    kk = min(k, s.size)
    return u[:, :kk], s[:kk], zte @ vt[:kk].T


def fold_predictions(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, ks: Sequence[int],
                     alphas: Sequence[float]) -> np.ndarray:
    """Test predictions for every (k, alpha): [len(ks), len(alphas), n_test, n_outputs], one SVD."""
    ztr, zte = _standardise(xtr, xte)
    ym = ytr.mean(axis=0)
    u, s, pte = _pca_scores(ztr, zte, max(ks))
    kmax = s.size
    if kmax == 0:  # constant features (e.g. the same token at layer 0 for every prompt): predict the mean
        out = np.empty((len(ks), len(alphas), xte.shape[0], ytr.shape[1]))
        out[:] = ym
        return out
    uty = u[:, :kmax].T @ (ytr - ym)
    out = np.empty((len(ks), len(alphas), xte.shape[0], ytr.shape[1]))
    for ai, a in enumerate(alphas):
        b = (s[:kmax] / (s[:kmax] ** 2 + a))[:, None] * uty  # [kmax, outputs]
        # cumulative contributions: prediction with k components = sum of the first k terms
        contrib = pte[:, :, None] * b[None, :, :]  # [n_test, kmax, outputs]
        csum = np.cumsum(contrib, axis=1)
        for ki, k in enumerate(ks):
            out[ki, ai] = csum[:, min(k, kmax) - 1, :] + ym
    return out


def _kfold(n: int, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    from sklearn.model_selection import KFold

    return list(KFold(folds, shuffle=True, random_state=seed).split(np.arange(n)))


@dataclass
class ProbeResult:
    r2: float
    pred: np.ndarray  #: out-of-fold predictions [n, outputs]
    chosen: list[dict[str, Any]] = field(default_factory=list)  #: per outer fold: k, alpha (and layer)


def nested_cv(x: np.ndarray, y: np.ndarray, grid: Grid = Grid(), seed: int = 0) -> ProbeResult:
    """Outer pooled R^2 of the probe with (k, alpha) chosen inside each outer training set."""
    return nested_cv_layers([x], y, grid, seed, layer_names=None)


def nested_cv_layers(xs: Sequence[np.ndarray], y: np.ndarray, grid: Grid = Grid(), seed: int = 0,
                     layer_names: Sequence[Any] | None = None) -> ProbeResult:
    """As `nested_cv`, with the layer (one feature matrix per layer) chosen inside the folds as well."""
    n = y.shape[0]
    if n < grid.outer * 2:
        raise ValueError(f"{n} prompts are too few for {grid.outer}-fold nested CV")
    pred = np.zeros_like(y, dtype=np.float64)
    chosen = []
    for tr, te in _kfold(n, grid.outer, seed):
        best = (-np.inf, 0, 0, 0)
        for li, x in enumerate(xs):
            ks = grid.usable_pca(int(len(tr) * (grid.inner - 1) / grid.inner), x.shape[1])
            scores = np.zeros((len(ks), len(grid.alphas)))
            for itr, ite in _kfold(len(tr), grid.inner, seed + 1):
                p = fold_predictions(x[tr[itr]], y[tr[itr]], x[tr[ite]], ks, grid.alphas)
                yt = y[tr[ite]]
                sst = ((yt - yt.mean(axis=0)) ** 2).sum()
                sse = ((p - yt[None, None]) ** 2).sum(axis=(2, 3))
                scores += (1.0 - sse / sst) if sst > 0 else 0.0
            scores /= grid.inner
            ki, ai = np.unravel_index(int(np.argmax(scores)), scores.shape)
            if scores[ki, ai] > best[0]:
                best = (float(scores[ki, ai]), li, ks[ki], grid.alphas[ai])
        _, li, k, a = best
        pred[te] = fold_predictions(xs[li][tr], y[tr], xs[li][te], [k], [a])[0, 0]
        c: dict[str, Any] = {"k": int(k), "alpha": float(a), "inner_r2": best[0]}
        if layer_names is not None:
            c["layer"] = layer_names[li]
        chosen.append(c)
    return ProbeResult(pooled_r2(y, pred), pred, chosen)


def bootstrap_ci(y: np.ndarray, pred: np.ndarray, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Prompt-clustered percentile CI of the pooled R^2 (prompts resampled with replacement)."""
    rng = np.random.default_rng(seed)
    n = y.shape[0]
    stats = np.empty(n_boot)
    for b in range(n_boot):
        idx = rng.integers(0, n, n)
        stats[b] = pooled_r2(y[idx], pred[idx])
    lo, hi = np.nanquantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def permutation_test(x: np.ndarray, y: np.ndarray, observed: float, grid: Grid = Grid(), n_perm: int = 20,
                     seed: int = 0) -> tuple[float, list[float]]:
    """p-value of `observed` against nested-CV R^2 with the targets' rows permuted (seeded)."""
    rng = np.random.default_rng(seed)
    null = [nested_cv(x, y[rng.permutation(y.shape[0])], grid, seed).r2 for _ in range(n_perm)]
    p = (1 + sum(v >= observed for v in null)) / (1 + n_perm)
    return float(p), [float(v) for v in null]


def split_half_ceiling(half_a: np.ndarray, half_b: np.ndarray) -> dict[str, float]:
    """Reliability of the consensus target from two halves of the attempts.

    r = Pearson correlation of the two half-consensus targets, pooled over prompts and cells after
    centring each cell; the ceiling is the Spearman-Brown reliability of the full consensus, 2r/(1+r),
    the share of target variance that is not attempt-sampling noise."""
    a = half_a - half_a.mean(axis=0)
    b = half_b - half_b.mean(axis=0)
    den = np.sqrt((a ** 2).sum() * (b ** 2).sum())
    r = float((a * b).sum() / den) if den > 0 else float("nan")
    return {"r_half": r, "ceiling": 2 * r / (1 + r) if r == r and r > -1 else float("nan")}


def tfidf_features(texts: Sequence[str]) -> np.ndarray:
    """TF-IDF of the prompt texts (word 1-2 grams), dense. Fit on all texts: it sees no targets."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    return TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True).fit_transform(list(texts)).toarray()


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    from scipy.stats import false_discovery_control

    if not len(pvalues):
        return []
    return [float(q) for q in false_discovery_control(np.asarray(pvalues, dtype=float), method="bh")]
