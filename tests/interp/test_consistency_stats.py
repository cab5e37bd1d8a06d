"""interp/consistency.py on constructed answers: coherence, local structure, the entropy regression, the map."""

import math

import numpy as np
import pytest

from interp.consistency import entropy_fit, foreground, local_distances, project_2d, prompt_coherence


def _clusters(rng, prompts=12, attempts=5, d=16, spread=0.0):
    centres = rng.normal(size=(prompts, d))
    emb = np.repeat(centres, attempts, axis=0) + spread * rng.normal(size=(prompts * attempts, d))
    labels = [f"p{i}" for i in range(prompts) for _ in range(attempts)]
    return emb, labels


def tight(c):
    """The check a consistent model passes: within-prompt distance far below between-prompt, clear clusters."""
    return c["ratio"] < 0.1 and c["silhouette"] > 0.9


def test_identical_attempts_give_ratio_zero_and_silhouette_one():
    emb, labels = _clusters(np.random.default_rng(0))
    c = prompt_coherence(emb, labels)
    assert c["d_intra"] == pytest.approx(0.0, abs=1e-9)
    assert c["ratio"] == pytest.approx(0.0, abs=1e-9)
    assert c["silhouette"] == pytest.approx(1.0, abs=1e-9)
    assert (c["n_prompts"], c["n_renders"]) == (12, 60)
    assert tight(c)


def test_attempts_unrelated_to_their_prompt_give_ratio_one_and_silhouette_not_above_zero():
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(60 * 5, 16))
    labels = [f"p{i}" for i in range(60) for _ in range(5)]
    c = prompt_coherence(emb, labels)
    assert c["ratio"] == pytest.approx(1.0, abs=0.05)
    # no structure: b(i) is the minimum over 59 other prompts' mean distances, so it falls below a(i)
    # and the silhouette is negative (the paper's "negative at every tier" for two models)
    assert -0.4 < c["silhouette"] < 0.02
    two = prompt_coherence(emb[:100], [f"p{i % 2}" for i in range(100)])  # two big random clusters: about 0
    assert abs(two["silhouette"]) < 0.05
    assert not tight(c)


def test_shuffled_labels_fail_the_check():
    """The broken variant: the same tight clusters, but the prompt labels are shuffled across attempts."""
    rng = np.random.default_rng(2)
    emb, labels = _clusters(rng)
    broken = prompt_coherence(emb, list(rng.permutation(labels)))
    assert broken["ratio"] > 0.7 and broken["silhouette"] < 0.2
    assert not tight(broken)


def test_intra_and_inter_weight_every_prompt_equally():
    # 1-D points on the unit circle so cosine distances are known: prompt a = {0, 0, 90 deg}, b = {180 deg, 180 deg}
    ang = np.deg2rad([0, 0, 90, 180, 180])
    emb = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    c = prompt_coherence(emb, ["a", "a", "a", "b", "b"])
    intra_a = (0 + 1 + 1) / 3  # pairs (0,0), (0,90), (0,90)
    intra_b = 0.0
    assert c["d_intra"] == pytest.approx((intra_a + intra_b) / 2)
    inter = (2 + 2 + 1 + 1 + 2 + 2) / 6  # every a-b pair once
    assert c["d_inter"] == pytest.approx(inter)
    assert c["ratio"] == pytest.approx(c["d_intra"] / inter)


def test_coherence_edge_cases():
    with pytest.raises(ValueError):
        prompt_coherence(np.zeros((3, 2)), ["a", "a", "b"])  # a prompt with one attempt
    one = prompt_coherence(np.eye(2), ["a", "a"])
    assert one["d_intra"] == pytest.approx(1.0) and one["ratio"] is None and one["silhouette"] is None
    assert prompt_coherence(np.zeros((0, 2)), [])["d_intra"] is None


def test_local_distance_is_zero_for_identical_attempts_and_reads_only_the_joint_foreground():
    rng = np.random.default_rng(3)
    keys = rng.normal(size=(1, 9, 4))
    fg = np.zeros((1, 9), bool)
    fg[0, [0, 1, 4]] = True
    assert local_distances(np.concatenate([keys, keys]), np.concatenate([fg, fg])) == pytest.approx([0.0], abs=1e-6)
    # change keys of background cells only: no distance; change a foreground cell's key: a distance
    other = keys.copy()
    other[0, 8] = rng.normal(size=4)
    assert local_distances(np.concatenate([keys, other]), np.concatenate([fg, fg])) == pytest.approx([0.0], abs=1e-6)
    other[0, 4] = -keys[0, 4]  # cosine with every other cell flips sign
    s = keys[0] / np.linalg.norm(keys[0], axis=1, keepdims=True)
    sim = s @ s.T
    expect = 4 * (abs(sim[4, 0]) + abs(sim[4, 1])) / (3 * 2)  # |s - (-s)| = 2|s| on 4 of the 6 ordered pairs
    assert local_distances(np.concatenate([keys, other]), np.concatenate([fg, fg])) == pytest.approx([expect], rel=1e-5)


