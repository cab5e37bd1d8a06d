"""Probes checked on data with known answers: planted signal, pure noise (and a leaky variant that
must fail), permutation null, bootstrap coverage, equality with scikit-learn's nested CV."""

import numpy as np
import pytest

from interp.probes import (Grid, benjamini_hochberg, bootstrap_ci, fold_predictions, nested_cv, nested_cv_layers,
                           occupancy, permutation_test, pooled_r2, split_half_ceiling, tfidf_features)

SMALL = Grid(pca=(2, 4, 8, 16), alphas=(0.1, 1.0, 10.0, 100.0, 1000.0), outer=5, inner=4)


def planted(n=145, d=120, factors=6, r2=0.5, seed=0):
    rng = np.random.default_rng(seed)
    f = rng.normal(size=(n, factors))
    x = f @ rng.normal(size=(factors, d)) * 3 + rng.normal(size=(n, d))
    w = rng.normal(size=(factors, 36))
    signal = f @ w
    noise_sd = np.sqrt(signal.var(axis=0).mean() * (1 - r2) / r2)
    y = signal + rng.normal(scale=noise_sd, size=signal.shape)
    return x, y


def test_occupancy_blocks():
    px = np.full((24, 24, 3), 255, np.uint8)
    px[0:4, 0:4] = (255, 0, 0)  # block (0, 0) full
    px[4:6, 20:24] = (0, 0, 255)  # half of block (1, 5)
    occ = occupancy(px, (255, 255, 255))
    assert occ.shape == (6, 6) and occ[0, 0] == 1.0 and occ[1, 5] == 0.5 and occ.sum() == 1.5
    assert occupancy(px, (255, 0, 0))[0, 0] == 0.0


def test_planted_signal_is_recovered_within_its_ci():
    x, y = planted(r2=0.5)
    res = nested_cv(x, y, SMALL, seed=0)
    lo, hi = bootstrap_ci(y, res.pred, n_boot=400, seed=0)
    # the truth is 0.5 for a probe that knows the factors; a finite-sample probe sits a little below
    assert lo <= 0.5 <= hi + 0.05 and res.r2 > 0.35
    assert len(res.chosen) == 5 and all(c["k"] in SMALL.pca for c in res.chosen)


def test_pure_noise_gives_no_skill_and_a_leaky_variant_fails():
    honest, honest1, leaky = [], [], []
    big = Grid(pca=(1, 2, 4, 8, 16, 32, 64), alphas=tuple(np.logspace(-3, 5, 17)), outer=5, inner=5)
    for seed in range(4):
        rng = np.random.default_rng(100 + seed)
        x, y = rng.normal(size=(145, 200)), rng.normal(size=(145, 36))
        honest.append(nested_cv(x, y, big, seed).r2)
        y1 = y[:, :1]
        honest1.append(nested_cv(x, y1, big, seed).r2)
        # the leak: keep the 10 features most correlated with the target, chosen on ALL prompts
        corr = np.abs(((x - x.mean(0)) / x.std(0)).T @ ((y1 - y1.mean(0)) / y1.std(0)))[:, 0]
        keep = np.argsort(-corr)[:10]
        leaky.append(nested_cv(x[:, keep], y1, big, seed).r2)
    assert np.mean(honest) <= 0.0 and np.mean(honest1) <= 0.0
    assert np.mean(leaky) > 0.05  # the same check catches selection outside the folds


def test_permutation_null_is_centred_near_zero():
    x, y = planted(r2=0.5, seed=3)
    obs = nested_cv(x, y, SMALL, 0).r2
    p, null = permutation_test(x, y, obs, SMALL, n_perm=12, seed=1)
    assert -0.1 < np.mean(null) < 0.03 and p == pytest.approx(1 / 13)


