"""interp/sweep.py: the probe sweep table and its plot, on data whose answer is constructed.

The promises: every (position, layer) has its R^2 with the documented interval (the same numbers as the
hand-written call on the sweep's outer folds), the chosen k and alpha, and the text baseline; the upper end never
exceeds 1; a layer that carries the plan is found and one that carries noise is not; the plot draws what the
table holds. Each check can fail: a broken variant is shown failing it."""

import numpy as np
import pytest

from interp import intervals
from interp.intervals import fold_sums, r2_interval, ratio_interval
from interp.probes import Grid, LayerSweep
from interp.sweep import COLUMNS, plot_sweep, probe_sweep

SMALL = Grid(pca=(2, 4, 8), alphas=(0.1, 1.0, 10.0, 100.0), outer=5, inner=4)
WORDS = ["left", "right"]


def planted(n=60, d=24, layers=3, signal_layer=2, noise=0.5, seed=0):
    """[n, layers, 2 positions, d] activations: at `signal_layer` the first position's features carry the target's
    3 factors (seen with noise of sd `noise`, spread over every feature, so PCA finds them), every other (layer, position) is noise; texts name a word that is
    independent of the target (so the text baseline has nothing to find)."""
    rng = np.random.default_rng(seed)
    f = rng.normal(size=(n, 3))
    y = f @ rng.normal(size=(3, 4))
    acts = rng.normal(size=(n, layers, 2, d))
    acts[:, signal_layer, 0] = (f + rng.normal(scale=noise, size=f.shape)) @ rng.normal(size=(3, d)) * 3 + acts[:, signal_layer, 0]
    texts = [f"draw on the {WORDS[i]}" for i in rng.integers(0, 2, size=n)]
    return acts, y, texts


def test_the_table_has_every_layer_and_position_with_the_documented_interval():
    acts, y, texts = planted()
    table = probe_sweep(acts, y, texts=texts, positions=["last", "first"], grid=SMALL, seed=3)
    assert list(table.columns) == list(COLUMNS) and len(table) == 3 * 2
    assert table.attrs["seed"] == 3 and table.attrs["n"] == 60
    # the same numbers as the hand-written call the issue quotes, on the same outer folds
    sw = LayerSweep([acts[:, li, 0] for li in range(3)], SMALL, 3)
    for li in range(3):
        res = sw.layer(y, li)
        iv = r2_interval(*fold_sums(y, res.pred, sw.outer), 60, intervals.test_over_train(60, SMALL.outer))
        row = table[(table.position == "last") & (table.layer == li)].iloc[0]
        assert row.r2 == res.r2 and (row.lo, row.hi, row.r2_mean) == (iv.lo, iv.hi, iv.value)
        assert row.k == tuple(c["k"] for c in res.chosen) and row.alpha == tuple(c["alpha"] for c in res.chosen)
        # and LayerSweep.layer's result carries that same interval
        assert (res.interval.lo, res.interval.hi) == (iv.lo, iv.hi)


def test_the_planted_layer_is_found_and_the_noise_layers_are_not():
    acts, y, texts = planted()
    table = probe_sweep(acts, y, texts=texts, positions=["last", "first"], grid=SMALL, seed=0)
    hit = table[(table.position == "last") & (table.layer == 2)].iloc[0]
    # the constructed read-out: 3 factors seen with noise sd 0.5 (population R^2 of the best linear read-out ~0.8)
    assert hit.lo > 0.4 and hit.r2 > 0.6
    rest = table[~((table.position == "last") & (table.layer == 2))]
    assert (rest.hi < 0.3).all() and (rest.lo < 0).all()
    # the text names a word independent of the target: its baseline finds nothing, the delta is the probe's R^2 minus it
    assert hit.text_hi < 0.3 and hit.delta == pytest.approx(hit.r2 - hit.text_r2) and hit.delta_lo > 0.3