def test_local_distance_counts_a_part_drawn_elsewhere():
    """M is the union: a render with its foreground moved is compared over both places."""
    keys = np.zeros((2, 4, 2))
    keys[:, :, 0] = 1.0  # background-like key everywhere
    keys[0, 0] = [0.0, 1.0]  # the part at cell 0 in attempt 0 ...
    keys[1, 3] = [0.0, 1.0]  # ... and at cell 3 in attempt 1
    fg = np.array([[1, 0, 0, 0], [0, 0, 0, 1]], bool)
    (d,) = local_distances(keys, fg)
    # M = {0, 3}: S_0[0,3] = 0 (orthogonal), S_1[0,3] = 0 -> the same relation, distance 0 ...
    assert d == pytest.approx(0.0, abs=1e-7)
    fg3 = np.array([[1, 1, 0, 0], [0, 1, 0, 1]], bool)
    # ... while with cell 1 in both foregrounds, cell 0 relates to cell 1 differently in the two attempts
    (d3,) = local_distances(keys, fg3)
    assert d3 > 0.3


def test_local_distance_skips_pairs_without_two_foreground_cells():
    keys = np.random.default_rng(4).normal(size=(3, 4, 2))
    fg = np.zeros((3, 4), bool)
    fg[2, :2] = True
    assert len(local_distances(keys, fg)) == 2  # (0,2) and (1,2); (0,1) has no foreground


def test_foreground_matches_the_occupancy_definition():
    from interp.probes import occupancy

    px = np.full((24, 24, 3), 255, np.uint8)
    px[3:7, 5:9] = (255, 0, 0)
    fg = foreground(px, (255, 255, 255))
    assert fg.sum() == 16 and fg[3 * 24 + 5] and not fg[0]
    assert occupancy(px, (255, 255, 255)).sum() * 16 == pytest.approx(fg.sum())


def _planted(n=8, seed=5):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.2, 1.5, n)
    r = rng.normal(scale=0.01, size=n)
    a = np.stack([np.ones(n), x], axis=1)
    r = r - a @ np.linalg.lstsq(a, r, rcond=None)[0]  # residuals orthogonal to the line: OLS must return them
    y = 0.05 + 0.2 * x + r
    return x, y, r


def test_entropy_regression_recovers_a_planted_line_and_residuals():
    x, y, r = _planted()
    f = entropy_fit(x, y)
    assert f["slope"] == pytest.approx(0.2, abs=1e-9) and f["intercept"] == pytest.approx(0.05, abs=1e-9)
    np.testing.assert_allclose(f["residual"], r, atol=1e-12)
    np.testing.assert_allclose(np.asarray(f["fitted"]) + r, y, atol=1e-12)
    assert f["rho"] > 0.9 and f["p"] < 0.01 and f["note"] is None
    assert f["p_method"].startswith("exact")


def test_entropy_regression_fails_when_the_pairing_is_broken():
    """The broken variant: entropies shuffled against distances do not give back the planted residuals."""
    x, y, r = _planted()
    f = entropy_fit(np.random.default_rng(6).permutation(x), y)
    assert not np.allclose(f["residual"], r, atol=1e-3)
    assert f["rho"] < 0.9


def test_spearman_exact_p_known_value():
    f = entropy_fit([1, 2, 3, 4, 5], [0.1, 0.2, 0.3, 0.4, 0.6])
    assert f["rho"] == pytest.approx(1.0)
    assert f["p"] == pytest.approx(2 / math.factorial(5))  # the identity and its reverse
    big = entropy_fit(np.arange(10.0), np.arange(10.0) ** 2)
    assert big["p_method"].startswith("t-approximation") and big["p"] < 1e-6


def test_entropy_regression_with_too_few_models_reports_instead_of_crashing():
    for n in (0, 1, 2):
        f = entropy_fit(list(range(n)), list(range(n)))
        assert f["rho"] is None and f["slope"] is None and f["residual"] == [None] * n
        assert "at least 3 models" in f["note"]
    flat = entropy_fit([1.0, 1.0, 1.0], [0.1, 0.2, 0.3])
    assert flat["slope"] is None and "same mean entropy" in flat["note"]
    same_y = entropy_fit([1.0, 2.0, 3.0], [0.1, 0.1, 0.1])
    assert same_y["slope"] == pytest.approx(0.0, abs=1e-12) and same_y["rho"] is None and same_y["note"]


def _separated(method, seed):
    rng = np.random.default_rng(7)
    a = rng.normal(size=(20, 8)) * 0.05 + np.eye(8)[0]
    b = rng.normal(size=(20, 8)) * 0.05 + np.eye(8)[1]
    xy = project_2d(np.concatenate([a, b]), method, seed=seed, neighbors=5)
    d = np.linalg.norm(xy[:, None] - xy[None], axis=-1)
    np.fill_diagonal(d, np.inf)
    nearest = d.argmin(axis=1)
    return xy, ((nearest < 20) == (np.arange(40) < 20)).mean()


def test_tsne_map_keeps_clusters_apart_and_is_seeded():
    xy, own = _separated("tsne", 0)
    assert xy.shape == (40, 2) and own == 1.0
    np.testing.assert_allclose(_separated("tsne", 0)[0], xy)
    with pytest.raises(ValueError):
        project_2d(np.zeros((3, 2)), "tsne")
    with pytest.raises(ValueError):
        project_2d(np.zeros((5, 2)), "pca")


@pytest.mark.slow
@pytest.mark.xdist_group("umap")  # beside the study's UMAP map (tests/experiments/test_consistency.py): numba compiles once
def test_umap_map_keeps_clusters_apart_and_is_seeded():
    """umap-learn compiles with numba on first use (about 20 s on 2 busy cores)."""
    xy, own = _separated("umap", 0)
    assert xy.shape == (40, 2) and own == 1.0
    np.testing.assert_allclose(_separated("umap", 0)[0], xy)
