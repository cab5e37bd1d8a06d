"""What a study checks before its run directory records anything: the models' folders and the DINO folder.

A missing or truncated weights file was once found only after the run had recorded its settings; these
checks run first, so a corrected command can reuse the same --out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


def check_prompts(c: Any, sets: dict[str, list[Any]]) -> None:
    """Before any model is loaded or the run directory is made (issue 42): every translation prompt has a reference
    to score it, and every prompt, as each model will see it (its protocol, its chat template), fits that model's
    context. A model whose folder is not built yet (an embedded GGUF before its first use) is checked by the runtime
    instead, after loading and before its first forward."""
    from interp.prompts import PromptError

    if sets.get("translation") and (c.prompt_files or c.references):
        from experiments.study.config import data_path

        if c.references:
            from experiments.study.config import load_reference_file

            ids = {r.id for r in load_reference_file(data_path(c.references))}
        else:
            from bench.translation.references import load_references

            ids = {r.id for r in load_references("all")}
        unknown = [it.id for it in sets["translation"] if it.id not in ids]
        if unknown:
            raise PromptError(f"translation prompt {unknown[0]!r}{f' and {len(unknown) - 1} more' if len(unknown) > 1 else ''} "
                              f"names no reference in {c.references or 'the benchmark references'}: a translation prompt's "
                              "id is the id of the reference that scores it (--references FILE gives your own)")
    for m in c.models:
        check_lengths(m, [(c.generate(task, output, medium).prompt_protocol(), sets[task]) for task, output, medium in c.arms()],
                      c.trust_remote_code)


def check_lengths(model: str, work: list[tuple[Any, list[Any]]], trust_remote_code: bool = False) -> None:
    """Every prompt of `work` ((protocol, items) pairs), built as `model` will see it, fits its context (one
    sentence naming the prompt, its length and the limit), read from the model's folder without loading the
    model; nothing is checked when the folder is not built yet (the runtime checks it before its first forward)."""
    from interp.models import existing_folder
    from interp.prompts import PromptError, build

    folder = existing_folder(model)
    if folder is None or not (folder / "config.json").is_file():
        return
    ctx = _context(folder)
    if ctx is None:
        return
    from interp.runtime.load import tokenizer_for_check

    try:  # the same instance serves the model's load next (`tokenizer_for_check`)
        tok = tokenizer_for_check(folder, trust_remote_code)
    except Exception:  # noqa: BLE001 - a tokenizer that cannot load here fails at Runtime.load with its own sentence
        return
    chat = bool(getattr(tok, "chat_template", None))
    for protocol, items in work:
        for it in items:
            n = len(build(it, protocol, tok, chat=chat).tokens)
            if n + 1 > ctx:
                raise PromptError(f"prompt {it.id!r} ({it.task}) is {n:,} tokens as {model} sees it "
                                  f"({protocol.resolve(chat).label}); {model}'s context is {ctx:,} tokens: shorten it or "
                                  "use fewer shots")


def _context(folder: Path) -> int | None:
    from interp.runtime.forward import context_of

    try:
        return context_of(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def other_release(config: dict[str, Any]) -> str | None:
    """Why a run's settings record says it was made by another release of ambench (its `ambench` version, or a study
    settings record this release would not write: fields added or gone), or None (the same release, or no study).
    Issue 42: `probe --run` on a study of the previous release rewrote probes.jsonl with today's numbers while its
    report kept the old ones, and `run` on it was refused: now every command refuses such a study, in these words."""
    rec = (config.get("stages") or {}).get("study") if isinstance(config, dict) else None
    if not isinstance(rec, dict):
        return None
    from experiments.study.config import versions

    made = (rec.get("versions") or {}).get("ambench")
    if made is None:
        return None  # `ambench run` always records its versions: a record without them was written by hand
    now = versions().get("ambench")
    if made != now:
        return f"ambench {made} made it (this is ambench {now})"
    recorded = rec.get("config")
    try:
        again = StudyConfig.from_dict(recorded).as_dict()
    except Exception:  # noqa: BLE001 - a record this release cannot read at all: another release's
        return "its study settings are ones this release cannot read"
    if json.loads(json.dumps(again)) != recorded:
        fields = sorted(set(again) ^ set(recorded or {})) or sorted(k for k in again if again[k] != recorded.get(k))
        return f"its study settings differ from what this release records ({', '.join(fields[:4])})"
    return None


def refuse_other_release(path: Path, config: dict[str, Any]) -> None:
    """One sentence (RunError) when the run at `path` was made by another release: no command of this release adds to
    it or rewrites part of it (`ambench report` only reads a study's files as they are, and rewrites none of them)."""
    from experiments.rundir import RunError

    why = other_release(config)
    if why:
        raise RunError(f"{path} is a study of another release: {why}. This release neither adds to it nor rewrites "
                       f"part of it: rerun the study with this release into another folder (`ambench run ... --out NEW`), "
                       "or read it with the release that made it")