def test_bootstrap_ci_coverage_on_a_simulated_case():
    rng = np.random.default_rng(0)
    # population: y ~ N(0, 1) per cell, prediction = y + N(0, 1) noise -> pooled R^2 = 0
    # make it informative: prediction = 0.8 y + N(0, 0.6) -> R^2 = 1 - E[(0.2y - e)^2] = 1 - (0.04 + 0.36) = 0.6
    hits = 0
    for rep in range(120):
        y = rng.normal(size=(145, 36))
        pred = 0.8 * y + rng.normal(scale=0.6, size=y.shape)
        lo, hi = bootstrap_ci(y, pred, n_boot=300, seed=rep)
        hits += lo <= 0.6 <= hi
    assert 0.85 <= hits / 120 <= 0.995


def test_fast_probe_equals_scikit_learn_nested_cv():
    from sklearn.decomposition import PCA
    from sklearn.linear_model import Ridge
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GridSearchCV, KFold, cross_val_predict
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = planted(n=80, d=40, seed=5)
    grid = Grid(pca=(2, 4, 8), alphas=(0.5, 5.0, 50.0), outer=4, inner=3)
    ours = nested_cv(x, y, grid, seed=7)
    pipe = Pipeline([("s", StandardScaler()), ("pca", PCA(svd_solver="full")), ("ridge", Ridge())])
    search = GridSearchCV(pipe, {"pca__n_components": list(grid.pca), "ridge__alpha": list(grid.alphas)},
                          cv=KFold(grid.inner, shuffle=True, random_state=8), scoring=make_scorer(pooled_r2))
    theirs = cross_val_predict(search, x, y, cv=KFold(grid.outer, shuffle=True, random_state=7))
    assert abs(pooled_r2(y, theirs) - ours.r2) < 1e-9
    assert np.allclose(theirs, ours.pred, atol=1e-8)


def test_fold_predictions_match_a_direct_fit():
    x, y = planted(n=60, d=30, seed=2)
    from sklearn.decomposition import PCA
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    p = fold_predictions(x[:40], y[:40], x[40:], [3, 7], [1.0, 10.0])
    s = StandardScaler().fit(x[:40])
    pca = PCA(7, svd_solver="full").fit(s.transform(x[:40]))
    ref = Ridge(10.0).fit(pca.transform(s.transform(x[:40])), y[:40]).predict(pca.transform(s.transform(x[40:])))
    assert np.allclose(p[1, 1], ref, atol=1e-9)


def test_layer_is_chosen_inside_the_folds():
    x, y = planted(seed=4)
    rng = np.random.default_rng(0)
    noise = rng.normal(size=x.shape)
    res = nested_cv_layers([noise, x, noise[:, ::-1].copy()], y, SMALL, seed=0, layer_names=[0, 1, 2])
    assert all(c["layer"] == 1 for c in res.chosen) and res.r2 > 0.35


def test_controls_helpers():
    assert tfidf_features(["draw a cat", "draw a dog", "a red flag"]).shape[0] == 3
    q = benjamini_hochberg([0.01, 0.04, 0.03, 0.5])
    from scipy.stats import false_discovery_control

    assert q == list(false_discovery_control([0.01, 0.04, 0.03, 0.5]))
    rng = np.random.default_rng(0)
    t = rng.normal(size=(100, 36))
    c = split_half_ceiling(t + rng.normal(scale=0.5, size=t.shape), t + rng.normal(scale=0.5, size=t.shape))
    # each half = truth + noise of variance 0.25 -> r = 1/1.25 = 0.8; ceiling = 2r/(1+r) = 0.889
    assert abs(c["r_half"] - 0.8) < 0.04 and abs(c["ceiling"] - 0.889) < 0.03


def test_constant_features_predict_the_training_mean():
    rng = np.random.default_rng(0)
    y = rng.normal(size=(20, 36))
    x = np.ones((20, 8))  # e.g. layer 0 at a position whose token is the same in every prompt
    p = fold_predictions(x[:15], y[:15], x[15:], [2, 4], [1.0])
    assert np.allclose(p, y[:15].mean(axis=0))
    assert nested_cv(x, y, SMALL, 0).r2 < 0.05


