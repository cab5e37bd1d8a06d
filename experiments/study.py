"""`ambench run`: the whole study on one or more models as one resumable command.

The study holds its run directory's lock for the whole command (`experiments.rundir.RunDir.writer`)
and runs, into it:
1. per model, the first model phase: generate translation and layout attempts (and the SVG arm in
   the paper preset), capture the residual stream for the same prompts and protocol;
2. per model, the second model phase, once every attempt exists: interventions (four arms) and
   activation patching on layout cuts;
3. renders, translation scores, layout tables, probes, intervention tables, judges (when configured),
   the Exp. 2 media table, the HTML report.
Every stage resumes (see each stage's module); a killed run rerun with the same command continues, and
its result files come out identical to an uninterrupted run's. `config.json` records the preset, every
setting, the models and the package versions; a run directory refuses a second command with other
settings, and a second command on it while one runs.

Past one machine, every model-running stage is a list of keyed work units (generation batches, capture
batches, intervention cuts, (cut, layer) patching units): `--shard i/n` runs the units whose index is
i mod n. The first phase needs nothing else; the second needs every attempt, so it runs in a shard
whose directory already holds them (a copy of the merged first phase). `merge_runs` (`ambench merge`)
puts the shards' rows back in the order of an unsharded run, after which `ambench run` on the merged
directory finishes the remaining stages. `run_ray` does all of it as Ray tasks.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from experiments.rundir import AttemptKey, RunDir, RunError, read_rows, writing

#: presets are data: each names only what differs from the defaults below (experiments/data/presets.json)
PRESETS: dict[str, dict[str, Any]] = {k: v for k, v in json.loads(
    resources.files("experiments").joinpath("data/presets.json").read_text(encoding="utf-8")).items() if not k.startswith("_")}


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
    n_perm: int = 999  #: permutations of the headline Delta R^2 test (the paper preset: 2,500)
    n_perm_layers: int = 49  #: permutations per per-layer probe row
    n_boot: int = 2000  #: prompt-bootstrap resamples of every CI
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
    dino_folder: str | None = None  #: a local DINO ViT folder; the concept-consistency stage runs when given

    def __post_init__(self) -> None:
        from bench.canvas.medium import get_medium

        object.__setattr__(self, "media", tuple(self.media))  # a list from JSON (config.json, Ray) becomes a tuple
        for m in self.media:
            if m in ("v1", "svg"):
                raise ValueError(f"--medium {m}: the paper's canvas always runs and SVG is --svg; give another medium")
            get_medium(m)  # an unknown name is one sentence (ValueError)
        if len(set(self.media)) != len(self.media):
            raise ValueError("a medium is given twice")

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> "StudyConfig":
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")
        names = {f.name for f in fields(cls)}
        values: dict[str, Any] = {**PRESETS[preset], "preset": preset}
        values.update({k: v for k, v in overrides.items() if v is not None})
        bad = sorted(set(values) - names)
        if bad:
            raise ValueError(f"unknown setting(s) {', '.join(bad)}")
        if "models" in values:
            values["models"] = tuple(values["models"])
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["models"] = list(self.models)
        d["media"] = list(self.media)
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
                             n_boot=self.n_boot, seed=self.seed)

    def selectivity_settings(self) -> Any:
        """The selectivity stage's settings: the probe stage's targets, grid and seed (issue 16)."""
        from experiments.stages.selectivity import SelectivitySettings

        p = self.probe()
        return SelectivitySettings(min_attempts=p.min_attempts, exclude_trivial=p.exclude_trivial, n_boot=p.n_boot, seed=p.seed,
                                   pca=p.pca, alphas=p.alphas, outer=p.outer, inner=p.inner)

    def attention_settings(self) -> Any:
        """The attention-focus stage's settings (issue 16): every valid layout attempt, every block."""
        from experiments.stages.attention import AttentionSettings

        return AttentionSettings(task="layout", n_boot=self.n_boot, seed=self.seed)

    def arms(self) -> list[tuple[str, str, str]]:
        """(task, output, medium) of every generation arm, in the order they run."""
        return ([("translation", "canvas", "v1"), ("layout", "canvas", "v1")] + ([("layout", "svg", "v1")] if self.svg else [])
                + [("layout", "canvas", m) for m in self.media])  # issue 16: extra canvas media


