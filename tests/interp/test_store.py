"""The HDF5 activation store: append, resume after a torn batch, per-layer reads, metadata checks."""

import h5py
import numpy as np
import pytest

from activations.store import ActivationStore, ActivationWriter, StoreError

META = {"model": "m", "positions": ["subject", "turn", "last"]}


def _acts(n, seed):
    return np.random.default_rng(seed).normal(size=(n, 5, 3, 8)).astype(np.float32)


def test_append_read_and_resume(tmp_path):
    path = tmp_path / "a.h5"
    a, b = _acts(4, 0), _acts(3, 1)
    with ActivationWriter(path, 5, 3, 8, META) as w:
        w.append(["p0", "p1", "p2", "p3"], a, np.zeros((4, 3)), ["layout"] * 4)
    with ActivationWriter(path, 5, 3, 8, META) as w:
        assert w.done == {("layout", p) for p in ("p0", "p1", "p2", "p3")}
        w.append(["p4", "p5", "p6"], b, np.ones((3, 3)), ["layout"] * 3)
    with ActivationStore(path) as s:
        assert s.shape == (7, 5, 3, 8) and s.prompt_ids == [f"p{i}" for i in range(7)]
        assert np.array_equal(s.layer(2), np.concatenate([a, b])[:, 2])
        assert np.array_equal(s.layer(4, "last"), np.concatenate([a, b])[:, 4, 2])
        assert s.meta["model"] == "m" and s.meta["store_dtype"] == "float32"
        with pytest.raises(StoreError, match="out of range"):
            s.layer(5)


def test_rows_past_complete_are_trimmed(tmp_path):
    path = tmp_path / "a.h5"
    with ActivationWriter(path, 5, 3, 8, META) as w:
        w.append(["p0", "p1"], _acts(2, 0), np.zeros((2, 3)), ["layout"] * 2)
    with h5py.File(path, "a") as f:  # a batch a kill interrupted: data grown, `complete` not raised
        for name in ("resid", "prompt_ids", "token_positions"):
            f[name].resize(5, axis=0)
    with ActivationWriter(path, 5, 3, 8, META) as w:
        assert w.done == {("layout", "p0"), ("layout", "p1")}
    with ActivationStore(path) as s:
        assert s.shape[0] == 2


def test_other_settings_are_refused_and_float16_is_stored_small(tmp_path):
    path = tmp_path / "a.h5"
    with ActivationWriter(path, 5, 3, 8, META, dtype="float16") as w:
        w.append(["p0"], _acts(1, 0), np.zeros((1, 3)), ["layout"])
    with pytest.raises(StoreError, match="other settings"):
        ActivationWriter(path, 5, 3, 8, dict(META, model="other"), dtype="float16")
    with pytest.raises(StoreError, match="other settings"):
        ActivationWriter(path, 5, 3, 8, META, dtype="float32")
    with h5py.File(path) as f:
        assert f["resid"].dtype == np.float16 and f["resid"].chunks[1] == 1
    with ActivationStore(path) as s:
        assert s.layer(0).dtype == np.float32
    with pytest.raises(StoreError, match="no activation file"):
        ActivationStore(tmp_path / "none.h5")