def test_delta_permutation_test_refits_both_probes_and_is_calibrated():
    """Known answers for the headline test. (1) Activations that only re-encode what the prompt words
    already say: both probes decode the layout, Delta ~ 0, and the test refitting both probes on every
    permutation does not reject; the broken variant that keeps the text probe's observed R^2 fixed in
    the null rejects (a false discovery). (2) Under the null (nothing decodable) p is roughly uniform."""
    from interp.probes import LayerSweep, perm_p, permutations

    rng = np.random.default_rng(7)
    n, words = 60, 30
    text = (rng.random((n, words)) < 0.2).astype(float)
    y = text @ rng.normal(size=(words, 36)) * 0.3 + rng.normal(scale=0.2, size=(n, 36))
    acts = [rng.normal(size=(n, 40)) for _ in range(2)]
    acts[1] = acts[1] * 0.3 + text @ rng.normal(size=(words, 40))  # the layer re-encodes the prompt words
    g = Grid(pca=(4, 8, 16), alphas=(0.1, 1.0, 10.0, 100.0), outer=5, inner=4)
    act_sweep, text_sweep = LayerSweep(acts, g, 0), LayerSweep([text], g, 0)
    best, txt = act_sweep.best(y), text_sweep.layer(y, 0)
    assert best.r2 > 0.3 and txt.r2 > 0.3
    delta = best.r2 - txt.r2
    perms = permutations(n, 49, 3)
    null_act = act_sweep.permuted_r2(y, perms)
    right = perm_p(null_act - text_sweep.permuted_r2(y, perms), delta)
    broken = perm_p(null_act - txt.r2, delta)
    assert right > 0.1 and broken <= 0.02
    ps = []
    for rep in range(12):
        r = np.random.default_rng(100 + rep)
        xs = [r.normal(size=(40, 25)) for _ in range(3)]
        yy, tt = r.normal(size=(40, 36)), (r.random((40, 20)) < 0.2).astype(float)
        a, t = LayerSweep(xs, SMALL, rep), LayerSweep([tt], SMALL, rep)
        obs = a.best(yy).r2 - t.layer(yy, 0).r2
        pp = permutations(40, 19, rep)
        ps.append(perm_p(a.permuted_r2(yy, pp) - t.permuted_r2(yy, pp), obs))
    assert 0.3 <= np.mean(ps) <= 0.7 and sum(p <= 0.05 for p in ps) <= 3


def test_permutations_reuse_decompositions_and_equal_a_naive_refit():
    from interp.probes import LayerSweep, permutations

    rng = np.random.default_rng(11)
    xs = [rng.normal(size=(50, 30)) for _ in range(3)]
    y = rng.random((50, 36)) + xs[1][:, :1]
    perms = permutations(50, 8, 2)
    naive = [nested_cv_layers(xs, y[p], SMALL, 4).r2 for p in perms]
    fast = LayerSweep(xs, SMALL, 4).permuted_r2(y, perms, batch=3)
    assert np.allclose(naive, fast, rtol=0, atol=1e-12)
    naive1 = [nested_cv(xs[2], y[p], SMALL, 4).r2 for p in perms]
    assert np.allclose(naive1, LayerSweep(xs, SMALL, 4).permuted_r2(y, perms, layers=[2]), rtol=0, atol=1e-12)


def test_vectorised_bootstrap_equals_resampling_by_index():
    from interp.probes import bootstrap_counts, bootstrap_r2

    rng = np.random.default_rng(3)
    y, pred = rng.random((30, 36)), rng.random((30, 36))
    w = bootstrap_counts(30, 50, 9)
    idx = [np.repeat(np.arange(30), w[b].astype(int)) for b in range(50)]
    direct = [pooled_r2(y[i], pred[i]) for i in idx]
    assert np.allclose(bootstrap_r2(y, pred, w), direct, atol=1e-10)


