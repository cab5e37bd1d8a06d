"""Readable or used? Causal tests of what a probe reads: concept erasure (LEACE) and interchange along its subspace.

A probe that decodes a plan from the residual stream shows the plan is *readable* there; it does not show the model
*uses* it (the paper's own limit: its causal experiment edits the code text, not activations). Two interventions at
the probe's site test use, each measured on what the model then draws (the rendered canvas's occupancy, through the
sandbox):

- **Erasure** (`leace`): LEACE (Belrose et al. 2023, "LEACE: Perfect linear concept erasure in closed form") fits
  the affine map r(x) = x - W^+ P W (x - mu) (W whitens x, P projects onto the column space of W Sigma_xz) that makes
  the target *linearly unreadable* (no linear predictor of it beats a constant: Cov(r(x), z) = 0) while moving x as
  little as possible. Applied at the site, a model that uses the plan there loses it: what it draws goes to chance.
  This is the `concept-erasure` package's `LeaceFitter(shrinkage=False, constrain_cov_trace=False)` (svd_tol 0.01),
  reimplemented in numpy (the package is not in the pinned stack); tests check its guarantees and a broken variant.
- **Interchange along the concept's subspace** (`pattern`, `interchange_hook`; Geiger et al. 2021/2024's interchange
  interventions, distributed along a subspace as in DAS): at the base prompt's site the component of the residual
  in the subspace where the probed layout is encoded (span of Sigma_xz, the subspace LEACE erases) is replaced by the
  source prompt's, h' = h + U U^T (h_source - h). A model that uses that subspace then draws the *source's* layout:
  the interchange intervention accuracy (IIA) is the share of pairs whose drawing matches the source's. The span of
  a ridge probe's *weights* (`basis="weights"`) is the wrong subspace to move: measured, it changed no drawing at
  the very site where the pattern span changed all of them (the weights cancel noise the model does not read).

`causal_test(rt, items, layouts, ...)` runs both on a set of prompts at one (layer, last token) site and returns per
prompt the drawn layout and per method the share that matched, with a Wilson interval (the prompts are the unit;
with templates, see the docs' estimand). Known answers (tests/interp/test_causal.py): on the xor-planner, whose
first answer token states the plan that its bars then follow, interchange at the upper layers gives IIA >= 0.9 and
erasure drives the drawing to chance; the broken variants (the projection not removed, source and base swapped)
fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

#: singular values of W Sigma_xz under this are dropped (the package's default svd_tol)
SVD_TOL = 0.01


@dataclass(frozen=True)
class Eraser:
    """An affine LEACE eraser: r(x) = x - ((x - mean) @ right.T) @ left.T (left [d, k], right [k, d])."""

    mean: np.ndarray
    left: np.ndarray
    right: np.ndarray

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return x - ((x - self.mean) @ self.right.T) @ self.left.T

    @property
    def rank(self) -> int:
        """Directions erased."""
        return int(self.left.shape[1])


def leace(x: np.ndarray, z: np.ndarray, svd_tol: float = SVD_TOL) -> Eraser:
    """The LEACE eraser of concept `z` ([n, k], e.g. one-hot classes or occupancy targets) from `x` ([n, d]).

    Example::

        eraser = leace(acts, targets)
        erased = eraser(acts)      # no linear function of `erased` predicts `targets` better than their mean
    """
    x = np.asarray(x, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64).reshape(len(x), -1)
    if x.ndim != 2 or len(x) < 2:
        raise ValueError(f"x must be [n, d] with n >= 2, not shape {x.shape}")
    if not (np.isfinite(x).all() and np.isfinite(z).all()):
        raise ValueError("x and z must be finite")
    n, d = x.shape
    mean = x.mean(0)
    xc, zc = x - mean, z - z.mean(0)
    sxx = xc.T @ xc / (n - 1)
    sxz = xc.T @ zc / (n - 1)
    vals, vecs = np.linalg.eigh((sxx + sxx.T) / 2)
    keep = vals > vals[-1] * d * np.finfo(np.float64).eps
    root = np.where(keep, np.sqrt(np.clip(vals, 0, None)), 0.0)
    inv_root = np.where(keep, 1.0 / np.where(keep, root, 1.0), 0.0)
    w = (vecs * inv_root) @ vecs.T
    w_inv = (vecs * root) @ vecs.T
    u, s, _ = np.linalg.svd(w @ sxz, full_matrices=False)
    u = u[:, s > svd_tol]
    return Eraser(mean, w_inv @ u, u.T @ w)


def subspace(weights: np.ndarray, rel_tol: float = 1e-3) -> np.ndarray:
    """An orthonormal basis [d, r] of the column space of a probe's weights [d, k] (in residual-stream coordinates),
    singular values under rel_tol x the largest dropped: the directions the probe reads."""
    u, s, _ = np.linalg.svd(np.asarray(weights, dtype=np.float64), full_matrices=False)
    return u[:, s > rel_tol * s[0]] if s.size and s[0] > 0 else u[:, :0]


def readout(x: np.ndarray, y: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """The weights [d, k] of a ridge probe of y ([n, k]) from x ([n, d]), standardised inputs mapped back to the
    residual stream's coordinates: the probe whose subspace the interchange moves."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(len(x), -1)
    xc, yc = x - x.mean(0), y - y.mean(0)
    sd = xc.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    xs = xc / sd
    beta = np.linalg.solve(xs.T @ xs + alpha * np.eye(x.shape[1]), xs.T @ yc)
    return beta / sd[:, None]


