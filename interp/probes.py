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
from typing import Any, Callable, Sequence

import numpy as np
from jaxtyping import Float

from interp.intervals import group_blocks

GRID_SIZE = 6
DEFAULT_PCA = (4, 8, 16, 32, 64)
#: a PCA size meaning "every component": ridge on the whole standardised design, in its dual form (the Gram matrix)
#: when columns outnumber prompts; rows record it as k "all". The lexical baselines take it (issue 39: their sparse
#: one-hot columns reduced to 64 components lost what a single column held)
FULL = 1 << 30
DEFAULT_ALPHAS = tuple(float(a) for a in np.logspace(-2, 5, 15))


def occupancy(pixels: np.ndarray, background: Sequence[int], blocks: int = GRID_SIZE) -> Float[np.ndarray, "blocks blocks"]:
    """(blocks, blocks) share of cells that differ from `background` in each block of an (n, n, 3) raster."""
    n = pixels.shape[0]
    if n % blocks:
        raise ValueError(f"a {n}x{n} raster does not split into {blocks}x{blocks} blocks")
    fg = np.any(pixels != np.asarray(background, dtype=pixels.dtype), axis=-1).astype(np.float64)
    b = n // blocks
    return fg.reshape(blocks, b, blocks, b).mean(axis=(1, 3))


def pooled_r2(y: Float[np.ndarray, "n outputs"], p: Float[np.ndarray, "n outputs"]) -> float:
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
        if FULL in self.pca:  # every component of whatever a fit holds (the fits cap it at their rank)
            return [k for k in ks if k != FULL] + [FULL]
        return ks or [min(n_train, d)]

    def with_full(self) -> "Grid":
        """This grid with "every component" (FULL) among its PCA sizes: ridge on the whole design is a candidate."""
        return self if FULL in self.pca else Grid(tuple(self.pca) + (FULL,), self.alphas, self.outer, self.inner)


#: A feature column whose spread is below this share of its magnitude is constant: its "spread" is the rounding
#: of the mean (a constant column's mean need not be exactly its value), and dividing by it would turn rounding
#: into a unit-variance feature.
CONSTANT_COLUMN = 1e-9
#: A test fold whose targets' sum of squares (around its own mean) is below this share of their magnitude has no
#: variance: its R^2 is undefined, and 1 - sse/sst would be rounding divided by rounding (+-1e13, issue 19).
ZERO_VARIANCE = 1e-10
#: Candidates whose criteria differ by less than this (relative to max(1, |best|)) are ties, broken by the documented
#: order; the criteria of equal candidates differ by rounding (about 1e-14) that another BLAS kernel or thread
#: count changes, so an argmax over them would pick by the last bits.
TIE = 1e-9
#: elements of a product of the inner-fold scoring (targets x PCA scores of a chunk of layers): bounds its memory (one
#: product over the paper's 65 layers was 160 MB per batch); on 16 layers chunks of 0.6M-1e9 elements timed the same
CHUNK = 2_500_000