def test_fitted_probe_is_the_cross_validated_probe_in_activation_space():
    """FittedProbe's affine map predicts exactly what the nested-CV machinery predicts for the same (k, alpha),
    and its direction is the gradient of the masked prediction."""
    from interp.probes import FittedProbe

    x, y = planted(n=80, d=50, seed=5)
    probe = FittedProbe.fit(x[:60], y[:60], k=8, alpha=10.0)
    want = fold_predictions(x[:60], y[:60], x[60:], [8], [10.0])[0, 0]
    assert np.allclose(probe.predict(x[60:]), want, atol=1e-9)
    mask = np.zeros(36, bool)
    mask[:18] = True
    d = probe.direction(mask)
    eps = 1e-3
    grad = np.array([(probe.predict(x[:1] + eps * np.eye(50)[j])[0, mask].sum() - probe.predict(x[:1])[0, mask].sum()) / eps
                     for j in range(50)])
    assert np.allclose(d, grad / np.linalg.norm(grad), atol=1e-6)


# ---------------------------------------------------------------- selections never rest on rounding (issue 19)


def _selection(res):
    return [(c.get("layer"), c["k"], c["alpha"]) for c in res.chosen]


def test_equal_candidates_are_ties_broken_by_the_documented_order():
    """A layer that repeats an earlier one with its columns reordered has criteria equal up to rounding: the earlier
    layer must win in every fold (before: the later one won in 18 of 20 data sets, by the last bits)."""
    from interp.probes import LayerSweep

    grid = Grid(pca=(2, 4, 8, 16), alphas=tuple(float(a) for a in np.logspace(-2, 5, 15)), outer=5, inner=4)
    for seed in range(8):
        rng = np.random.default_rng(seed)
        f = rng.normal(size=(40, 3))
        x = f @ rng.normal(size=(3, 60)) + rng.normal(size=(40, 60))
        y = f @ rng.normal(size=(3, 36)) + rng.normal(size=(40, 36))
        res = LayerSweep([rng.normal(size=(40, 60)), x, x[:, rng.permutation(60)]], grid, 0).best(y)
        assert [c["layer"] for c in res.chosen] == [1] * 5, seed


def test_a_test_fold_without_variance_is_never_divided_by():
    """Targets from three programs, most prompts the same: inner test folds whose targets are all equal leave a sum
    of squares of rounding size. Before, 1 - sse/sst was +-1e14 noise that decided (k, alpha); now such a fold has
    no R^2, every criterion is a mean of true R^2 values, and the result is the same on reordered columns (another
    summation order, as another BLAS kernel gives) and with 1 or 2 threads."""
    from threadpoolctl import threadpool_limits

    from interp.probes import LayerSweep

    grid = Grid(pca=(2, 4, 8, 16), alphas=tuple(float(a) for a in np.logspace(-2, 5, 15)), outer=5, inner=4)
    for seed in range(6):
        rng = np.random.default_rng(seed)
        grids = rng.uniform(size=(3, 36)).round(2)
        which = rng.choice(3, size=20, p=[0.8, 0.1, 0.1])
        y = grids[which]
        xs = [rng.normal(size=(20, 48)) + which[:, None] * 0.3 * layer for layer in range(3)]
        res = LayerSweep(xs, grid, 0).best(y)
        assert all(np.isfinite(c["inner_r2"]) and -50 < c["inner_r2"] <= 1 for c in res.chosen), res.chosen
        perm = rng.permutation(48)
        other = LayerSweep([x[:, perm] for x in xs], grid, 0).best(y)
        with threadpool_limits(1):
            one = LayerSweep(xs, grid, 0).best(y)
        for r in (other, one):
            assert _selection(r) == _selection(res) and abs(r.r2 - res.r2) < 1e-9


def test_a_constant_feature_column_carries_no_rounding():
    """A constant column's standard deviation is rounding of its mean, not 0: it must standardise to 0, not to a
    unit-variance column of rounding."""
    from interp.probes import _standardise

    x = np.full((7, 3), 0.1)
    x[:, 1] = np.arange(7)
    z, _ = _standardise(x, x)
    assert np.all(z[:, [0, 2]] == 0) and abs(z[:, 1].std() - 1) < 1e-12