def _last_column(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    """A hook that rewrites the last column of the prompt pass only (the last prompt token of every left-padded row;
    decode steps, one column each, pass through)."""
    def hook(act: Any, hook: Any = None) -> Any:
        if act.shape[1] < 2:
            return act
        out = act.clone()
        out[:, -1] = fn(act[:, -1])
        return out

    return hook


def erase_hook(eraser: Eraser) -> Callable[..., Any]:
    """A hook applying `eraser` to the last prompt token's activation (torch, any dtype)."""
    import torch

    def apply(h: Any) -> Any:
        mean = torch.as_tensor(eraser.mean, dtype=h.dtype, device=h.device)
        left = torch.as_tensor(eraser.left, dtype=h.dtype, device=h.device)
        right = torch.as_tensor(eraser.right, dtype=h.dtype, device=h.device)
        return h - ((h - mean) @ right.T) @ left.T

    return _last_column(apply)


def interchange_hook(basis: np.ndarray, sources: np.ndarray) -> Callable[..., Any]:
    """A hook setting the component of each row's last-token activation in span(basis) to its source's
    (`sources`: [rows, d], one per row, in the batch's order): h' = h + U U^T (source - h)."""
    import torch

    def apply(h: Any) -> Any:
        u = torch.as_tensor(basis, dtype=h.dtype, device=h.device)
        src = torch.as_tensor(sources, dtype=h.dtype, device=h.device)
        if src.shape != h.shape:
            raise ValueError(f"sources must be one activation per row ({tuple(h.shape)}), got {tuple(src.shape)}")
        return h + ((src - h) @ u) @ u.T

    return _last_column(apply)


def wilson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a share k / n."""
    from scipy import stats

    if n == 0:
        return float("nan"), float("nan")
    z = float(stats.norm.ppf(0.5 + level / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@dataclass
class CausalResult:
    """Per method: the share of prompts whose drawing matched what the method predicts, with its interval."""

    layer: int
    n: int
    rows: list[dict[str, Any]] = field(default_factory=list)  #: per prompt: method, drawn layout, expected, matched
    summary: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{"method": m, **v} for m, v in self.summary.items()])


def drawn_layout(text: str, layouts: np.ndarray) -> int:
    """Which of `layouts` ([m, blocks, blocks] occupancies) the program in `text` draws: the nearest by occupancy
    (sum of absolute differences), -1 when it draws nothing the sandbox accepts."""
    from bench.sandbox.runtime import execute
    from interp.probes import occupancy

    r = execute(text)
    if r.outcome != "ok" or r.pixels is None:
        return -1
    occ = occupancy(r.pixels, r.background)
    return int(np.argmin(np.abs(layouts - occ[None]).sum(axis=(1, 2))))


def pattern(x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """An orthonormal basis of span(Sigma_xz): where the concept is *encoded* (the class means' differences for one-hot
    classes), the span of the directions LEACE erases (its `left` factor, W^+ u, spans Sigma_xz)."""
    x = np.asarray(x, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64).reshape(len(x), -1)
    return subspace((x - x.mean(0)).T @ (z - z.mean(0)))


#: the subspaces an interchange can move: the concept's encoding (default) or a ridge probe's weights
BASES = ("pattern", "weights")


def causal_test(rt: Any, prompts: Sequence[Sequence[int]], labels: Sequence[int], layouts: np.ndarray, layer: int,
                seed: int = 0, max_new_tokens: int = 160, level: float = 0.95,
                methods: Sequence[str] = ("none", "interchange", "erasure"), basis: str = "pattern",
                line_labels: Sequence[str] | None = None, groups: Sequence[Any] | None = None) -> CausalResult:
    """Interchange and erasure at `blocks.{layer}.hook_resid_pre` (layer n_layers: the last block's output) at each
    prompt's last token, measured on what the model then draws (greedy).

    Args:
        rt: the runtime.
        prompts: token-id lists, as the model sees them (built with their protocol).
        labels: each prompt's intended layout, an index into `layouts`.
        layouts: the possible layouts' occupancies [m, blocks, blocks] (what `drawn_layout` compares against).
        layer: the site's layer (0..n_layers).
        seed: draws each base prompt's source (one with another layout); recorded in the result.
        max_new_tokens: tokens per drawing.
        level: the intervals' level.
        methods: "none" (the unpatched drawing), "interchange", "erasure".
        basis: the interchange's subspace: "pattern" (span of Sigma_xz, where the layout is encoded: what LEACE erases)
            or "weights" (span of a ridge probe's weights). Measured on the xor-planner's final site: pattern IIA 48/48,
            weights 0/48: the regression weights cancel noise directions the model does not read, so swapping the
            probe's reading leaves the model's (docs/causal.md).
        line_labels: the first line the model writes for each layout (e.g. the planners' plan line): each method
            then also reports whether the line matched (`line_share`), apart from the drawing.
        groups: each prompt's template or family: the paired effect's interval and sign-flip p follow them
            (`interp.pair_effects.pair_inference`).

    Per method the summary holds `share` (the drawing matched: for interchange the source's layout, the IIA; for
    erasure and none the prompt's own), its Wilson interval, `chance` (the share the *unpatched* drawings meet the
    same expectation: what no effect gives), `base_rate` (the commonest layout's share: what a drawing that ignores
    the plan meets), `kept` (the drawing equals the unpatched one) and, with `line_labels`, the same for the first line.
    `effect` is the paired effect per prompt, matched after minus matched unpatched (each prompt its own control),
    with a grouped interval (`effect_lo`, `effect_hi`) and a sign-flip p against "no effect" (`p`): the estimand is
    the mean change per prompt over the population of templates (issue 40's `pair_inference`).

    Example::

        res = causal_test(rt, tokens, labels, layouts, layer=3)
        res.to_frame()        # method, matched, n, share, lo, hi (interchange: IIA; erasure: accuracy vs chance)
    """
    from interp.pair_effects import pair_inference
    from interp.runtime import Sampling, StopRule

    labels = np.asarray(labels)
    n = len(prompts)
    if len(labels) != n or n < 2:
        raise ValueError(f"one label per prompt and at least 2 prompts ({n} prompts, {len(labels)} labels)")
    if basis not in BASES:
        raise ValueError(f"basis must be one of {BASES}, not {basis!r}")
    if not 0 <= layer <= rt.info.n_layers:
        raise ValueError(f"layer must lie in 0..{rt.info.n_layers} (n_layers: the last block's output), not {layer}")
    if not set(np.unique(labels)) <= set(range(len(layouts))):
        raise ValueError(f"labels must index layouts (0..{len(layouts) - 1})")
    if line_labels is not None and len(line_labels) != len(layouts):
        raise ValueError(f"line_labels: one first line per layout ({len(layouts)}), got {len(line_labels)}")
    name = rt.hook_names([layer])[0]
    acts = rt.capture([list(p) for p in prompts], [[len(p) - 1] for p in prompts], [layer])[:, 0, 0].double().numpy()
    onehot = np.eye(len(layouts))[labels]
    rng = np.random.default_rng(seed)
    sources = np.array([rng.choice(np.flatnonzero(labels != labels[i])) for i in range(n)])
    basis_ = pattern(acts, onehot) if basis == "pattern" else subspace(readout(acts, onehot))
    eraser = leace(acts, onehot)
    hooks = {"none": [], "interchange": [(name, interchange_hook(basis_, acts[sources]))],
             "erasure": [(name, erase_hook(eraser))]}
    expect = {"none": labels, "interchange": labels[sources], "erasure": labels}
    res = CausalResult(layer, n)
    stop = StopRule(max_new_tokens=max_new_tokens)
    lines = {t.strip(): i for i, t in enumerate(line_labels)} if line_labels is not None else None
    unpatched = None
    for m in ["none"] + [m for m in methods if m != "none"]:
        gens = rt.generate([list(p) for p in prompts], [Sampling()] * n, stop, hooks=hooks[m])
        drawn = np.array([drawn_layout(g.text, layouts) for g in gens])
        said = (np.array([lines.get(g.text.split("\n", 1)[0].strip(), -1) for g in gens]) if lines is not None
                else np.full(n, -1))
        if m == "none":
            unpatched = (drawn, said)
        if m not in methods:
            continue
        hit, kept, line_hit = drawn == expect[m], drawn == unpatched[0], said == expect[m]
        for i in range(n):
            res.rows.append({"method": m, "prompt": i, "source": int(sources[i]) if m == "interchange" else None,
                             "drawn": int(drawn[i]), "line": int(said[i]), "expected": int(expect[m][i]),
                             "matched": bool(hit[i]), "kept": bool(kept[i]), "line_matched": bool(line_hit[i])})
        lo, hi = wilson(int(hit.sum()), n, level)
        paired = hit.astype(float) - (unpatched[0] == expect[m]).astype(float)
        inf = pair_inference(paired, groups, level, seed=seed)
        row = {"matched": int(hit.sum()), "n": n, "share": float(hit.mean()), "lo": lo, "hi": hi,
               # what "matched" would be with no effect: the unpatched drawing meeting this method's expectation
               "chance": float(np.mean(unpatched[0] == expect[m])),
               # guessing: the share of the commonest layout (what a drawing that ignores the prompt's plan meets)
               "base_rate": float(np.bincount(labels, minlength=len(layouts)).max() / n),
               "kept": float(kept.mean()), "drew_nothing": int((drawn < 0).sum()),
               "rank": basis_.shape[1] if m == "interchange" else (eraser.rank if m == "erasure" else 0),
               "seed": seed, "basis": basis if m == "interchange" else None,
               "effect": float(inf.mean), "effect_lo": float(inf.lo), "effect_hi": float(inf.hi), "p": float(inf.p),
               "n_groups": inf.n_groups}
        if lines is not None:
            llo, lhi = wilson(int(line_hit.sum()), n, level)
            linf = pair_inference(line_hit.astype(float) - (unpatched[1] == expect[m]).astype(float), groups, level,
                                  seed=seed)
            row.update({"line_share": float(line_hit.mean()), "line_lo": llo, "line_hi": lhi,
                        "line_chance": float(np.mean(unpatched[1] == expect[m])), "line_effect": float(linf.mean),
                        "line_effect_lo": float(linf.lo), "line_effect_hi": float(linf.hi), "line_p": float(linf.p)})
        res.summary[m] = row
    return res




# --------------------------------------------------------------------------- the test at a probe's site (the study's stage)

#: the outcomes of a causal test at a probe's site (`causal_outcome`); the words are the stage's (experiments.stages.causal)
OUTCOMES = ("used", "readable-not-shown", "not-readable", "no-test")
#: cells of two occupancies closer than this count as equal (a drawing "kept"): occupancies are multiples of 1/16
SAME = 1e-9


def concept(targets: np.ndarray, rank: int) -> np.ndarray:
    """The concept an intervention moves: the targets' (e.g. occupancy, [n, k]) first `rank` principal components'
    scores [n, r] (r <= rank; components with no variance dropped). Moving a few components instead of every output
    keeps the subspace well below the prompts' own span (an n-prompt design spans n - 1 directions, so erasing the
    covariance with all k outputs could erase every way the prompts differ)."""
    y = np.asarray(targets, dtype=np.float64).reshape(len(targets), -1)
    yc = y - y.mean(0)
    _, s, vt = np.linalg.svd(yc, full_matrices=False)
    keep = int(min(rank, int((s > 1e-9 * (s[0] if s.size else 0)).sum())))
    if keep == 0:
        raise ValueError("the targets do not vary over these prompts: there is no concept to move")
    return yc @ vt[:keep].T


def _distance(a: np.ndarray | None, b: np.ndarray | None) -> float:
    """Mean absolute difference per cell of two occupancies (0: the same drawing, 1: opposite everywhere); NaN when
    either drew nothing the sandbox accepts."""
    if a is None or b is None:
        return float("nan")
    return float(np.abs(np.asarray(a) - np.asarray(b)).mean())


def _score(o: np.ndarray | None, source: np.ndarray, decoy: np.ndarray) -> float:
    """How much nearer the source's drawing than the decoy's `o` is: d(o, decoy) - d(o, source). A drawing the
    sandbox did not accept is as far from one as from the other (0), so a failure is an outcome, never a dropped
    prompt (dropping them selects on the intervention)."""
    return 0.0 if o is None else _distance(o, decoy) - _distance(o, source)


def rotated(basis: np.ndarray, base: np.ndarray, sources: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The size-matched control of an interchange: per row, the activation the interchange would give, with its move
    inside span(basis) turned by a random rotation: h + U R U^T (h_source - h), |R U^T (h_source - h)| =
    |U^T (h_source - h)|. The same distance moved, in the same subspace, towards no prompt in particular."""
    r = basis.shape[1]
    out = np.empty_like(sources)
    for i in range(len(sources)):
        q, rr = np.linalg.qr(rng.normal(size=(r, r)))
        q = q * np.sign(np.diag(rr))  # a uniform (Haar) rotation
        move = basis.T @ (sources[i] - base[i])
        # the row that, put through interchange_hook, gives h + U q move: h + U U^T (x - h) = h + U q move
        out[i] = base[i] + basis @ (q @ move)
    return out


def pool_drawer(blocks: int | None = None) -> Callable[[Sequence[str]], list[np.ndarray | None]]:
    """A `draw` for `causal_site`: every text through the sandbox's process pool (model output is hostile), each
    valid drawing's occupancy (flattened), None for one the sandbox did not accept."""
    from bench.sandbox.pool import SandboxPool
    from interp.probes import occupancy

    def draw(texts: Sequence[str]) -> list[np.ndarray | None]:
        with SandboxPool() as pool:
            res = pool.run(list(texts))
        return [occupancy(r.pixels, r.background, **({"blocks": blocks} if blocks else {})).ravel()
                if r.outcome == "ok" and r.pixels is not None else None for r in res]

    return draw


def _source_pairs(drawn: list[np.ndarray | None], rng: np.random.Generator) -> list[tuple[int, int] | None]:
    """For each prompt an ordered pair (source, decoy) of two *other* prompts with valid, different unpatched
    drawings, drawn at random (so the two are exchangeable: which one is the source is a coin flip); None when no such
    pair exists."""
    n = len(drawn)
    valid = [i for i in range(n) if drawn[i] is not None]
    out: list[tuple[int, int] | None] = []
    for i in range(n):
        others = [j for j in valid if j != i]
        pick = None
        if len(others) >= 2:
            for _ in range(200):
                j, k = rng.choice(others, size=2, replace=False)
                if _distance(drawn[j], drawn[k]) > SAME:
                    pick = (int(j), int(k))
                    break
        out.append(pick)
    return out


def causal_site(rt: Any, prompts: Sequence[Sequence[int]], targets: np.ndarray, layer: int, *, rank: int = 3,
                methods: Sequence[str] = ("interchange", "erasure"), seed: int = 0, groups: Sequence[Any] | None = None,
                level: float = 0.95, sampling: Sequence[Any] | None = None, stop: Any = None,
                openers: Sequence[str] | None = None,
                draw: Callable[[Sequence[str]], list[np.ndarray | None]] | None = None) -> CausalResult:
    """Is the layout a probe reads at (layer, last prompt token) used by what the model then draws? Interchange and
    erasure along the targets' concept subspace, each against a control, on continuous targets (the stage's test).

    **Interchange (the test).** Each base prompt i gets two other prompts with valid, different unpatched drawings, a
    source j and a decoy k, drawn at random. Two arms move i's activation inside the concept's subspace U (`pattern`
    of the targets' first `rank` principal components) by the same distance: the interchange puts in j's component
    (h + U U^T (h_j - h)), the control turns that move by a random rotation inside U (`rotated`: the same size, towards
    no prompt). With score(o) = d(o, o_k) - d(o, o_j) (d: mean absolute difference per occupancy cell, o_j and o_k the
    unpatched drawings; a drawing that fails scores 0, as far from one as from the other), effect_i = score(o_i') -
    score(o_i''): how much nearer the source than the decoy the interchanged drawing is, beyond what a move of the
    same size gives; exactly 0 when neither arm changed the drawing. Positive: the drawing follows the content put in.
    If the drawing depends on the move only through its size (and on anything independent of which of j and k is
    the source), the two arms are exchangeable given the pair and which of j, k is the source is a coin flip, so
    effect_i is symmetric about 0: the sign-flip p of `pair_inference` is valid. Without the control a disruption
    that grows with the move's size (a larger move when the source's layout differs more) pushes drawings towards
    far sources and read as "used" in 78-92% of such nulls (an outside attack's fakes); with it, 0-4%. The interval
    treats the base prompts (or groups) as independent while sources and decoys are shared among them: it can
    under-cover when a few prompts drive the effect as sources (85% and 60% in the attack's designs), which is why the
    verdict also needs the p. This is the continuous form of the interchange intervention accuracy (Geiger et al.).
    **Erasure (reported beside it).** LEACE of the concept at the site, against LEACE of the same number of
    directions fitted to the targets shuffled over prompts (a seeded permutation): effect_i = d(erased_i, o_i) -
    d(control_i, o_i), how much further the drawing moved from the unpatched one than under an erasure of the same
    size that reads nothing. The two erasures differ in where they cut, not only in what, so this comparison is
    descriptive (no calibration is claimed for it); the verdict reads the interchange.

    Args:
        rt: the runtime.
        prompts: token-id lists as the model sees them (at least 4).
        targets: what the probe decodes per prompt, [n, k] (e.g. the consensus occupancy the probe stage fits).
        layer: the site's layer, 0..n_layers (the hook `blocks.{layer}.hook_resid_pre`; n_layers: the last block's
            output), at each prompt's last token.
        rank: principal components of the targets that form the concept (1 or more; fewer when they vary less).
        methods: "interchange" and/or "erasure".
        seed: draws the (source, decoy) pairs, the erasure control's permutation; recorded in every row.
        groups: each prompt's template or family (the interval and the flips follow them; None: prompts independent).
        level: the intervals' level.
        sampling: one `Sampling` per prompt, used by every arm (common random numbers); None: greedy.
        stop: the `StopRule` of every drawing (None: the runtime's default).
        openers: per prompt, the code fence the prompt ends with (prepended to the answer before it is run).
        draw: texts -> flattened occupancies (None: drew nothing valid); default `pool_drawer()` (the sandbox's pool).

    Example::

        res = causal_site(rt, tokens, occupancy_targets, layer=3, groups=templates)
        res.to_frame()[["method", "effect", "effect_lo", "effect_hi", "p", "n"]]
    """
    from interp.runtime import Sampling, StopRule

    n = len(prompts) if isinstance(prompts, Sequence) and not isinstance(prompts, (str, bytes)) else -1
    if n < 4:
        raise ValueError(f"prompts: a list of at least 4 token-id lists (a base, a source, a decoy and one more), got "
                         f"{'none' if n < 0 else n}")
    if any(not isinstance(p, Sequence) or isinstance(p, (str, bytes)) or len(p) == 0 for p in prompts):
        raise ValueError("prompts: each prompt is a non-empty list of token ids")
    try:
        y = np.asarray(targets, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("targets: one row of numbers per prompt ([n, k])") from None
    if y.ndim == 0 or len(y) != n:
        raise ValueError(f"targets: one row per prompt ({n} prompts), got {len(y) if y.ndim else 'a scalar'}")
    y = y.reshape(n, -1)
    if not np.isfinite(y).all():
        raise ValueError("targets hold NaN or inf")
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 1:
        raise ValueError(f"rank must be an integer >= 1, not {rank!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, not {seed!r}")
    if isinstance(methods, str) or not methods or any(m not in ("interchange", "erasure") for m in methods):
        raise ValueError(f"methods: 'interchange' and/or 'erasure', not {methods!r}")
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer <= rt.info.n_layers:
        raise ValueError(f"layer must be an integer in 0..{rt.info.n_layers} (n_layers: the last block's output), not "
                         f"{layer!r}")
    if not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), not {level}")
    if sampling is not None and len(sampling) != n:
        raise ValueError(f"sampling: one Sampling per prompt ({n}), got {len(sampling)}")
    if openers is not None and len(openers) != n:
        raise ValueError(f"openers: one per prompt ({n}), got {len(openers)}")
    if groups is not None and len(groups) != n:
        raise ValueError(f"groups: one label per prompt ({n}), got {len(groups)}")
    z = concept(y, rank)
    draw = draw or pool_drawer()
    sampling = list(sampling) if sampling is not None else [Sampling()] * n
    stop = stop or StopRule()
    openers = list(openers) if openers is not None else [""] * n
    name = rt.hook_names([layer])[0]
    toks = [list(p) for p in prompts]
    acts = rt.capture(toks, [[len(p) - 1] for p in toks], [layer])[:, 0, 0].double().numpy()
    rng = np.random.default_rng(seed)
    shape: list[tuple[int, ...]] = []

    def drawings(hooks: list[Any]) -> list[np.ndarray | None]:
        gens = rt.generate(toks, sampling, stop, hooks=hooks)
        out = list(draw([o + g.text for o, g in zip(openers, gens)]))
        if len(out) != n:
            raise ValueError(f"draw returned {len(out)} occupancies for {n} texts: it must return one per text (None "
                             "for a drawing the sandbox did not accept)")
        out = [None if o is None else np.asarray(o, dtype=np.float64).ravel() for o in out]
        for o in out:
            if o is not None:
                if not shape:
                    shape.append(o.shape)
                if o.shape != shape[0] or not np.isfinite(o).all():
                    raise ValueError(f"draw returned an occupancy of shape {o.shape} (or with NaN) beside {shape[0]}: "
                                     "every valid drawing must give finite occupancies of one shape")
        return out

    none = drawings([])
    res = CausalResult(layer, n)
    base = {"seed": seed, "rank": int(z.shape[1]), "level": level}
    if "interchange" in methods:
        pairs = _source_pairs(none, rng)
        src = np.array([p[0] if p else i for i, p in enumerate(pairs)])
        basis = pattern(acts, z)
        moved = drawings([(name, interchange_hook(basis, acts[src]))])
        turned = drawings([(name, interchange_hook(basis, rotated(basis, acts, acts[src], rng)))])
        eff, keep = [], []
        for i, p in enumerate(pairs):
            e = None
            if p is not None:
                sj, sk = none[p[0]], none[p[1]]
                e = _score(moved[i], sj, sk) - _score(turned[i], sj, sk)
                eff.append(e)
                keep.append(i)
            res.rows.append({"method": "interchange", "prompt": i, "source": p[0] if p else None,
                             "decoy": p[1] if p else None, "effect": e,
                             "drew": moved[i] is not None, "control_drew": turned[i] is not None,
                             "kept": _same(moved[i], none[i]), "control_kept": _same(turned[i], none[i])})
        ic = [r for r in res.rows if r["method"] == "interchange"]
        why = None if len(eff) >= 2 else ("fewer than 2 prompts have two other prompts with valid, different unpatched "
                                          "drawings (a source and a decoy): every drawing alike, or failed")
        res.summary["interchange"] = {**base, **_effect_summary(eff, keep, groups, level, seed),
                                      "excluded": n - len(keep), "subspace_rank": int(basis.shape[1]),
                                      "kept": _share([r["kept"] for r in ic]),
                                      "control_kept": _share([r["control_kept"] for r in ic]),
                                      "failed": int(sum(not r["drew"] for r in ic)),
                                      "control_failed": int(sum(not r["control_drew"] for r in ic)),
                                      **({"reason": why} if why else {}),
                                      "procedure": "interchange along the concept's subspace against the same move "
                                                   "turned at random: drawing nearer the source than a decoy, sign flips"}
    if "erasure" in methods:
        perm = rng.permutation(n)
        eraser, control = leace(acts, z), leace(acts, z[perm])
        erased = drawings([(name, erase_hook(eraser))])
        ctl = drawings([(name, erase_hook(control))])
        eff, keep = [], []
        for i in range(n):
            e = _distance(erased[i], none[i]) - _distance(ctl[i], none[i])
            res.rows.append({"method": "erasure", "prompt": i, "effect": None if np.isnan(e) else e,
                             "kept": _same(erased[i], none[i]), "control_kept": _same(ctl[i], none[i])})
            if not np.isnan(e):
                eff.append(e)
                keep.append(i)
        er = [r for r in res.rows if r["method"] == "erasure"]
        res.summary["erasure"] = {**base, **_effect_summary(eff, keep, groups, level, seed),
                                  "excluded": n - len(keep), "erased_rank": eraser.rank, "control_rank": control.rank,
                                  "kept": _share([r["kept"] for r in er]), "control_kept": _share([r["control_kept"] for r in er]),
                                  "procedure": "LEACE of the concept against LEACE of shuffled targets: how much further "
                                               "the drawing moved (descriptive)"}
    return res


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Both drawings valid and equal (to SAME per cell)."""
    return bool(a is not None and b is not None and _distance(a, b) <= SAME)


def _share(flags: list[bool]) -> float | None:
    return float(np.mean(flags)) if flags else None


def _effect_summary(eff: list[float], keep: list[int], groups: Sequence[Any] | None, level: float,
                    seed: int) -> dict[str, Any]:
    """Mean effect, grouped interval and sign-flip p over the prompts that have an effect (None when too few)."""
    if len(eff) < 2:
        return {"n": len(eff), "effect": None, "effect_lo": None, "effect_hi": None, "p": None, "n_groups": None,
                "min_p": None}
    g = None if groups is None else [groups[i] for i in keep]
    from interp.pair_effects import pair_inference

    inf = pair_inference(np.asarray(eff), g, level, seed=seed)

    def num(v: Any) -> float | None:
        v = float(np.asarray(v).ravel()[0])
        return v if np.isfinite(v) else None

    return {"n": len(eff), "effect": num(inf.mean), "effect_lo": num(inf.lo), "effect_hi": num(inf.hi),
            "p": num(inf.p), "n_groups": inf.n_groups, "min_p": float(inf.min_p)}


def causal_outcome(readable: bool | None, interchange: dict[str, Any] | None, alpha: float = 0.05) -> str:
    """The verdict rule (one of OUTCOMES): "not-readable" when the probe at the site does not decode the target (its
    interval does not exclude 0; nothing to move); "used" when the interchange's effect has p <= alpha and its
    interval lies above 0; "readable-not-shown" when readable and not that; "no-test" when readability or the
    interchange's statistic is missing, or when its design cannot reach p <= alpha (too few groups: min_p > alpha)."""
    if readable is None:
        return "no-test"
    if not readable:
        return "not-readable"
    if not interchange or interchange.get("p") is None or interchange.get("effect_lo") is None:
        return "no-test"
    if (interchange.get("min_p") or 0) > alpha:  # too few groups: this design cannot reject, so it shows nothing
        return "no-test"
    return "used" if interchange["p"] <= alpha and interchange["effect_lo"] > 0 else "readable-not-shown"


__all__ = ["BASES", "OUTCOMES", "CausalResult", "Eraser", "causal_outcome", "causal_site", "causal_test", "concept",
           "drawn_layout", "erase_hook", "interchange_hook", "leace", "pattern", "pool_drawer", "readout", "rotated", "subspace",
           "wilson"]
