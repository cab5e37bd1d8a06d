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


__all__ = ["BASES", "CausalResult", "Eraser", "causal_test", "pattern", "drawn_layout", "erase_hook", "interchange_hook", "leace", "readout", "subspace",
           "wilson"]