def test_float32_features_are_probed_in_float64():
    """Activation stores hold float32: arithmetic in float32 left 1e-7 of rounding in every R^2 (another BLAS kernel
    moved permutation nulls by that much, more than the tie tolerance). The sweep computes in float64."""
    from interp.probes import LayerSweep

    x, y = planted(n=60, d=80, r2=0.5, seed=4)
    x32 = x.astype(np.float32)
    a = LayerSweep([x32], SMALL, 0).layer(y, 0)
    b = LayerSweep([x32.astype(np.float64)], SMALL, 0).layer(y, 0)
    assert abs(a.r2 - b.r2) < 1e-12 and _selection(a) == _selection(b)


# ---------------------------------------------------------------- issue 28, item 1: no NaN is ever significant


def test_a_null_with_nan_is_no_p_value():
    """`perm_p` ignored NaN: a null of all NaN (every Freedman-Lane target NaN, issue 28) gave p = 1/(n+1), the most
    significant result possible. A null or an observed statistic that is not finite gives no p-value (NaN)."""
    from interp.probes import perm_p

    assert np.isnan(perm_p(np.full(299, np.nan), -0.003))
    partly = np.r_[np.zeros(10), np.nan]
    assert np.isnan(perm_p(partly, 0.5))  # one NaN world is a broken null, not one fewer exceedance
    assert np.isnan(perm_p(np.zeros(9), float("nan")))
    assert perm_p(np.zeros(9), 0.5) == 0.1 and perm_p(np.zeros(9), -0.5) == 1.0  # finite nulls as before


def test_zero_singular_values_are_dropped_on_the_svd_branch_too():
    """With more prompts than features (n > d) `_pca_scores` takes a thin SVD, which kept zero singular values (the Gram
    branch drops them): a fit on constant features (layer 0 at a fixed template position, every organism) divided 0
    by 0 and predicted NaN. Singular values below a relative tolerance of the largest are dropped on both branches."""
    from interp.probes import FittedProbe, _pca_scores

    rng = np.random.default_rng(0)
    y = rng.normal(size=(50, 36))
    p = FittedProbe.fit(np.ones((50, 8)), y, 4, 1.0)
    assert p.k == 0 and np.allclose(p.predict(np.ones((3, 8))), y.mean(axis=0))
    # rank 2 in 5 columns (near-exact duplicates: singular values of rounding size, not exactly 0)
    base = rng.normal(size=(40, 2))
    z = np.c_[base, base @ rng.normal(size=(2, 3))]
    z = z - z.mean(axis=0)
    for zz in (z, z[:4]):  # SVD branch (n > d) and Gram branch (n <= d) agree on the rank
        u, s, pte = _pca_scores(zz, zz, 5)
        assert s.size == min(2, zz.shape[0]) and np.all(np.isfinite(pte))
    fp = FittedProbe.fit(np.c_[base, base @ rng.normal(size=(2, 3))], y[:40], 5, 1.0)
    assert fp.k == 2 and np.all(np.isfinite(fp.coef))


def test_a_nan_fit_gives_a_missing_p_with_its_reason():
    """The stage's p fields: a null with a NaN is a missing value with its reason, never a number."""
    from experiments.stages.probe import p_fields

    got = p_fields("p_fl", np.r_[np.zeros(5), np.nan], 0.1)
    assert got["p_fl"] is None and "not finite" in got["p_fl_missing"]
    assert p_fields("p_fl", np.zeros(4), 0.1) == {"p_fl": 0.2}


