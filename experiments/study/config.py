"""The settings of a study: `StudyConfig` (presets are data), its prompt sets, the order of its attempts.

`StudyConfig` holds every setting of `ambench run`, documented field by field; `from_preset` applies a
preset's differences (`experiments/data/presets.json`) and the command line's overrides, and each
stage's settings are built from it here (`generate`, `capture`, `intervene`, `patch`, `probe`, ...), so
one study has one record of what it ran (`config.json`). `prompt_sets` gives the prompts a study runs
on, `generation_order` the order of `generations.jsonl` every writer (the model phases, merge) keeps.
"""

from __future__ import annotations

import math

import json
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Callable


#: presets are data: each names only what differs from the defaults below (experiments/data/presets.json)
PRESETS: dict[str, dict[str, Any]] = {k: v for k, v in json.loads(
    resources.files("experiments").joinpath("data/presets.json").read_text(encoding="utf-8")).items() if not k.startswith("_")}


def check_settings(c: "StudyConfig") -> None:
    """The settings a study would otherwise find wrong only hours in, or ignore without a word: one sentence each."""
    import re
    from urllib.parse import urlparse

    from interp.prompts import PROTOCOLS

    if c.protocol not in PROTOCOLS:
        raise ValueError(f"--protocol {c.protocol!r}: use {', '.join(PROTOCOLS)}")
    if c.device is not None and not re.fullmatch(r"cpu|mps|cuda(:\d+)?", c.device):
        raise ValueError(f"--device {c.device!r}: use cpu, cuda or cuda:N (mps on a Mac)")
    if c.dtype is not None and c.dtype not in ("float32", "bfloat16", "float16", "fp32", "bf16", "fp16"):
        raise ValueError(f"--dtype {c.dtype!r}: use float32, bfloat16 or float16")
    if (c.judge_url is None) != (c.judge_model is None):  # judging once was skipped without a word with only one
        raise ValueError("--judge-url and --judge-model go together: give both to judge, or neither")
    if c.judge_url is not None:
        u = urlparse(c.judge_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError(f"--judge-url {c.judge_url!r}: give an http(s) URL of an OpenAI-compatible endpoint, "
                             "e.g. http://127.0.0.1:8000/v1")
    if not c.models:
        raise ValueError("--model: give at least one model")


@dataclass(frozen=True)
class StudyConfig:
    """Every setting of a study. The defaults are the quick study (the README's main job, minutes on a CPU);
    `from_preset` applies a preset's differences and the command line's overrides."""

    preset: str = "quick"  #: the preset these settings started from
    models: tuple[str, ...] = ("smollm2-135m-instruct",)  #: models to study, in order (names, folders, cached hub names)
    translation_prompts: int = 20  #: first N of the 145 sampled translation references
    layout_per_subcategory: int = 1  #: layout prompts per subcategory (15 subcategories; 10 = all 150)
    samples: int = 2  #: sampled layout attempts per prompt besides the greedy one (paper: 10)
    translation_samples: int = 2  #: sampled translation attempts per reference besides the greedy one (paper: 11)
    temperature: float = 0.7  #: sampling temperature of attempts and continuations
    max_new_tokens: int = 128  #: token budget of one attempt
    protocol: str = "few-shot"  #: prompt protocol (auto, zero-shot, few-shot, completion)
    shots: int = 2  #: worked examples of few-shot and completion protocols
    svg: bool = False  #: also run the SVG arm (Exp. 2)
    batch_size: int = 8  #: attempts per generation batch and prompts per capture batch
    min_attempts: int = 1  #: valid attempts a prompt needs for a probe target
    #: which attempts form a probe target's consensus: "all" valid ones (the paper) or "sampled" only (the greedy
    #: attempt left out: a negative control's target; experiments.stages.probe.TARGET_ATTEMPTS)
    target_attempts: str = "all"
    n_perm: int = 999  #: permutations of the headline Delta R^2 test (the paper preset: 2,500)
    n_perm_layers: int = 49  #: permutations per per-layer probe row
    n_perm_beyond: int | None = None  #: permutations of the beyond-text test (None: n_perm)
    n_boot: int = 2000  #: resamples of the bootstrap CIs (selectivity, attention, layout; probes need none)
    continuations: int = 3  #: continuations per intervention arm and cut (paper: 9)
    intervene_cuts: int = 6  #: intervention cuts per model (0 = every cut)
    intervene_tokens: int = 64  #: tokens per continuation (interventions and patching)
    patch_layer_step: int = 6  #: patch every k-th layer (1 = every layer)
    patch_cuts: int = 2  #: patching cuts per model (0 = every cut)
    patch_continuations: int = 2  #: continuations per patched cut, layer and direction
    seed: int = 0  #: the run seed: every random draw derives from it
    device: str | None = None  #: cpu, cuda, cuda:1 ... (default: cuda when present)
    dtype: str | None = None  #: float32, bfloat16, float16 (default: bf16 on a GPU, fp32 on a CPU)
    trust_remote_code: bool = False  #: run model folders' own modeling code (only code you trust)
    device_map: str | None = None  #: "auto" spreads a model's blocks over every visible GPU
    quantize: str | None = None  #: "8bit" or "4bit" weights through bitsandbytes (GPU)
    judge_url: str | None = None  #: an OpenAI-compatible VLM endpoint; judging runs when given
    judge_model: str | None = None  #: the model name that endpoint serves
    judge_name: str | None = None  #: a name for the judge (default: the model name)
    # --- issue 16 (the three analyses added after the paper's tables) ---
    #: extra canvas media for the layout task (`v1-48`, `outline`): one more layout arm each, rendered at its
    #: own resolution, with its own layout tables, judges and the T2/T3 gap contrast against v1; capture,
    #: probes and interventions stay on the paper's canvas
    media: tuple[str, ...] = ()
    #: the cross-model selectivity table and the own-minus-others gap's CI (needs two models' activations)
    selectivity: bool = False
    #: the attention focus of drawing statements on the prompt's spatial words, per valid layout attempt
    attention: bool = False
    trajectory: bool = False  #: probe the drawn and the final canvas at every statement boundary (plan or state)
    #: readable or used (issue 41): interchange and erasure at the layout probe's best site, measured on the drawing;
    #: "readable" runs them where the probe decodes the layout, "always" everywhere, "off" never
    causal: str = "readable"
    causal_prompts: int = 64  #: prompts the causal test draws (a seeded subset when there are more)
    #: steering along the layout probe's direction at its best site (`last`), on the first N layout prompts with a
    #: target, greedy, at each strength (0 = no steering phase; `ambench steer` steers any layer and region)
    steer_prompts: int = 0
    steer_strengths: tuple[float, ...] = (0.0, 0.5)  #: multiples of the layer's mean residual norm
    dino_folder: str | None = None  #: a local DINO ViT folder; the concept-consistency stage runs when given
    prompt_files: tuple[str, ...] = ()  #: prompt-set files (`interp.prompts.load_prompts` JSONL, each line with its task
    #: label); when given they replace the built-in prompt sets and the study runs on exactly their items (relative
    #: paths are read from the working directory, else from the repository root)
    references: str | None = None  #: translation references (`bench.translation.references` JSONL) scoring the
    #: translation attempts, one per translation prompt id (default: the benchmark's own)

    def __post_init__(self) -> None:
        from bench.canvas.medium import get_medium

        object.__setattr__(self, "media", tuple(self.media))  # a list from JSON (config.json, Ray) becomes a tuple
        object.__setattr__(self, "steer_strengths", tuple(self.steer_strengths))
        if self.steer_prompts < 0 or not self.steer_strengths or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in self.steer_strengths):
            raise ValueError("steer_prompts must be >= 0 and steer_strengths finite numbers (at least one)")
        for m in self.media:
            if m in ("v1", "svg"):
                raise ValueError(f"--medium {m}: the paper's canvas always runs and SVG is --svg; give another medium")
            get_medium(m)  # an unknown name is one sentence (ValueError)
        if len(set(self.media)) != len(self.media):
            raise ValueError("a medium is given twice")
        if self.causal not in ("readable", "always", "off"):
            raise ValueError(f"causal {self.causal!r}: readable, always or off")
        if self.target_attempts not in ("all", "sampled"):
            raise ValueError(f"target_attempts {self.target_attempts!r}: all or sampled")
        check_settings(self)


    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> "StudyConfig":
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")
        if "parts" in PRESETS[preset]:
            raise ValueError(f"preset {preset!r} runs one study per part ({', '.join(PRESETS[preset]['parts'])}): "
                             "run it with `ambench run --preset` (experiments.organisms.run_parts)")
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {**{k: v for k, v in PRESETS[preset].items() if not k.startswith("_")}, "preset": preset}
        values.update({k: v for k, v in overrides.items() if v is not None})
        bad = sorted(set(values) - names)
        if bad:
            raise ValueError(f"unknown setting(s) {', '.join(bad)}")
        for k in ("models", "prompt_files"):
            if k in values:
                values[k] = tuple(values[k])
        return cls(**values)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "StudyConfig":
        """The config `as_dict` wrote (config.json), with its tuples back."""
        return cls(**{**d, "models": tuple(d["models"]), "prompt_files": tuple(d.get("prompt_files", ()))})

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["models"] = list(self.models)
        d["media"] = list(self.media)
        d["prompt_files"] = list(self.prompt_files)
        d["steer_strengths"] = list(self.steer_strengths)
        return d

    # ------------------------------------------------------------------ the stages' settings

    def generate(self, task: str, output: str = "canvas", medium: str = "v1") -> Any:
        from experiments.stages.generate import GenerateSettings

        samples = self.translation_samples if task == "translation" else self.samples
        return GenerateSettings(samples, self.temperature, self.seed, self.max_new_tokens, self.batch_size, self.protocol,
                                self.shots, output, medium)

    def capture(self) -> Any:
        from experiments.stages.capture import CaptureSettings

        return CaptureSettings(self.protocol, self.shots, "float32", self.batch_size)

    def intervene(self) -> Any:
        from experiments.stages.intervene import InterveneSettings

        return InterveneSettings(task="layout", continuations=self.continuations, temperature=self.temperature,
                                 max_new_tokens=self.intervene_tokens, seed=self.seed, limit=self.intervene_cuts or None)

    def patch(self, n_layers: int) -> Any:
        from experiments.stages.patch import PatchSettings

        return PatchSettings(task="layout", layers=tuple(range(0, n_layers, max(1, self.patch_layer_step))),
                             continuations=self.patch_continuations, temperature=self.temperature,
                             max_new_tokens=self.intervene_tokens, seed=self.seed, limit=self.patch_cuts or None)

    def probe(self) -> Any:
        from experiments.stages.probe import ProbeSettings

        return ProbeSettings(min_attempts=self.min_attempts, n_perm=self.n_perm, n_perm_layers=self.n_perm_layers,
                             n_boot=self.n_boot, seed=self.seed, target_attempts=self.target_attempts,
                             n_perm_beyond=self.n_perm_beyond)

    def selectivity_settings(self) -> Any:
        """The selectivity stage's settings: the probe stage's targets, grid and seed (issue 16)."""
        from experiments.stages.selectivity import SelectivitySettings

        p = self.probe()
        return SelectivitySettings(min_attempts=p.min_attempts, exclude_trivial=p.exclude_trivial, n_boot=p.n_boot, seed=p.seed,
                                   pca=p.pca, alphas=p.alphas, outer=p.outer, inner=p.inner,
                                   target_attempts=p.target_attempts)

    def load_runtime(self, model: str) -> Any:
        """`model` loaded as this study loads it (device, dtype, remote code, placement, quantisation)."""
        from interp.runtime import Runtime

        return Runtime.load(model, device=self.device, dtype=self.dtype, trust_remote_code=self.trust_remote_code,
                            device_map=self.device_map, quantize=self.quantize)

    def causal_settings(self) -> Any:
        """The causal stage's settings (issue 41): drawings made as the probe's targets were (sampled at the study's
        temperature when the targets are sampled attempts only, else greedy), with the attempts' token budget."""
        from experiments.stages.causal import CausalSettings

        return CausalSettings(max_prompts=self.causal_prompts, when="always" if self.causal == "always" else "readable",
                              temperature=self.temperature if self.target_attempts == "sampled" else 0.0,
                              max_new_tokens=self.max_new_tokens, seed=self.seed)

    def steer_settings(self, layer: int) -> Any:
        """The study's steering phase (issue 40): the layout probe's direction for the left half at `layer` (the
        best site's), greedy attempts of the first `steer_prompts` prompts at each strength."""
        from experiments.stages.steer import SteerSettings

        return SteerSettings(layer=layer, strengths=self.steer_strengths, samples=1, temperature=self.temperature,
                             max_new_tokens=self.max_new_tokens, seed=self.seed, limit=self.steer_prompts)

    def attention_settings(self) -> Any:
        """The attention-focus stage's settings (issue 16): every valid layout attempt, every block."""
        from experiments.stages.attention import AttentionSettings

        return AttentionSettings(task="layout", n_boot=self.n_boot, seed=self.seed)

    def arms(self) -> list[tuple[str, str, str]]:
        """(task, output, medium) of every generation arm, in the order they run."""
        return ([("translation", "canvas", "v1"), ("layout", "canvas", "v1")] + ([("layout", "svg", "v1")] if self.svg else [])
                + [("layout", "canvas", m) for m in self.media])  # issue 16: extra canvas media

    def arm_record(self) -> list[dict[str, Any]]:
        """Every arm as recorded in config.json (task and the generate stage's settings): what `ambench generate`
        checks before it adds attempts to a study's directory (a study uses exactly its arms)."""
        return [{"task": t, "settings": self.generate(t, o, m).as_dict()} for t, o, m in self.arms()]

    def protocol_labels(self) -> set[str]:
        """The protocol labels this study's attempts can carry (`auto` resolves to one of two, per model)."""
        from interp.prompts import PromptError, Protocol

        out = set()
        for chat in (True, False):
            try:
                out.add(Protocol(self.protocol, self.shots).resolve(chat).label)
            except PromptError:
                pass
        return out

    def names_attempt(self, row: dict[str, Any]) -> bool:
        """Whether a generations row is of one of this study's arms (model, task, medium and protocol)."""
        media = {(t, "svg" if o == "svg" else m) for t, o, m in self.arms()}
        return (row["model"] in self.models and (row["task"], row.get("medium", "v1")) in media
                and row["protocol"] in self.protocol_labels())


