"""The activation and render stores: parts written whole, resume, per-layer reads, metadata checks, and
corruption or truncation that is detected (never used) and repaired from the intact parts."""

import os

import numpy as np
import pytest

from activations.base import StoreError
from activations.renders import RenderStore
from activations.store import ActivationStore, ActivationWriter, merge_stores

META = {"model": {"name": "m"}, "positions": ["subject", "turn", "last"], "protocol": "zero-shot"}


def _acts(n, seed):
    return np.random.default_rng(seed).normal(size=(n, 5, 3, 8)).astype(np.float32)


def test_append_read_and_resume(tmp_path):
    path = tmp_path / "m"
    a, b = _acts(4, 0), _acts(3, 1)
    with ActivationWriter(path, 5, 3, 8, META) as w:
        w.append(["p0", "p1", "p2", "p3"], a, np.zeros((4, 3)), ["layout"] * 4, ["h0", "h1", "h2", "h3"])
    with ActivationWriter(path, 5, 3, 8, META) as w:
        assert w.done == {("layout", "p0"): "h0", ("layout", "p1"): "h1", ("layout", "p2"): "h2", ("layout", "p3"): "h3"}
        w.append(["p4", "p5", "p6"], b, np.ones((3, 3)), ["translation"] * 3)
    st = ActivationStore(path)
    assert st.shape == (7, 5, 3, 8) and st.prompt_ids == [f"p{i}" for i in range(7)]
    assert st.rows_of("translation") == {"p4": 4, "p5": 5, "p6": 6}
    np.testing.assert_array_equal(st.layer(2), np.concatenate([a, b])[:, 2])
    np.testing.assert_array_equal(st.layer(-1, "last"), np.concatenate([a, b])[:, 4, 2])
    with pytest.raises(StoreError, match="out of range"):
        st.layer(5)


def test_a_recaptured_prompt_supersedes_its_old_row(tmp_path):
    path = tmp_path / "m"
    with ActivationWriter(path, 5, 3, 8, META) as w:
        w.append(["p0", "p1"], _acts(2, 0), np.zeros((2, 3)), ["layout"] * 2, ["old", "old"])
        w.append(["p1"], _acts(1, 5), np.zeros((1, 3)), ["layout"], ["new"])
    st = ActivationStore(path)
    assert st.prompt_ids == ["p0", "p1"] and st.inputs == ["old", "new"]
    np.testing.assert_array_equal(st.layer(0)[1], _acts(1, 5)[0, 0])


def test_other_settings_are_refused(tmp_path):
    path = tmp_path / "m"
    with ActivationWriter(path, 5, 3, 8, META) as w:
        w.append(["p0"], _acts(1, 0), np.zeros((1, 3)), ["layout"])
    with pytest.raises(StoreError, match="other settings"):
        ActivationWriter(path, 5, 3, 8, {**META, "protocol": "few-shot-2"})
    with pytest.raises(StoreError, match="other settings"):
        ActivationWriter(path, 5, 3, 8, META, dtype="float16")


def test_flipped_bytes_in_activations_are_reported_with_the_file_and_row(tmp_path):
    """4 kB of random bytes written into stored activations once went unnoticed."""
    path = tmp_path / "m"
    with ActivationWriter(path, 5, 3, 8, META) as w:
        w.append([f"p{i}" for i in range(40)], _acts(40, 0), np.zeros((40, 3)), ["layout"] * 40)
    part = sorted(path.glob("part-*.h5"))[0]
    data = bytearray(part.read_bytes())
    resid_at = _find(data, _acts(40, 0)[3, 2].tobytes()[:32])
    data[resid_at: resid_at + 16] = os.urandom(16)
    part.write_bytes(bytes(data))
    st = ActivationStore(path)
    with pytest.raises(StoreError, match=r"row 3.*fail their checksum"):
        st.layer(2)
    assert st.layer(1).shape == (40, 3, 8)  # other layers are intact and readable
    with ActivationWriter(path, 5, 3, 8, META, say=lambda m: None) as w:  # the writer repairs: the bad part goes aside
        assert w.done == {}
    assert list(path.glob("part-*.h5.corrupt"))


def _find(data: bytearray, needle: bytes) -> int:
    at = bytes(data).find(needle)
    assert at >= 0
    return at


def test_a_truncated_part_costs_only_its_rows(tmp_path):
    """A truncated HDF5 file cannot be opened at all; with parts, the others survive and the writer repairs."""
    path = tmp_path / "m"
    with ActivationWriter(path, 5, 3, 8, META) as w:
        w.append(["p0", "p1"], _acts(2, 0), np.zeros((2, 3)), ["layout"] * 2)
        w.append(["p2", "p3"], _acts(2, 1), np.zeros((2, 3)), ["layout"] * 2)
    last = sorted(path.glob("part-*.h5"))[-1]
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    with pytest.raises(StoreError, match="truncated or corrupt"):
        ActivationStore(path)
    said = []
    with ActivationWriter(path, 5, 3, 8, META, say=said.append) as w:
        assert set(w.done) == {("layout", "p0"), ("layout", "p1")}
    assert said and "moved aside" in said[0]
    assert ActivationStore(path).prompt_ids == ["p0", "p1"]


def test_merge_copies_whole_parts_in_canonical_order(tmp_path):
    a, b = tmp_path / "s0", tmp_path / "s1"
    with ActivationWriter(a, 5, 3, 8, META) as w:
        w.append(["p0", "p1"], _acts(2, 0), np.zeros((2, 3)), ["layout"] * 2)
        w.append(["p4"], _acts(1, 2), np.zeros((1, 3)), ["layout"])
    with ActivationWriter(b, 5, 3, 8, META) as w:
        w.append(["p2", "p3"], _acts(2, 1), np.zeros((2, 3)), ["layout"] * 2)
    order = {f"p{i}": i for i in range(5)}
    n = merge_stores([a, b], tmp_path / "m", lambda t, p: order[p])
    st = ActivationStore(tmp_path / "m")
    assert n == 5 and st.prompt_ids == ["p0", "p1", "p2", "p3", "p4"]
    np.testing.assert_array_equal(st.layer(3)[2:4], _acts(2, 1)[:, 3])


def test_render_store_round_trip_and_corruption(tmp_path):
    store = RenderStore(tmp_path / "renders", 24, {"medium": "v1"})
    px = np.random.default_rng(0).integers(0, 255, (3, 24, 24, 3)).astype(np.uint8)
    store.append({"key": ["a", "b", "c"], "input": ["1", "2", "3"], "outcome": ["ok", "ok", "syntax"],
                  "reason": ["", "", "line 1: \ufffd"], "pixels": px, "dominant_share": [0.5, 0.2, 0.0],
                  "trivial": [False, False, False], "background": np.zeros((3, 3), np.uint8)})
    got = store.read()
    assert list(got) == ["a", "b", "c"] and got["c"]["reason"] == "line 1: \ufffd"
    np.testing.assert_array_equal(got["b"]["pixels"], px[1])
    part = sorted((tmp_path / "renders").glob("part-*.h5"))[0]
    data = bytearray(part.read_bytes())
    at = _find(data, px[1].tobytes()[:64])
    data[at: at + 8] = bytes(8)
    part.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="fails its checksum"):
        store.read()
    assert store.repair() == [part] and store.read() == {}
