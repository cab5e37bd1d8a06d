"""What a study checks before its run directory records anything: the models' folders and the DINO folder.

A missing or truncated weights file was once found only after the run had recorded its settings; these
checks run first, so a corrected command can reuse the same --out.
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.study.config import StudyConfig


def check_models(models: tuple[str, ...]) -> None:
    """Every model resolves and its folder holds a readable config and weights: checked before the run
    directory records anything (a missing or truncated weights file was once found only after the run had
    recorded its settings)."""
    from interp.models import ModelError, resolve

    for m in models:
        kind, folder = resolve(m)
        if kind == "hub":  # a hub name is usable only when cached: said before a run directory is made (issue 31)
            _check_cached(m)
        if folder is None:
            continue
        try:
            json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            raise ModelError(f"{folder}/config.json is not readable JSON: the model folder is broken") from None
        weights = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".pth"))
        if not weights:
            raise ModelError(f"{folder} has a config but no weights (*.safetensors or *.bin): copy the weights into it")
        for p in weights:
            if p.suffix == ".safetensors":
                _check_safetensors(p)


def _check_cached(name: str) -> None:
    """A hub name that is a repository id and is in the local Hugging Face cache (nothing is downloaded at run time):
    `capture --model ../../etc --out NEW` once took it for a hub name, made NEW and its lock, and failed in the load."""
    from interp.models import ModelError

    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:  # pragma: no cover
        return
    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ModelError(f"--model {name!r} is neither a model folder, an embedded model, organism:NAME nor a hub name "
                         "(owner/name): give one of those") from None
    try:
        snapshot_download(name, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - any failure here means "not cached"
        raise ModelError(f"{name!r} is not in the local Hugging Face cache and nothing is downloaded at run time; download "
                         f"it first or pass a local folder ({type(e).__name__})") from None


def _check_safetensors(path: Path) -> None:
    """The file's header is readable and every tensor lies inside the file (catches a truncated copy)."""
    import struct

    from interp.models import ModelError

    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            if n > size - 8:
                raise ValueError
            header = json.loads(f.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    except (struct.error, ValueError, KeyError, TypeError, json.JSONDecodeError):
        raise ModelError(f"{path} is not a readable safetensors file (truncated or corrupt): copy it again") from None
    if 8 + n + end > size:
        raise ModelError(f"{path} is truncated ({size} bytes, its header needs {8 + n + end}): copy it again")


def check_dino(c: StudyConfig) -> None:
    """A DINO folder that cannot be loaded fails before hours of generation, not at the end of the run."""
    if c.dino_folder:
        from interp.dino import load_dino

        load_dino(c.dino_folder, "cpu")


__all__ = ["check_dino", "check_models"]