REPO = Path(__file__).resolve().parents[2]


def short_name(model: str) -> str:
    """A model's label in stage timings: its folder's last part, without the organisms' prefix."""
    return model.rstrip("/").split("/")[-1].removeprefix("organism:")


def data_path(name: str) -> Path:
    """A file named by a setting: as given when it exists (absolute, or relative to the working directory),
    else relative to the repository root (presets name the organisms' committed prompt files that way)."""
    p = Path(name).expanduser()
    if p.exists() or p.is_absolute():
        return p
    return REPO / p if (REPO / p).exists() else p


def prompt_sets(c: StudyConfig) -> dict[str, list[Any]]:
    from bench.layout.prompts import load_layout_prompts
    from bench.translation.references import load_references
    from interp.prompts import PromptError, PromptItem, load_prompts, translation_items

    if c.prompt_files:
        sets: dict[str, list[Any]] = {"translation": [], "layout": []}
        seen: set[tuple[str, str]] = set()
        for f in c.prompt_files:
            for it in load_prompts(data_path(f)):
                if it.task not in sets:
                    raise PromptError(f"{f}: prompt {it.id!r} has task {it.task!r}; the study runs translation and layout prompts")
                if (it.task, it.id) in seen:
                    raise PromptError(f"{f}: prompt id {it.id!r} ({it.task}) appears twice among the prompt files")
                seen.add((it.task, it.id))
                sets[it.task].append(it)
        return sets
    tr = translation_items([r.id for r in load_references("sampled")])[: c.translation_prompts]
    lay = []
    counts: dict[str, int] = {}
    for p in load_layout_prompts():
        if counts.get(p.subcategory, 0) < c.layout_per_subcategory:
            counts[p.subcategory] = counts.get(p.subcategory, 0) + 1
            lay.append(PromptItem(p.id, "layout", p.text, p.subject, p.subcategory))
    return {"translation": tr, "layout": lay}


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("ambench", "torch", "transformers", "transformer-lens", "numpy", "scikit-learn", "h5py"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def load_reference_file(path: Path) -> list[Any]:
    """Translation references from a JSONL file (one `Reference.to_json()` object a line); one sentence on bad input."""
    from bench.translation.references import Reference
    from experiments.stages.translation import InputError

    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the references file {path}: {e}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(Reference.from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"{path}:{n}: not a translation reference ({e})") from None
    return out


def generation_order(c: StudyConfig, sets: dict[str, list[Any]]) -> Callable[[dict[str, Any]], tuple]:
    """The order of generations.jsonl in a study: model, then arm in the order `c.arms()` runs them
    (translation, layout, the SVG arm, then the extra canvas media), then prompt, then sample. An
    uninterrupted run writes it; merges and runs whose directory held attempts before (a model stand-in's,
    a resumed shard's) are put in it, so that every derived file has one order. An arm the study does not
    run comes after its arms (canvas before SVG, translation before layout)."""
    order_m = {m: i for i, m in enumerate(c.models)}
    arm_rank = {(t, "svg" if o == "svg" else med): i for i, (t, o, med) in enumerate(c.arms())}
    prompt_index = {("translation", it.id): i for i, it in enumerate(sets["translation"])}
    prompt_index.update({("layout", it.id): i for i, it in enumerate(sets["layout"])})

    def key(r: dict[str, Any]) -> tuple:
        medium = r.get("medium", "v1")
        arm = arm_rank.get((r["task"], medium))
        rank = (0, arm, "") if arm is not None else (1, 2 * (medium == "svg") + (r["task"] != "translation"), medium)
        return (order_m.get(r["model"], 99), rank, prompt_index.get((r["task"], r["prompt_id"]), 10**6), r["sample"])

    return key


def expected_attempts(c: StudyConfig, sets: dict[str, list[Any]]) -> int:
    return sum(len(sets[task]) * (c.generate(task, out, med).samples + 1) for task, out, med in c.arms())


__all__ = ["PRESETS", "REPO", "StudyConfig", "data_path", "expected_attempts", "generation_order", "load_reference_file",
           "prompt_sets", "versions"]
