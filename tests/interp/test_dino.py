"""interp/dino.py: local-folder loading with one-sentence errors, the cell = patch preprocessing, embeddings."""

import json
import shutil

import numpy as np
import pytest

from interp.dino import DinoError, load_dino, model_input
from tests.interp.tiny_dino import build_tiny_dino


@pytest.fixture(scope="module")
def dino_folder(tmp_path_factory):
    return build_tiny_dino(tmp_path_factory.mktemp("dino") / "dinov2")


@pytest.fixture(scope="module")
def dino(dino_folder):
    return load_dino(dino_folder)


def _renders(seed=0, n=24, k=2):
    return np.random.default_rng(seed).integers(0, 256, (k, n, n, 3), dtype=np.uint8)


def test_one_cell_changes_exactly_its_patch_pixels():
    """Cell (r, c) of the canvas is the p x p block at (r*p, c*p) of the input, and nothing else moves."""
    px = _renders(1, k=1)
    for patch in (2, 8):
        for r, c in [(0, 0), (5, 17), (23, 23)]:
            other = px.copy()
            other[0, r, c] = 255 - other[0, r, c]  # every channel changes
            a = model_input(px, patch, (0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
            b = model_input(other, patch, (0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
            assert a.shape == (1, 3, 24 * patch, 24 * patch)
            changed = (a != b).any(dim=1)[0].numpy()
            expect = np.zeros_like(changed)
            expect[r * patch:(r + 1) * patch, c * patch:(c + 1) * patch] = True
            assert (changed == expect).all()


def test_normalisation_uses_the_given_mean_and_std():
    px = np.zeros((1, 2, 2, 3), np.uint8)
    px[0, 0, 0] = (255, 0, 51)
    x = model_input(px, 1, (0.5, 0.5, 0.5), (0.5, 0.25, 0.2))
    assert x[0, :, 0, 0].tolist() == pytest.approx([1.0, -2.0, (0.2 - 0.5) / 0.2])


def test_one_cell_changes_exactly_its_patch_key(dino):
    """End to end through the model: with one block the last keys are per token, so a one-cell change
    must move the key of patch r*24 + c and no other (checks the row-major token -> cell order)."""
    px = _renders(2, k=1)
    r, c = 7, 19
    other = px.copy()
    other[0, r, c] = 255 - other[0, r, c]
    cls_a, keys_a = dino.embed(np.concatenate([px, other]))
    diff = np.abs(keys_a[0] - keys_a[1]).max(axis=1)
    assert keys_a.shape == (2, 576, dino.info.key_size)
    assert np.flatnonzero(diff > 1e-6).tolist() == [r * 24 + c]
    assert not np.allclose(cls_a[0], cls_a[1])


def test_embed_is_batch_independent_and_deterministic(dino):
    px = _renders(3, k=5)
    c1, k1 = dino.embed(px, batch_size=2)
    c2, k2 = dino.embed(px, batch_size=5)
    assert c1.shape == (5, dino.info.hidden_size)
    np.testing.assert_allclose(c1, c2, atol=1e-5)
    np.testing.assert_allclose(k1, k2, atol=1e-5)


@pytest.mark.parametrize("kind", ["vit", "dinov2_with_registers"])
def test_other_dino_checkpoints_load_and_embed(tmp_path, kind):
    d = load_dino(build_tiny_dino(tmp_path / kind, kind=kind))
    assert d.info.model_type == kind and d.info.patch_size == 2
    px = _renders(4, k=1)
    other = px.copy()
    other[0, 3, 4] = 255 - other[0, 3, 4]
    _, keys = d.embed(np.concatenate([px, other]))
    # registers (4 tokens after CLS) must not shift the patch order
    assert np.flatnonzero(np.abs(keys[0] - keys[1]).max(axis=1) > 1e-6).tolist() == [3 * 24 + 4]


def test_folder_without_processor_uses_imagenet_statistics(tmp_path):
    d = load_dino(build_tiny_dino(tmp_path / "bare", processor=False))
    assert d.info.normalisation == "imagenet-default"
    assert d.info.mean == (0.485, 0.456, 0.406)


def _one_sentence(e: DinoError) -> str:
    msg = str(e)
    assert "\n" not in msg and "Traceback" not in msg and len(msg) < 400
    return msg


def test_missing_or_wrong_folders_are_one_sentence(tmp_path, dino_folder):
    from tests.interp.tiny import build_tiny

    cases = {}
    cases["missing"] = tmp_path / "nope"
    (tmp_path / "file").write_text("x")
    cases["file"] = tmp_path / "file"
    (tmp_path / "empty").mkdir()
    cases["empty"] = tmp_path / "empty"
    bad_json = tmp_path / "badjson"
    bad_json.mkdir()
    (bad_json / "config.json").write_text("{not json")
    cases["bad json"] = bad_json
    cases["language model"] = build_tiny(tmp_path / "llama")
    no_weights = tmp_path / "noweights"
    shutil.copytree(dino_folder, no_weights)
    (no_weights / "model.safetensors").unlink()
    cases["no weights"] = no_weights
    broken = tmp_path / "broken"
    shutil.copytree(dino_folder, broken)
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) // 3])
    cases["truncated weights"] = broken
    other = tmp_path / "other"
    shutil.copytree(dino_folder, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["hidden_size"], cfg["intermediate_size"] = 48, 96
    (other / "config.json").write_text(json.dumps(cfg))
    cases["weights of another shape"] = other
    foreign = tmp_path / "foreign"  # a dinov2 config over a ViT's weights: every tensor name differs
    shutil.copytree(dino_folder, foreign)
    vit = build_tiny_dino(tmp_path / "vit", kind="vit")
    shutil.copy(vit / "model.safetensors", foreign / "model.safetensors")
    cases["weights of another model"] = foreign
    expect = {"missing": "does not exist", "file": "is a file", "empty": "no config.json", "bad json": "not valid JSON",
              "language model": "not a DINO vision transformer", "no weights": "cannot load the DINO weights",
              "truncated weights": "cannot load the DINO weights",
              "weights of another shape": "do not match its config", "weights of another model": "do not match its config"}
    for name, folder in cases.items():
        with pytest.raises(DinoError) as err:
            load_dino(folder)
        msg = _one_sentence(err.value)
        assert expect[name] in msg, (name, msg)
        assert "--dino-folder" in msg, (name, msg)