def test_a_broken_variant_that_forgets_the_interval_fails_the_check():
    """The check above compares the table with the hand-written call: a table whose interval is the fixed-prediction
    width (no Nadeau-Bengio term) would not equal it."""
    acts, y, texts = planted()
    sw = LayerSweep([acts[:, li, 0] for li in range(3)], SMALL, 0)
    res = sw.layer(y, 2)
    a, b = fold_sums(y, res.pred, sw.outer)
    narrow = ratio_interval(a, b, 0.0, sign=-1.0, offset=1.0, scale=59 / 60)
    assert (narrow.hi - narrow.lo) < (res.interval.hi - res.interval.lo)


def test_the_upper_end_is_clipped_at_one():
    """A near-perfect probe: the symmetric t interval reaches above 1 (shown unclipped), the reported one stops at 1."""
    rng = np.random.default_rng(1)
    n = 20
    x = rng.normal(size=(n, 2))
    y = x @ np.array([[1.0], [2.0]]) + rng.normal(scale=0.3, size=(n, 1))
    y[0] += 3.0  # one badly predicted prompt makes one fold's error large: a wide interval near 1
    sw = LayerSweep([x], Grid(pca=(2,), alphas=(0.01,), outer=5, inner=4), 0)
    res = sw.layer(y, 0)
    a, b = fold_sums(y, res.pred, sw.outer)
    raw = ratio_interval(a, b, intervals.test_over_train(n, 5), sign=-1.0, offset=1.0, scale=(n - 1) / n)
    assert raw.hi > 1.0  # the case is real: unclipped, the interval claims more than a perfect prediction
    assert res.interval.hi == 1.0 and res.interval.lo == raw.lo
    table = probe_sweep(x[:, None, :], y, grid=Grid(pca=(2,), alphas=(0.01,), outer=5, inner=4))
    assert (table.hi <= 1.0).all()


def test_the_same_call_gives_the_same_table_and_repeats_steady_the_centre():
    acts, y, texts = planted(n=40)
    a = probe_sweep(acts[:, :2], y, texts=texts, grid=SMALL, seed=5, repeats=2)
    b = probe_sweep(acts[:, :2], y, texts=texts, grid=SMALL, seed=5, repeats=2)
    assert a.equals(b) and a.attrs["repeats"] == 2
    one = probe_sweep(acts[:, :2], y, texts=texts, grid=SMALL, seed=5, repeats=1)
    assert (a.r2 == one.r2).all()  # the reported R^2 is the first partition's
    assert not np.allclose(a.r2_mean, one.r2_mean)  # the centre averages the second partition in


def test_a_mapping_of_positions_and_a_tensor_are_read_alike():
    torch = pytest.importorskip("torch")
    acts, y, _ = planted(n=30)
    t1 = probe_sweep(torch.from_numpy(acts[:, :, :1]).float(), y, positions=["last"], grid=SMALL)
    t2 = probe_sweep({"last": acts[:, :, 0].astype(np.float32)}, y, grid=SMALL)
    assert np.allclose(t1.r2, t2.r2) and list(t2.position) == ["last"] * 3