def test_outer_folds_in_threads_give_the_serial_results_bit_for_bit():
    """A sweep's outer folds run in a thread each where BLAS may use several threads (the paper's shape needs both
    cores: perf/bench_permutations.py); the predictions, choices and permutation null are those of the serial
    loop, bit for bit, in the folds' order (a merge that wrote a fold's predictions onto another fold's rows, or
    its choices out of order, fails here)."""
    from threadpoolctl import threadpool_limits

    import interp.probes as probes

    rng = np.random.default_rng(4)
    xs = [rng.normal(size=(60, 30)) for _ in range(3)]
    xs[1][:, :3] += rng.normal(size=(60, 3)) * 2
    y = xs[1][:, :3] @ rng.normal(size=(3, 4)) + rng.normal(size=(60, 4))
    perms = probes.permutations(60, 40, seed=2)
    calls = []
    real = probes._in_threads

    def spy(work, items):
        with threadpool_limits(2, user_api="blas"):
            calls.append(len(items))
            return real(work, items)

    with threadpool_limits(1):
        serial = probes.LayerSweep(xs, Grid(outer=5, inner=4), 0)
        one, null1 = serial.best(y), serial.permuted_r2(y, perms)
    probes._in_threads = spy
    try:
        threaded = probes.LayerSweep(xs, Grid(outer=5, inner=4), 0)
        two, null2 = threaded.best(y), threaded.permuted_r2(y, perms)
    finally:
        probes._in_threads = real
    assert calls and all(c == 5 for c in calls)
    assert np.array_equal(one.pred, two.pred) and one.chosen == two.chosen and np.array_equal(null1, null2)
    for (tr, te), c in zip(threaded.outer, two.chosen):  # each fold's rows hold that fold's chosen probe, fitted directly
        direct = probes.fold_predictions(xs[c["layer"]][tr], y[tr], xs[c["layer"]][te], [c["k"]], [c["alpha"]])[0, 0]
        assert np.allclose(two.pred[te], direct, rtol=0, atol=1e-9)


def test_targets_of_few_directions_are_fitted_in_those_directions_with_the_same_choices():
    """Targets whose centred columns span r < C directions (the planners' 36 occupancy cells span 3) are fitted in
    those r directions (`output_basis`): every choice is the full fit's and every prediction equals it to rounding,
    constant columns included (predicted as their constant, not as 0), also for rows that no test fold holds and
    for a batch of permutations. Full-rank targets take the unchanged path."""
    from interp.probes import LayerSweep, output_basis, permutations

    rng = np.random.default_rng(3)
    xs = [rng.normal(size=(60, 20)) for _ in range(3)]
    xs[2][:, :2] += rng.normal(size=(60, 2))
    y = (xs[2][:, :3] + 0.5 * rng.normal(size=(60, 3))) @ rng.normal(size=(3, 36))
    y[:, 5] = 0.25  # a cell at a constant share
    y[:, 7] = 0.0  # a cell no layout reaches
    assert output_basis(y[None])[1] == 3
    assert output_basis(rng.normal(size=(1, 60, 4))) is None
    perms = permutations(60, 6, 1)
    for sweep in (LayerSweep(xs, SMALL, 2), LayerSweep(xs, SMALL, 2, folds=[(np.arange(40), np.arange(40, 55))])):
        yb = y[perms].astype(np.float64)
        fast, chosen = sweep._run(yb, range(3))
        full, chosen_full = sweep._run_columns(yb, range(3))
        assert chosen == [[{**c, "inner_r2": pytest.approx(c["inner_r2"], abs=1e-12)} for c in cs] for cs in chosen_full]
        assert np.abs(fast - full).max() < 1e-12
        tested = np.concatenate([te for _, te in sweep.outer])
        assert np.allclose(fast[:, tested, 5], 0.25, rtol=0, atol=1e-12) and np.abs(fast[:, tested, 7]).max() < 1e-12
        assert np.all(fast[:, np.setdiff1d(np.arange(60), tested)] == 0)


def test_a_constant_target_column_does_not_pick_the_screened_columns_by_its_rounding():
    """The screened text baselines keep the columns most associated with the targets, a sum over output columns of
    squared correlations. A column constant up to rounding (a cell every layout leaves empty, as predicted by a
    probe) correlates with nothing; scaled to unit norm its last bits chose 3 of 4 columns (a 3e-15 change of a
    probe's predictions moved a readable share by 0.03)."""
    from interp.baselines import screened_predictions
    from interp.probes import _kfold

    rng = np.random.default_rng(5)
    x = rng.normal(size=(80, 60))
    signal = x[:, 0] + 0.3 * rng.normal(size=80)
    folds = _kfold(80, 5, 0)
    got = []
    for seed in (1, 2):
        t = np.c_[signal, 0.5 + 1e-16 * np.random.default_rng(seed).normal(size=80)]
        got.append(screened_predictions(x, t, SMALL, folds, keep=4))
    assert np.abs(got[0] - got[1]).max() < 1e-9