def _scale(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of each column; a constant column (near-constant: see CONSTANT_COLUMN) gets sd
    inf, so that it standardises to exactly 0 and carries no weight."""
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    const = sd <= CONSTANT_COLUMN * np.abs(x).max(axis=0, initial=0.0)
    sd[const] = np.inf
    mu[const] = 0.0
    return mu, sd


def carries_variance(x: np.ndarray) -> bool:
    """Whether any feature column varies (by `_scale`'s rule): a matrix that does not (the same token's embedding in
    every prompt) standardises to zeros and can only predict the training mean."""
    x = np.asarray(x, dtype=np.float64)
    return bool(np.isfinite(_scale(x)[1]).any()) if x.size else False


def _standardise(xtr: np.ndarray, xte: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # in float64 whatever the store's dtype: float32 arithmetic leaves 1e-7 of rounding in every R^2, which another
    # BLAS kernel changes, and which is larger than TIE
    xtr = np.asarray(xtr, dtype=np.float64)
    xte = np.asarray(xte, dtype=np.float64)
    mu, sd = _scale(xtr)
    return (xtr - mu) / sd, (xte - mu) / sd


def first_best(scores: np.ndarray) -> np.ndarray:
    """Per row of scores [B, ...], the flat index of the first candidate (C order) whose score is within TIE of the
    row's best: near-equal candidates are ties broken by the documented order, never by rounding."""
    flat = scores.reshape(scores.shape[0], -1)
    top = flat.max(axis=1)
    return np.argmax(flat >= (top - TIE * np.maximum(1.0, np.abs(top)))[:, None], axis=1)


def _pca_scores(ztr: np.ndarray, zte: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-k left singular vectors U_k and values S_k of ztr, and the test PCA scores zte V_k.

    With fewer samples than features (the usual case: 145 prompts, d_model in the thousands) it works on
    the n x n Gram matrix: ztr ztr^T = U S^2 U^T and V_k = ztr^T U_k / S_k; otherwise a thin SVD."""
    n, d = ztr.shape
    if n <= d:
        w, u = np.linalg.eigh(ztr @ ztr.T)
        order = np.argsort(w)[::-1]
        w, u = w[order], u[:, order]
        kk = min(k, _rank(np.sqrt(np.clip(w, 0.0, None))))
        u, s = u[:, :kk], np.sqrt(w[:kk])
        pte = (zte @ ztr.T) @ (u / s)
        return u, s, pte
    u, s, vt = np.linalg.svd(ztr, full_matrices=False)
    # the same rule as the Gram branch: without it a zero singular value (constant features: layer 0 at a fixed
    # template position) was kept, and a fit divided 0 by 0 into NaN predictions (issue 28)
    kk = min(k, _rank(s))
    return u[:, :kk], s[:kk], zte @ vt[:kk].T


#: Singular values below this share of the largest are rounding of a zero one (a rank-deficient or constant matrix):
#: dropped on every branch of `_pca_scores` (1e-12 of the largest eigenvalue of the Gram matrix, as before).
RANK_TOL = 1e-6


def _rank(s: np.ndarray) -> int:
    """How many of the descending singular values s are not rounding of zero (none when the largest is 0)."""
    if not s.size or not s[0] > 0:
        return 0
    return int(np.sum(s > s[0] * RANK_TOL))


def fold_predictions(xtr: Float[np.ndarray, "n_train d"], ytr: Float[np.ndarray, "n_train outputs"],
                     xte: Float[np.ndarray, "n_test d"], ks: Sequence[int],
                     alphas: Sequence[float]) -> Float[np.ndarray, "k alpha n_test outputs"]:
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


def _kfold(n: int, folds: int, seed: int, groups: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """KFold(folds, shuffle, seed) over n rows; with `groups` (one label per row), over the distinct labels in order of
    first appearance, so rows of one group (a prompt drawn twice by a bootstrap) never sit on both sides."""
    from sklearn.model_selection import KFold

    if groups is None:
        return list(KFold(folds, shuffle=True, random_state=seed).split(np.arange(n)))
    labels, first, inverse = np.unique(groups, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))  # label -> its order of first appearance
    g = rank[inverse]
    return [(np.flatnonzero(np.isin(g, a)), np.flatnonzero(np.isin(g, b)))
            for a, b in KFold(folds, shuffle=True, random_state=seed).split(np.arange(labels.size))]


@dataclass
class ProbeResult:
    r2: float
    pred: np.ndarray  #: out-of-fold predictions [n, outputs]
    chosen: list[dict[str, Any]] = field(default_factory=list)  #: per outer fold: k, alpha (and layer)
    #: the R^2's interval (interp.intervals.r2_interval over this sweep's outer folds, upper end clipped at 1; its
    #: estimand: the expected R^2 of the procedure trained on (K-1)/K of the prompts); None where not computed
    interval: Any = None


@dataclass
class _Fit:
    """One standardise -> PCA decomposition of a training set, applied to its test rows."""

    tr: np.ndarray  #: training row indices (into the full prompt list)
    te: np.ndarray  #: test row indices
    u: np.ndarray  #: [n_tr, K] top left singular vectors of the standardised training features
    s: np.ndarray  #: [K] their singular values
    pte: np.ndarray  #: [n_te, K] test PCA scores

    @classmethod
    def of(cls, x: np.ndarray, tr: np.ndarray, te: np.ndarray, kmax: int) -> "_Fit":
        ztr, zte = _standardise(x[tr], x[te])
        u, s, pte = _pca_scores(ztr, zte, kmax)
        return cls(tr, te, u, s, pte)

    @property
    def k(self) -> int:
        return int(self.s.size)


def _in_threads(work: Callable[[int], Any], items: Sequence[int]) -> list[Any]:
    """[work(i) for i in items], spread over as many threads as BLAS may use (each thread's BLAS then single-threaded).

    The outer folds of a sweep are independent: a thread per fold keeps both cores busy through the many small
    matrix products of a permutation batch, which a multithreaded BLAS cannot spread. Each fold's arithmetic is
    the same whichever thread runs it; results come back in the order of `items`."""
    from concurrent.futures import ThreadPoolExecutor

    controller = _blas_controller()
    blas = [c.num_threads for c in controller.lib_controllers if c.user_api == "blas"]  # read now: a limit may have moved
    workers = min(len(items), max(blas, default=1))
    if workers <= 1:
        return [work(i) for i in items]
    with controller.limit(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as ex:
        return list(ex.map(work, items))


_CONTROLLER: list[Any] = []  #: [(len(sys.modules) when scanned, ThreadpoolController)]


def _blas_controller() -> Any:
    """threadpoolctl's view of the loaded thread pools, scanned again only after an import (a library loads with a
    module): a scan walks every loaded shared library (~300 here) and took a third of a probe stage's time when
    `_in_threads` ran it on each of its thousands of calls. The thread counts are read live from it on every call."""
    import sys

    from threadpoolctl import ThreadpoolController

    n = len(sys.modules)
    if not _CONTROLLER or _CONTROLLER[0][0] != n:
        _CONTROLLER[:] = [(n, ThreadpoolController())]
    return _CONTROLLER[0][1]


class LayerSweep:
    """Nested-CV PCA+ridge probes over a list of feature matrices (one per layer), fitted once and
    evaluated for any number of target matrices, including batches of permuted targets.

    For fixed features and folds every probe's predictions are linear in the targets: with the
    training decomposition Z = U S V^T, the (k, alpha) prediction for test rows is
    ybar + P_k diag(S/(S^2+alpha))_k U_k^T (Y_tr - ybar). So the decompositions (the expensive part:
    one Gram matrix and eigendecomposition per fold and layer) are computed here once, and an
    evaluation only multiplies small matrices. The inner-fold selection criterion needs the SSE of
    every (k, alpha); it is expanded as ||D||^2 - 2 sum_i b_i c_i + sum_ij b_i b_j (P^T P)_ij (G_u)_ij
    (D the centred test targets, b the ridge shrinkage, c_i = <P_i, D U_i^T Y>, G_u = U^T Y Y^T U), so
    no prediction is formed for the candidates that are not chosen. The outer predictions of the
    chosen candidate are formed directly. A permutation test therefore costs matrix products per
    permutation, never a decomposition (perf/bench_permutations.py measures it against the sweep).

    Folds: outer KFold(outer, shuffle, seed); inside each outer training set KFold(inner, shuffle,
    seed + 1). The inner criterion is the mean, over the inner folds whose targets vary, of each fold's pooled
    R^2 (a fold without variance, relative to the targets' magnitude, has no R^2: ZERO_VARIANCE). Candidates
    within TIE of the best are ties; they go to the first layer, then the first k, then the first alpha, so a
    selection never depends on the last bits of a float (the same with 1 or 2 threads, on any BLAS kernel).
    """

    def __init__(self, xs: Sequence[np.ndarray], grid: Grid = Grid(), seed: int = 0,
                 folds: Sequence[tuple[np.ndarray, np.ndarray]] | None = None, groups: np.ndarray | None = None) -> None:
        """`folds`: explicit outer (train, test) index pairs instead of KFold(outer, seed): one pair with a large
        test set is the procedure trained on the training rows and applied to new ones (the estimand of the
        intervals, interp/intervals.py). `groups`: a label per row; every fold, outer and inner, keeps a group's rows
        together (a resample that draws a prompt twice)."""
        if not xs:
            raise ValueError("no feature matrices")
        n = xs[0].shape[0]
        if any(x.shape[0] != n for x in xs):
            raise ValueError("every layer needs the same prompts")
        if folds is None and n < grid.outer * 2:
            raise ValueError(f"{n} prompts are too few for {grid.outer}-fold nested CV")
        self.n, self.grid, self.seed, self.n_layers = n, grid, seed, len(xs)
        #: the outer folds: (train, test) index arrays, what `interval` and `interp.intervals.fold_sums` take
        self.outer = (_kfold(n, grid.outer, seed, groups) if folds is None
                      else [(np.asarray(a), np.asarray(b)) for a, b in folds])
        self.ks: list[list[int]] = []  #: per layer: the usable PCA sizes
        self.inner: list[list[list[_Fit]]] = []  #: [outer fold][layer][inner fold]
        self.fits: list[list[_Fit]] = []  #: [outer fold][layer]: the outer-fold fit
        for x in xs:
            ntr = int(len(self.outer[0][0]) * (grid.inner - 1) / grid.inner)
            self.ks.append(grid.usable_pca(ntr, x.shape[1]))

        def decompose(o: int) -> tuple[list[list[_Fit]], list[_Fit]]:
            tr, te = self.outer[o]
            inner = _kfold(len(tr), grid.inner, seed + 1, None if groups is None else np.asarray(groups)[tr])
            inner_folds = [(tr[a], tr[b]) for a, b in inner]
            return ([[_Fit.of(x, a, b, max(self.ks[li])) for a, b in inner_folds] for li, x in enumerate(xs)],
                    [_Fit.of(x, tr, te, max(self.ks[li])) for li, x in enumerate(xs)])

        for inner_fits, outer_fits in _in_threads(decompose, range(len(self.outer))):
            self.inner.append(inner_fits)
            self.fits.append(outer_fits)

    # ------------------------------------------------------------------ scoring

    def _inner_scores(self, o: int, y: np.ndarray, layers: Sequence[int]) -> np.ndarray:
        """Mean inner-fold pooled R^2 [B, len(layers), len(pca), len(alphas)] in outer fold `o` for targets
        y [B, n, C]. Every product is a matrix product over the whole batch (the permutations)."""
        g = self.grid
        b_, _, c_ = y.shape
        layers = list(layers)
        out = np.zeros((b_, len(layers), len(g.pca), len(g.alphas)))
        alphas = np.asarray(g.alphas, dtype=np.float64)
        informative = np.zeros(b_)
        for i in range(g.inner):
            fits = [self.inner[o][li][i] for li in layers]
            tr, te = fits[0].tr, fits[0].te
            # targets as [rows, B * C] so that each product below is one 2-D matrix product (BLAS)
            ytr = np.ascontiguousarray(y[:, tr, :].transpose(1, 0, 2))  # [n_tr, B, C]
            ym = ytr.mean(axis=0)  # [B, C]
            ytr -= ym[None]  # centred before the product (cheaper than correcting K x B x C products after it)
            d = np.ascontiguousarray(y[:, te, :].transpose(1, 0, 2)) - ym[None]  # [n_te, B, C]
            dd = (d ** 2).sum(axis=(0, 2))
            # around the test fold's own mean, computed directly (dd - n mean^2 cancels to rounding when the
            # fold's targets are constant); a fold without variance adds nothing to any candidate's criterion
            sst = ((d - d.mean(axis=0)) ** 2).sum(axis=(0, 2))
            varies = sst > ZERO_VARIANCE * (dd + len(te) * (ytr ** 2).sum(axis=(0, 2)) / len(tr))
            informative += varies
            safe = np.where(varies, sst, 1.0)[:, None, None]
            # the layers in chunks whose products stay a few MB (CHUNK)
            chunk = max(1, CHUNK // max(1, b_ * c_ * max((f.k for f in fits), default=1)))
            for start in range(0, len(fits), chunk):
                part = fits[start: start + chunk]
                nonzero = [f for f in part if f.k]
                if nonzero:  # the training- and test-target products of the chunk's layers at once
                    u_all = np.concatenate([f.u for f in nonzero], axis=1)  # [n_tr, sum K]
                    uty_all = (u_all.T @ ytr.reshape(len(tr), -1)).reshape(-1, b_, c_)  # [sum K, B, C]
                    p_all = np.concatenate([f.pte for f in nonzero], axis=1)  # [n_te, sum K]
                    ptd_all = (p_all.T @ d.reshape(len(te), -1)).reshape(-1, b_, c_)
                    c_all = np.einsum("kbc,kbc->kb", ptd_all, uty_all)  # [sum K, B]
                off = 0
                for j, f in enumerate(part, start):
                    kk = f.k
                    sse = np.empty((b_, len(g.pca), len(g.alphas)))
                    if kk == 0:  # constant features: every candidate predicts the training mean
                        sse[:] = dd[:, None, None]
                    else:
                        uty = uty_all[off: off + kk].transpose(1, 0, 2)  # [B, K, C], a strided view BLAS takes as is
                        h = np.matmul(uty, uty.transpose(0, 2, 1))  # [B, K, K]
                        h *= (f.pte.T @ f.pte)[None]
                        cvec = c_all[off: off + kk]  # [K, B]
                        shrink = f.s[None, :] / (f.s[None, :] ** 2 + alphas[:, None])  # [A, K]
                        cache: dict[int, np.ndarray] = {}
                        for ki, k in enumerate(self._k_index(layers[j])):
                            ke = min(k, kk)
                            if ke not in cache:
                                v = shrink[:, :ke]  # [A, ke]
                                lin = v @ cvec[:ke]  # [A, B]
                                t = np.matmul(h[:, :ke, :ke], np.ascontiguousarray(v.T))  # [B, ke, A]
                                quad = np.einsum("bia,ai->ba", t, v)
                                cache[ke] = dd[:, None] - 2 * lin.T + quad
                            sse[:, ki, :] = cache[ke]
                        off += kk
                    out[:, j] += np.where(varies[:, None, None], 1.0 - sse / safe, 0.0)
        # the mean over the inner folds whose targets vary (the same folds for every candidate, so the choice is
        # that of the plain mean); no such fold: every candidate scores 0 and the first wins
        out /= np.maximum(informative, 1)[:, None, None, None]
        return out

    def _k_index(self, li: int) -> list[int]:
        """The PCA sizes of layer li, padded with its last size to the grid's length (padding is never chosen
        over an equal earlier candidate, so a layer with fewer usable sizes behaves like its own grid)."""
        ks = self.ks[li]
        return ks + [ks[-1]] * (len(self.grid.pca) - len(ks))

    def _predict(self, f: _Fit, y: np.ndarray, k: int, alpha: float) -> np.ndarray:
        """Outer-fold test predictions [B, n_te, C] of one (k, alpha) for targets y [B, n, C]."""
        ytr = y[:, f.tr, :]
        ym = ytr.mean(axis=1)
        if f.k == 0:
            return np.broadcast_to(ym[:, None, :], (y.shape[0], len(f.te), y.shape[2])).copy()
        ke = min(k, f.k)
        u, s, p = f.u[:, :ke], f.s[:ke], f.pte[:, :ke]
        uty = np.einsum("rk,brc->bkc", u, ytr - ym[:, None, :])
        return ym[:, None, :] + np.einsum("rk,bkc->brc", p, (s / (s ** 2 + alpha))[None, :, None] * uty)

    def _run(self, y: np.ndarray, layers: Sequence[int]) -> tuple[np.ndarray, list[list[dict[str, Any]]]]:
        """Out-of-fold predictions [B, n, C] with the layer chosen among `layers` (and k, alpha) inside the folds.

        Every candidate probe fits each output column with the same linear smoother, so its squared errors do not
        change when the outputs are turned by an orthogonal matrix. Targets whose centred columns span r < C
        directions (the planners' 36 occupancy cells span 3; n prompts span at most n - 1) are fitted in those r
        directions only (`output_basis`); in the others every target is constant, and every probe predicts the
        training mean, which is that constant. The same choices and predictions, to rounding, at r / C of the cost."""
        basis = output_basis(y)
        if basis is None:
            return self._run_columns(y, layers)
        q, r = basis
        yq = y @ q  # [B, n, C]: the first r columns carry every row's variation, the rest are constant
        pred_q, chosen = self._run_columns(np.ascontiguousarray(yq[:, :, :r]), layers)
        pred = np.zeros_like(yq)
        pred[:, :, :r] = pred_q
        for tr, te in self.outer:
            pred[:, te, r:] = yq[:, tr, r:].mean(axis=1, keepdims=True)
        return pred @ q.T, chosen

    def _run_columns(self, y: np.ndarray, layers: Sequence[int]) -> tuple[np.ndarray, list[list[dict[str, Any]]]]:
        """`_run` on the target columns as given."""
        g = self.grid
        pred = np.zeros_like(y)
        chosen: list[list[dict[str, Any]]] = [[] for _ in range(y.shape[0])]
        sel = np.asarray(list(layers))

        def fold(o: int) -> list[tuple[int, int, float, list[int], np.ndarray, list[float]]]:
            """(layer, k, alpha, batch rows, their test predictions, their inner R^2) per choice made in outer fold o."""
            scores = self._inner_scores(o, y, sel)  # [B, L', K, A]
            flat = first_best(scores)
            li_, ki_, ai_ = np.unravel_index(flat, scores.shape[1:])
            groups: dict[tuple[int, int, int], list[int]] = {}
            for b in range(y.shape[0]):
                groups.setdefault((int(li_[b]), int(ki_[b]), int(ai_[b])), []).append(b)
            out = []
            for (lj, ki, ai), bs in groups.items():
                li = int(sel[lj])
                k, a = self._k_index(li)[ki], g.alphas[ai]
                out.append((li, k, a, bs, self._predict(self.fits[o][li], y[bs], k, a),
                            [float(scores[b, lj, ki, ai]) for b in bs]))
            return out

        for (_, te), part in zip(self.outer, _in_threads(fold, range(len(self.outer)))):
            for li, k, a, bs, p, inner in part:
                pred[np.asarray(bs)[:, None], te[None, :]] = p
                for b, r2 in zip(bs, inner):
                    chosen[b].append({"k": "all" if k >= FULL else int(k), "alpha": float(a), "inner_r2": r2, "layer": li})
        return pred, chosen

    # ------------------------------------------------------------------ public

    def best(self, y: np.ndarray, layer_names: Sequence[Any] | None = None) -> ProbeResult:
        """The probe with the layer chosen inside the folds (the reported `best` row)."""
        pred, chosen = self._run(y[None].astype(np.float64), range(self.n_layers))
        names = list(layer_names) if layer_names is not None else list(range(self.n_layers))
        for c in chosen[0]:
            c["layer"] = names[c["layer"]]
        return ProbeResult(pooled_r2(y, pred[0]), pred[0], chosen[0], self.interval(y, pred[0]))

    def layer(self, y: np.ndarray, li: int) -> ProbeResult:
        """The probe of one layer (k, alpha chosen inside the folds)."""
        pred, chosen = self._run(y[None].astype(np.float64), [li])
        for c in chosen[0]:
            del c["layer"]
        return ProbeResult(pooled_r2(y, pred[0]), pred[0], chosen[0], self.interval(y, pred[0]))

    def interval(self, y: np.ndarray, pred: np.ndarray, level: float = 0.95) -> Any:
        """The documented interval (interp/intervals.py) of the R^2 of out-of-fold predictions `pred` over this sweep's
        outer folds (`self.outer`, the (train, test) index pairs): Nadeau-Bengio corrected, upper end clipped at 1;
        nan with fewer than two folds. `interp.sweep.probe_sweep` repeats the partition for a steadier centre."""
        from interp.intervals import fold_sums, r2_interval

        n_test = float(np.mean([len(te) for _, te in self.outer]))
        n_train = float(np.mean([len(tr) for tr, _ in self.outer]))
        return r2_interval(*fold_sums(np.asarray(y, dtype=np.float64), pred, self.outer), self.n,
                           n_test / max(n_train, 1.0), level)

    def permuted_r2(self, y: np.ndarray, perms: np.ndarray, layers: Sequence[int] | None = None,
                    batch: int | None = None) -> np.ndarray:
        """Outer pooled R^2 of the probe refitted on each row permutation of y ([P, n] index array), with the
        layer (and k, alpha) chosen inside the folds among `layers` (default: all)."""
        yf = y.astype(np.float64)
        return self.r2_of(lambda i, j: yf[perms[i:j]], len(perms), y.shape[1], layers, batch)

    def r2_of(self, targets: Callable[[int, int], np.ndarray], count: int, outputs: int,
              layers: Sequence[int] | None = None, batch: int | None = None) -> np.ndarray:
        """Outer pooled R^2 of the probe refitted on each of `count` target matrices, `targets(i, j)` giving those
        numbered i..j-1 as [j - i, n, outputs], with the layer (and k, alpha) chosen inside the folds among `layers`
        (default: all). Any targets (permutations; Freedman-Lane's fitted values plus permuted residuals) reuse
        the decompositions: only matrix products per batch."""
        layers = list(range(self.n_layers)) if layers is None else list(layers)
        batch = batch or max(1, min(256, int(4e6 // max(1, self.n * outputs))))  # the layers go in chunks (CHUNK)
        out = np.empty(count)
        for i in range(0, count, batch):
            yp = targets(i, min(count, i + batch))  # [B, n, C]
            pred, _ = self._run(yp, layers)
            out[i: i + batch] = pooled_r2_batch(yp, pred)
        return out

    def predict_of(self, y: np.ndarray, layers: Sequence[int] | None = None) -> np.ndarray:
        """Out-of-fold predictions [B, n, C] of target sets y [B, n, C], each with its layer (and k, alpha) chosen inside
        the folds among `layers` (default: all); decompositions reused, as `r2_of`."""
        layers = list(range(self.n_layers)) if layers is None else list(layers)
        return self._run(np.asarray(y, dtype=np.float64), layers)[0]

    def select(self, y: np.ndarray, layer: int = 0) -> tuple[int, float]:
        """(k, alpha) of one layer chosen by K-fold CV over all prompts with the inner folds' criterion: the probe
        one would fit on every prompt (this sweep must have been built with one fold holding every prompt in
        training: `LayerSweep(xs, grid, seed, folds=[(all, none)])`)."""
        scores = self._inner_scores(0, y[None].astype(np.float64), [layer])
        _, ki, ai = np.unravel_index(int(first_best(scores)[0]), scores.shape[1:])
        return self._k_index(layer)[ki], self.grid.alphas[ai]


#: a direction of the targets' centred columns whose sum of squares is below this share of their total is constant
#: (`output_basis`): leaving it out of the fit moves an R^2 by at most C times this, far below TIE
OUTPUT_TOL = 1e-13


def output_basis(y: Float[np.ndarray, "batch n outputs"]) -> tuple[np.ndarray, int] | None:
    """(Q, r): an orthonormal basis [C, C] of the output space whose first r columns span the centred target
    columns of every batch member (directions by decreasing sum of squares); None when they span all C (nothing to
    leave out). A permutation of the rows, or Freedman-Lane's fitted values plus permuted residuals, keeps the
    span, so a batch of them needs no more directions than the targets themselves."""
    c = y.shape[2]
    if c < 2:
        return None
    yc = (y - y.mean(axis=1, keepdims=True)).reshape(-1, c)
    w, v = np.linalg.eigh(yc.T @ yc)  # ascending
    r = max(1, int((w > OUTPUT_TOL * max(float(w.sum()), np.finfo(float).tiny)).sum()))
    if r >= c:
        return None
    return np.ascontiguousarray(v[:, ::-1]), r


def pooled_r2_batch(y: Float[np.ndarray, "batch n outputs"], pred: Float[np.ndarray, "batch n outputs"]) -> Float[np.ndarray, " batch"]:
    """`pooled_r2` for a batch [B, n, C] (nan where a target has no variance)."""
    sst = ((y - y.mean(axis=1, keepdims=True)) ** 2).sum(axis=(1, 2))
    sse = ((y - pred) ** 2).sum(axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sst > 0, 1.0 - sse / sst, np.nan)


def nested_cv(x: Float[np.ndarray, "n d"], y: Float[np.ndarray, "n outputs"], grid: Grid = Grid(), seed: int = 0) -> ProbeResult:
    """Outer pooled R^2 of the probe with (k, alpha) chosen inside each outer training set."""
    return LayerSweep([x], grid, seed).layer(y, 0)


def nested_cv_layers(xs: Sequence[np.ndarray], y: np.ndarray, grid: Grid = Grid(), seed: int = 0,
                     layer_names: Sequence[Any] | None = None) -> ProbeResult:
    """As `nested_cv`, with the layer (one feature matrix per layer) chosen inside the folds as well."""
    return LayerSweep(xs, grid, seed).best(y, layer_names)


def permutations(n: int, n_perm: int, seed: int, groups: np.ndarray | None = None, within_only: bool = False) -> np.ndarray:
    """[n_perm, n] row permutations from a seeded generator (the same seed, the same permutations).

    With `groups` (a label per row) they respect the groups as exchangeability blocks (Winkler et al. 2014): each
    permutation moves whole blocks onto blocks of the same size (order of the labels' first appearance; a block
    keeps its size) and shuffles the rows inside every block. Rows of one group share wording and layout, so they
    are not exchangeable with rows of other groups: a plain permutation scatters a group's rows, its null has no
    groups, and a probe that learned group -> group mean looked significant in 92% of data sets where activations
    and targets were independent as wholes (issue 28). Why whole blocks and not only within them: the grouped
    test's null is "the activations tell nothing about the targets of new groups", which a group-level association
    violates; shuffling only within blocks keeps every group's targets on its own activations, so its null keeps a
    group-level association and the test asks about prompt-level differences inside groups instead (measured side
    by side in perf/bench_coverage.py; `within_only` gives that variant). Without groups: plain permutations, as before
    (the same draws)."""
    rng = np.random.default_rng(seed)
    if not n_perm:
        return np.zeros((0, n), dtype=np.int64)
    if groups is None:
        return np.stack([rng.permutation(n) for _ in range(n_perm)])
    blocks = group_blocks(groups)
    by_size: dict[int, list[int]] = {}
    for b, rows in enumerate(blocks):
        by_size.setdefault(len(rows), []).append(b)
    out = np.empty((n_perm, n), dtype=np.int64)
    for i in range(n_perm):
        for members in by_size.values():
            for b, src in zip(members, members if within_only else rng.permutation(members)):
                out[i, blocks[b]] = rng.permutation(blocks[src])
    return out


def perm_p(null: np.ndarray, observed: float) -> float:
    """(1 + #{null >= observed}) / (1 + n): the permutation p-value (never 0); NaN when the observed statistic or any
    value of the null is not finite: a NaN compares false with everything, so it used to count as a world that did
    not reach the observed value, and a null of all NaN gave the smallest p there is (issue 28). The caller records
    the missing p with its reason (`p_missing`)."""
    null = np.asarray(null, dtype=float)
    if not np.isfinite(observed) or not np.all(np.isfinite(null)):
        return float("nan")
    return float((1 + np.sum(null >= observed - 1e-12)) / (1 + null.size))


def p_missing(null: np.ndarray, observed: float) -> str | None:
    """Why `perm_p` gives no p-value for this null and observed statistic (None when it gives one)."""
    null = np.asarray(null, dtype=float)
    if not np.isfinite(observed):
        return "the observed statistic is not finite (a probe without variance in its targets or predictions)"
    bad = int(np.sum(~np.isfinite(null)))
    if bad:
        return (f"{bad} of {null.size} null statistics are not finite (a refit produced NaN): no p-value rests on "
                "a broken null")
    return None


def bootstrap_counts(n: int, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, n] multiplicities of a prompt-clustered bootstrap (prompts resampled with replacement)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    w = np.zeros((n_boot, n))
    np.add.at(w, (np.arange(n_boot)[:, None], idx), 1.0)
    return w


def bootstrap_r2(y: Float[np.ndarray, "n outputs"], pred: Float[np.ndarray, "n outputs"],
                 w: Float[np.ndarray, "boot n"]) -> Float[np.ndarray, " boot"]:
    """Pooled R^2 of each weighted resample (w: [B, n] multiplicities), from per-prompt sums: no copies."""
    n = y.shape[0]
    sse = w @ ((y - pred) ** 2).sum(axis=1)
    yy = w @ (y ** 2).sum(axis=1)
    ybar = (w @ y) / n  # [B, C]
    sst = yy - n * (ybar ** 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(sst > 1e-12 * np.maximum(yy, 1e-300), 1.0 - sse / sst, np.nan)


def weighted_r2(y: np.ndarray, pred: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pooled R^2 [B] of y [n, C] against pred under prompt weights w [B, n] of any total (a resample's
    multiplicities restricted to these prompts: `bootstrap_r2` assumes they sum to n). SST is around the
    weighted mean; nan where a resample has no weight or no variance on these prompts. With w all ones it
    is `pooled_r2`."""
    tot = w.sum(axis=1)
    sse = w @ ((y - pred) ** 2).sum(axis=1)
    yy = w @ (y ** 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ybar = (w @ y) / tot[:, None]
        sst = yy - tot * (ybar ** 2).sum(axis=1)
        return np.where((tot > 0) & (sst > 1e-12 * np.maximum(yy, 1e-300)), 1.0 - sse / sst, np.nan)


def _quantiles(stats: np.ndarray, level: float) -> tuple[float, float]:
    finite = stats[np.isfinite(stats)]
    if not finite.size:
        return float("nan"), float("nan")
    lo, hi = np.quantile(finite, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def bootstrap_ci(y: np.ndarray, pred: np.ndarray, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Prompt-clustered percentile CI of the pooled R^2 (prompts resampled with replacement)."""
    return _quantiles(bootstrap_r2(y, pred, bootstrap_counts(y.shape[0], n_boot, seed)), level)


def delta_bootstrap_ci(y: np.ndarray, pred_a: np.ndarray, pred_b: np.ndarray, n_boot: int = 10_000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Paired prompt-bootstrap CI of R^2(a) - R^2(b): both probes' out-of-fold predictions on the same resamples."""
    w = bootstrap_counts(y.shape[0], n_boot, seed)
    return _quantiles(bootstrap_r2(y, pred_a, w) - bootstrap_r2(y, pred_b, w), level)


def permutation_test(x: np.ndarray, y: np.ndarray, observed: float, grid: Grid = Grid(), n_perm: int = 20,
                     seed: int = 0) -> tuple[float, list[float]]:
    """p-value of `observed` against nested-CV R^2 with the targets' rows permuted (seeded); the
    decompositions are computed once and reused by every permutation."""
    null = LayerSweep([x], grid, seed).permuted_r2(y, permutations(y.shape[0], n_perm, seed))
    return perm_p(null, observed), [float(v) for v in null]


@dataclass(frozen=True)
class FittedProbe:
    """A fitted standardise -> PCA(k) -> ridge(alpha) probe as one affine map in activation space:
    prediction = (x - mean) @ coef + intercept, with `coef` [d_model, outputs]. `direction(mask)` is the
    unit vector along which the probe's predicted occupancy of the cells in `mask` grows fastest: the
    gradient of the region's summed prediction with respect to x (steering uses it)."""

    mean: np.ndarray  #: [d] training feature means
    coef: np.ndarray  #: [d, outputs] weights on the raw (unstandardised) features
    intercept: np.ndarray  #: [outputs] the training targets' mean
    k: int  #: PCA components used
    alpha: float  #: ridge penalty

    @classmethod
    def fit(cls, x: Float[np.ndarray, "n d"], y: Float[np.ndarray, "n outputs"], k: int, alpha: float) -> "FittedProbe":
        x = np.asarray(x, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        mu, sd = _scale(x)
        z = (x - mu) / sd
        u, s_, _ = _pca_scores(z, z[:1], k)
        if s_.size == 0:
            return cls(mu, np.zeros((x.shape[1], y.shape[1])), y.mean(axis=0), 0, float(alpha))
        # ridge on PCA scores: beta = S/(S^2+alpha) U^T y_c, and the scores are z V_k with V_k = z^T U_k / S_k
        beta = (s_ / (s_ ** 2 + alpha))[:, None] * (u.T @ (y - y.mean(axis=0)))
        w = ((z.T @ u) / s_) @ beta  # standardised features -> outputs
        return cls(mu, w / sd[:, None], y.mean(axis=0), int(s_.size), float(alpha))

    def predict(self, x: Float[np.ndarray, "n d"]) -> Float[np.ndarray, "n outputs"]:
        return (np.asarray(x, dtype=np.float64) - self.mean) @ self.coef + self.intercept

    def direction(self, mask: np.ndarray) -> Float[np.ndarray, " d"]:
        """Unit vector in activation space that raises the predicted occupancy of the masked cells fastest."""
        g = self.coef @ np.asarray(mask, dtype=np.float64).ravel()
        n = float(np.linalg.norm(g))
        if n == 0:
            raise ValueError("the probe has a zero gradient for this region")
        return g / n


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

    texts = list(texts)
    try:
        return TfidfVectorizer(ngram_range=(1, 2), min_df=1, sublinear_tf=True).fit_transform(texts).toarray()
    except ValueError:  # no word in any text ("empty vocabulary"): one column of zeros, which reads nothing
        return np.zeros((len(texts), 1))


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    from scipy.stats import false_discovery_control

    if not len(pvalues):
        return []
    return [float(q) for q in false_discovery_control(np.asarray(pvalues, dtype=float), method="bh")]