@pytest.mark.parametrize("call, says", [
    (lambda a, y, t: probe_sweep(a[:10], y, grid=SMALL), "prompts of activations for 60 targets"),
    (lambda a, y, t: probe_sweep(a, y, texts=t[:5], grid=SMALL), "5 texts for 60 targets"),
    (lambda a, y, t: probe_sweep(a[:, 0, 0], y, grid=SMALL), "expected [prompts, layers, d_model]"),
    (lambda a, y, t: probe_sweep(a, y, positions=["last"], grid=SMALL), "1 position names for 2 positions"),
])
def test_bad_input_gets_one_sentence(call, says):
    acts, y, texts = planted()
    with pytest.raises(ValueError) as e:
        call(acts, y, texts)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_plot_draws_what_the_table_holds():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.collections import PolyCollection

    acts, y, texts = planted()
    table = probe_sweep(acts, y, texts=texts, positions=["last", "first"], grid=SMALL, ceiling=0.9)
    fig = plot_sweep(table, title="planted")
    ax = fig.axes[0]
    probe_lines = [ln for ln in ax.get_lines() if ln.get_label() in ("last", "first")]
    assert sorted(ln.get_label() for ln in probe_lines) == ["first", "last"]
    last = next(ln for ln in probe_lines if ln.get_label() == "last")
    assert np.allclose(last.get_ydata(), table[table.position == "last"].sort_values("layer").r2)
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 3  # one band per position and the baseline's
    ys = {ln.get_label(): ln.get_ydata()[0] for ln in ax.get_lines()}
    assert ys["text baseline"] == table.text_r2.iloc[0] and ys["split-half ceiling"] == 0.9
    # a band's vertical extent is the interval of its line (the check fails for a band drawn around r2 +- se)
    verts = np.concatenate([p.vertices for p in bands[0].get_paths()])
    first_rows = table[table.position == "first"]
    assert np.isclose(verts[:, 1].max(), first_rows.hi.max()) and np.isclose(verts[:, 1].min(), first_rows.lo.min())


def families(n_fam=20, per=5, d=16, seed=0):
    """Prompts in families (issue 28's null): the activations carry a family effect, the targets an *independent*
    family effect, so activations and targets are independent as wholes. A probe trained with a family's other
    prompts in its training folds reads family -> family mean and scores R^2 > 0 that no new family would give."""
    rng = np.random.default_rng(seed)
    fam = np.repeat(np.arange(n_fam), per)
    a = rng.normal(size=(n_fam, d))[fam] * 3 + rng.normal(size=(n_fam * per, d)) * 0.3
    y = rng.normal(size=(n_fam, 2))[fam] + rng.normal(size=(n_fam * per, 2)) * 0.3
    return a[:, None, :], y, fam


def test_groups_keep_families_out_of_the_training_folds():
    acts, y, fam = families()
    grouped = probe_sweep(acts, y, grid=SMALL, seed=1, repeats=3, groups=[f"g{i}" for i in fam])
    # the estimand (new prompts of new families) is R^2 <= 0: nothing about a new family is in the activations
    assert grouped.loc[0, "r2"] < 0.1 and grouped.loc[0, "lo"] < 0.0
    assert grouped.attrs["groups"] == 20 and "not trained on" in grouped.attrs["estimand"]
    # the broken variant, families ignored, finds a "plan" with an interval far above 0
    paper = probe_sweep(acts, y, grid=SMALL, seed=1, repeats=3)
    assert paper.loc[0, "r2"] > 0.25 and paper.loc[0, "lo"] > 0.05  # measured 0.356 [0.137, 0.576]; grouped 0.061 [-0.197, 0.298]


def test_few_groups_take_the_folds_they_can_fill_and_too_few_are_one_sentence():
    """Issue 39: 5 groups run grouped with the folds 5 groups can fill (5 outer of one group, 3 inner in the 4 groups
    left), and say so; below interp.grouping.MIN_GROUPS no grouped probe can run, which is one sentence, never a
    prompt-level table."""
    acts, y, fam = families(n_fam=5)
    table = probe_sweep(acts, y, grid=Grid(SMALL.pca, SMALL.alphas, outer=5, inner=5), groups=fam)
    assert table.attrs["groups"] == 5 and table.attrs["grouping"]["folds"] == "5x4", table.attrs
    assert table.attrs["grid"]["inner"] == 4 and "5x4-fold" in table.attrs["grouping"]["grouping_note"]
    acts, y, fam = families(n_fam=3)
    with pytest.raises(ValueError, match="3 prompt groups: a grouped probe needs at least 4"):
        probe_sweep(acts, y, grid=SMALL, groups=fam)
    with pytest.raises(ValueError, match="group labels"):
        probe_sweep(acts, y, grid=SMALL, groups=fam[:-1])