def prompt_sets(c: StudyConfig) -> dict[str, list[Any]]:
    from bench.layout.prompts import load_layout_prompts
    from bench.translation.references import load_references
    from interp.prompts import PromptItem, translation_items

    tr = translation_items([r.id for r in load_references("sampled")])[: c.translation_prompts]
    lay = []
    counts: dict[str, int] = {}
    for p in load_layout_prompts():
        if counts.get(p.subcategory, 0) < c.layout_per_subcategory:
            counts[p.subcategory] = counts.get(p.subcategory, 0) + 1
            lay.append(PromptItem(p.id, "layout", p.text, p.subject))
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


def _bar(total: int | None, desc: str, unit: str) -> Any:
    """A progress bar on stderr (shown on a terminal, silent in logs and tests)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False)


def check_models(models: tuple[str, ...]) -> None:
    """Every model resolves and its folder holds a readable config and weights: checked before the run
    directory records anything (a missing or truncated weights file was once found only after the run had
    recorded its settings)."""
    from interp.models import ModelError, resolve

    for m in models:
        kind, folder = resolve(m)
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


def _dino_device(c: StudyConfig) -> str:
    if c.device:
        return c.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# --------------------------------------------------------------------------- the study


def run_study(c: StudyConfig, out: Path | RunDir, shard: tuple[int, int] | None = None,
              say: Callable[[str], None] = print) -> dict[str, Any]:
    check_models(c.models)  # a typo or a broken folder fails here, before the run directory records anything
    check_dino(c)
    sets = prompt_sets(c)
    with writing(out, "ambench run") as rd:
        # which shard a directory ran is not a setting: a merge's copies run other shards of the same study
        rd.record_config("study", {"config": c.as_dict(), "versions": versions()})
        for m in c.models:
            _model_phases(c, rd, m, sets, shard, say)
        if shard is not None:
            say(f"shard {shard[0]}/{shard[1]} done: merge the shards with `ambench merge`, then rerun `ambench run` on the merge")
            return {"shard": list(shard)}
        return finish(c, rd, sets, say)


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


def _expected(c: StudyConfig, sets: dict[str, list[Any]]) -> int:
    return sum(len(sets[task]) * (c.generate(task, out, med).samples + 1) for task, out, med in c.arms())


def _model_phases(c: StudyConfig, rd: RunDir, m: str, sets: dict[str, list[Any]], shard: tuple[int, int] | None,
                  say: Callable[[str], None]) -> None:
    from experiments.stages.capture import capture_stage
    from experiments.stages.generate import generate_stage
    from experiments.stages.intervene import intervene_stage
    from experiments.stages.patch import patch_stage
    from interp.runtime import Runtime, describe

    say(f"[model {m}] loading")
    rt = Runtime.load(m, device=c.device, dtype=c.dtype, trust_remote_code=c.trust_remote_code, device_map=c.device_map,
                      quantize=c.quantize)
    say(f"[model {m}] {describe(rt)}")
    for task, output, medium in c.arms():
        gs = c.generate(task, output, medium)
        total = len(sets[task]) * (gs.samples + 1)
        arm = output if medium == "v1" else medium
        say(f"[model {m}] generate {task} ({arm}): {len(sets[task])} prompts x {gs.samples + 1} attempts")
        with _bar(total, f"generate {task} ({arm})", "attempt") as bar:
            generate_stage(rt, sets[task], rd, gs, model=m, shard=shard, progress=lambda n, toks, bar=bar: bar.update(n), say=say)
    rows = rd.rows(RunDir.GENERATIONS)
    ordered = sorted(rows, key=generation_order(c, sets))
    if ordered != rows:
        rd.write_rows(RunDir.GENERATIONS, ordered)
    say(f"[model {m}] capture the residual stream ({rt.info.n_layers + 1} sites x 3 positions)")
    with _bar(len(sets["translation"]) + len(sets["layout"]), "capture", "prompt") as bar:
        capture_stage(rt, sets["translation"] + sets["layout"], rd, c.capture(), model=m, shard=shard, progress=bar.update,
                      say=say)
    have = sum(r["model"] == m for r in rd.rows(RunDir.GENERATIONS))
    if have < _expected(c, sets):
        say(f"[model {m}] interventions and patching wait for every shard's attempts ({have} of {_expected(c, sets)} here): "
            "merge the shards, then run these units with --shard on copies of the merge (or finish on the merge)")
        return
    say(f"[model {m}] interventions (layout): {c.continuations} continuations per arm")
    with _bar(c.intervene_cuts or None, "interventions", "cut") as bar:
        counts = intervene_stage(rt, rd, m, c.intervene(), progress=bar.update, shard=shard)
    say(f"[model {m}] interventions: {counts['cuts']} cuts, {counts['continuations']} continuations written, "
        f"splices byte-identical {counts['splices_byte_identical']}, excluded {counts['excluded']}")
    ps = c.patch(rt.info.n_layers)
    say(f"[model {m}] activation patching at layers {list(ps.layers)}")
    with _bar(None, "patching", "layer") as bar:
        pc = patch_stage(rt, rd, m, ps, progress=bar.update, shard=shard)
    say(f"[model {m}] patching: {pc['rows']} rows over {pc['cuts']} cuts "
        f"({pc['cuts_with_unequal_token_counts']} cuts skipped: unequal token counts)")
    if c.attention:  # issue 16
        from experiments.stages.attention import attention_stage

        say(f"[model {m}] attention focus of the drawing statements on the prompt's spatial words")
        with _bar(None, "attention", "attempt") as bar:
            ac = attention_stage(rt, rd, m, c.attention_settings(), progress=bar.update, shard=shard)
        say(f"[model {m}] attention: {ac['written']} attempts written of {ac['attempts']} valid"
            + (f"; {ac['errors']} not read: {ac['error']}" if ac["errors"] else ""))
    if c.trajectory and shard is None:  # one forward pass per greedy attempt: cheap, and its probes need all of them
        from experiments.stages.trajectory import TrajectorySettings, trajectory_stage, verdict

        say(f"[model {m}] plan or state: probes at every statement boundary")
        out = trajectory_stage(rt, rd, m, TrajectorySettings(n_boot=c.n_boot, seed=c.seed))
        say(f"[model {m}] plan or state: {verdict(out['rows'])}")
    elif c.trajectory:
        say(f"[model {m}] plan or state is not sharded (one forward pass per greedy attempt): run "
            f"`ambench trajectory --run MERGED --model {m}` on the merged run")


def finish(c: StudyConfig, run: Path | RunDir, sets: dict[str, list[Any]], say: Callable[[str], None] = print) -> dict[str, Any]:
    """The host stages after both model phases (renders, scores, tables, probes, judges, report) on `run`."""
    with writing(run, "ambench run") as rd:
        return _finish(c, rd, sets, say)


def _finish(c: StudyConfig, rd: RunDir, sets: dict[str, list[Any]], say: Callable[[str], None]) -> dict[str, Any]:
    from experiments.stages.intervene import summarise_interventions
    from experiments.stages.layout import layout_table, media_table, tier_gap_table
    from experiments.stages.probe import ProbeError, probe_stage
    from experiments.stages.render import render_stage
    from experiments.stages.report import write_report
    from experiments.stages.translation import score_attempts

    say("renders")
    render_stage(rd, say=say)
    say("translation scores")
    if not rd.file(RunDir.TRANSLATION_REFS).exists():
        from bench.translation.references import load_references

        rd.write_text(RunDir.TRANSLATION_REFS, "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in load_references("all")))
    summary: dict[str, Any] = {}
    if any(r["task"] == "translation" for r in rd.rows(RunDir.GENERATIONS)):
        # score_attempts reads the translation rows of generations.jsonl as they are (by prompt_id)
        summary["translation"] = score_attempts(rd.file(RunDir.TRANSLATION_REFS), rd.file(RunDir.GENERATIONS),
                                                rd.file(RunDir.TRANSLATION_SCORES))
    say("layout tables")
    tiers = layout_table(rd, "tier")
    rd.write_json(RunDir.LAYOUT_TABLE, tiers)
    summary["layout"] = [t for t in tiers if t["tier"] == "all"]
    say("probes")
    try:
        probe_stage(rd, None, c.probe(), progress=lambda m: say("  " + m))
    except ProbeError as e:
        say(f"  probes skipped: {e}")
    if c.selectivity:  # issue 16
        from experiments.stages.selectivity import selectivity_stage

        say("cross-model selectivity")
        try:
            sel = selectivity_stage(rd, c.selectivity_settings(), progress=lambda m: say("  " + m))
            summary["selectivity"] = [r for r in sel if r["kind"] == "mean_gap"]
        except ProbeError as e:
            say(f"  selectivity skipped: {e}")
    say("intervention tables")
    it = summarise_interventions(rd, c.seed)
    if it:
        summary["interventions"] = it["counts"]
    if rd.rows(RunDir.ATTENTION):  # issue 16
        from experiments.stages.attention import summarise_attention

        say("attention focus table")
        summary["attention"] = [{k: t.get(k) for k in ("model", "task", "attempts", "mean", "median", "ci")}
                                for t in summarise_attention(rd, c.n_boot, c.seed)]
    if c.judge_url and c.judge_model:
        from experiments.judges import make_judge
        from experiments.stages.judge import judge_stage

        say("judge")
        judge_stage(rd, make_judge({"kind": "openai", "name": c.judge_name or c.judge_model, "base_url": c.judge_url,
                                    "model": c.judge_model}))
    if c.dino_folder:
        from experiments.stages.consistency import ConsistencySettings, consistency_stage

        say("DINO concept consistency and the entropy confound")
        consistency_stage(rd, c.dino_folder, ConsistencySettings(seed=c.seed, device=_dino_device(c)))
    media = media_table(rd, n_boot=c.n_boot, seed=c.seed)
    if media:
        say("medium comparison (Exp. 2)")
        rd.write_json(RunDir.MEDIA_TABLE, media)
        summary["media"] = media
    gaps = tier_gap_table(rd, n_boot=c.n_boot, seed=c.seed)  # issue 16: written only when the run has two media
    if gaps:
        say("the T2/T3 gap per medium")
        rd.write_json(RunDir.TIER_GAPS, gaps)
        summary["tier_gaps"] = [g for g in gaps if g["kind"] == "contrast"]
    say("report")
    path = write_report(rd)
    summary["report"] = str(path.relative_to(rd.path))
    rd.write_json(RunDir.SUMMARY, summary)
    return summary


# --------------------------------------------------------------------------- Ray


def run_ray(c: StudyConfig, out: Path, n_shards: int, say: Callable[[str], None] = print,
            num_cpus: int | None = None) -> dict[str, Any]:
    """Both model phases as `n_shards` Ray tasks each (one GPU each when the study runs on CUDA), each phase
    merged into `out` in the unsharded order; the remaining stages then run here. Connects to the cluster
    in RAY_ADDRESS when it is set, else starts a local Ray instance."""
    import os

    import ray

    if not ray.is_initialized():
        if os.environ.get("RAY_ADDRESS"):
            ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        else:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    import torch

    gpus = 1 if (c.device or "").startswith("cuda") else 0
    threads = torch.get_num_threads()
    # Ray starts workers with OMP_NUM_THREADS=1; CPU matmuls round differently with another thread count,
    # so the tasks get the driver's count before torch loads, with dynamic thread adjustment off (under a
    # loaded CPU, MKL/OpenMP may otherwise pick fewer threads, and an entropy's 5th decimal moves)
    env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE"}

    @ray.remote(num_gpus=gpus, runtime_env={"env_vars": env})
    def shard_task(config: dict[str, Any], folder: str, i: int, n: int, threads: int) -> str:
        import torch

        torch.set_num_threads(threads)
        cfg = StudyConfig(**{**config, "models": tuple(config["models"])})
        run_study(cfg, Path(folder), (i, n), say=lambda m: None)
        return folder

    check_models(c.models)
    check_dino(c)
    out = Path(out)
    for phase in ("a", "b"):
        folders = [out / RunDir.SHARDS / f"{phase}-{i}-of-{n_shards}" for i in range(n_shards)]
        # each shard starts from what `out` already holds (work done before, and for the second phase, which
        # reads every attempt, the merge of the first)
        for f in folders:
            if out.exists() and not f.exists():
                shutil.copytree(out, f, ignore=shutil.ignore_patterns(RunDir.SHARDS, RunDir.LOCK))
        say(f"ray: {n_shards} shard tasks for model phase {phase} ({gpus} GPU each)")
        done = ray.get([shard_task.remote(c.as_dict(), str(f), i, n_shards, threads) for i, f in enumerate(folders)])
        say(f"ray: merging phase {phase}")
        merge_runs([Path(f) for f in done], out)
    return run_study(c, out, None, say)


# --------------------------------------------------------------------------- shards


def merge_runs(shards: list[Path], out: Path) -> dict[str, int]:
    """Merge shard directories of one `ambench run` into `out`, rows in an unsharded run's order.

    `out` may be new, or hold exactly these shards' earlier merge (a rerun after more units finished);
    a directory with other settings or with rows the shards do not have is refused."""
    from activations.store import merge_stores
    from bench.intervene.splice import ARMS

    if not shards:
        raise RunError("no shard directories")
    for s in shards:
        if not (s / RunDir.CONFIG).is_file():
            raise RunError(f"{s} is not a shard of `ambench run` (no {RunDir.CONFIG})")
    configs = [RunDir(s).config() for s in shards]
    base = configs[0].get("stages", {}).get("study", {}).get("config")
    if base is None:
        raise RunError(f"{shards[0]} was not made by `ambench run`")
    for s, cfg in zip(shards, configs):
        if cfg.get("stages", {}).get("study", {}).get("config") != base:
            raise RunError(f"{s} was made with other settings than {shards[0]}")
    c = StudyConfig(**{**base, "models": tuple(base["models"])})
    sets = prompt_sets(c)
    with writing(out, "ambench merge") as rd:
        if rd.file(RunDir.CONFIG).exists():
            mine = rd.config().get("stages", {}).get("study", {}).get("config")
            if mine != base:
                raise RunError(f"{out} holds a run with other settings; merge into a new directory")
        rows: dict[AttemptKey, dict[str, Any]] = {}
        for s in shards:
            for r in read_rows(s / RunDir.GENERATIONS):
                rows[AttemptKey.of(r)] = r
        extra = [r for r in rd.rows(RunDir.GENERATIONS) if AttemptKey.of(r) not in rows]
        if extra:
            raise RunError(f"{out} holds {len(extra)} attempts that none of the shards has: merge into a new directory")
        cfg = configs[0]
        for other in configs[1:]:
            for k, v in other.get("stages", {}).items():
                cfg["stages"].setdefault(k, v)
        rd.write_json(RunDir.CONFIG, cfg)
        order_m = {m: i for i, m in enumerate(c.models)}
        merged = sorted(rows.values(), key=generation_order(c, sets))
        rd.write_rows(RunDir.GENERATIONS, merged)
        for s in shards:
            rd.record_prompts(list(RunDir(s).prompts().values()))
        index = {AttemptKey.of(r): i for i, r in enumerate(merged)}
        counts = {"generations": len(merged)}
        # derived rows: the union over shards, in the unsharded order (model, source attempt, cut, ...)
        arm_i = {a: i for i, a in enumerate(ARMS)}
        dirs = {"moved->asis": 0, "asis->moved": 1}
        for name, unit in ((RunDir.INTERVENTIONS, lambda r: (r["cut"], arm_i[r["arm"]], r["k"])),
                           (RunDir.PATCHING, lambda r: (r["cut"], r["layer"], dirs[r["direction"]])),
                           (RunDir.ATTENTION, lambda r: ())):  # issue 16: one row per attempt
            got: dict[tuple, dict[str, Any]] = {}
            for s in shards:
                for r in read_rows(s / name):
                    got[(AttemptKey.of(r), *unit(r))] = r
            if got:
                ordered = sorted(got.values(), key=lambda r: (order_m.get(r["model"], 99), index.get(AttemptKey.of(r), 10**9), *unit(r)))
                rd.write_rows(name, ordered)
                counts[name.split(".")[0]] = len(ordered)
        for s in shards:
            if (s / RunDir.CUTS).exists():
                rd.write_rows(RunDir.CUTS, read_rows(s / RunDir.CUTS))
                break
        # activations: every prompt once, in the unsharded batch order (whole capture batches, copied)
        n_acts = 0
        canonical = {(it.task, it.id): i for i, it in enumerate(sets["translation"] + sets["layout"])}
        for m in c.models:
            parts = [RunDir(s).activations(m) for s in shards]
            parts = [p for p in parts if (p / "meta.json").exists()]
            if parts:
                n_acts += merge_stores(parts, rd.activations(m), lambda t, p: canonical.get((t, p), 10**9))
        counts["activations"] = n_acts
    return counts


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: use i/n, e.g. 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"--shard {text!r}: need 0 <= i < n")
    return i, n


__all__ = ["PRESETS", "StudyConfig", "finish", "merge_runs", "parse_shard", "prompt_sets", "run_study"]
