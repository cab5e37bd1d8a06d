"""`ambench run`: the whole study on one or more models as one resumable command.

Stages, in order, into one run directory:
1. per model: generate translation and layout attempts (and the SVG arm in the paper preset);
2. per model: capture the residual stream for the same prompts and protocol;
3. per model: interventions (four arms) and activation patching;
4. renders, translation scores, layout tables, probes, judges (when configured), the HTML report.
Every stage resumes (see each stage's module); a killed run rerun with the same command continues,
and its result files come out identical to an uninterrupted run's. `config.json` records the
preset, every setting, the models and the package versions; a run directory refuses a second
command with other settings.

Past one machine: `--shard i/n` runs only the generation, capture and intervention units whose
batch (or cut) index is i modulo n, into its own directory; `merge_runs` (`ambench merge`) puts the
shards' rows back in the canonical order of an unsharded run, after which `ambench run` on the
merged directory finishes the remaining stages.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from experiments.generation import GENERATIONS, GenerateSettings, append_rows, read_rows, record_config, safe_name
from experiments.rundir import AttemptKey

PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "models": ["smollm2-135m-instruct"], "translation_prompts": 20, "layout_per_subcategory": 1, "samples": 2,
        "translation_samples": 2, "temperature": 0.7, "max_new_tokens": 128, "protocol": "few-shot", "shots": 2,
        "svg": False, "batch_size": 8, "min_attempts": 1, "n_perm": 999, "n_perm_layers": 49, "n_boot": 2000,
        "continuations": 3, "intervene_cuts": 6, "intervene_tokens": 64, "patch_layer_step": 6, "patch_cuts": 2,
        "patch_continuations": 2,
    },
    "paper": {
        "models": ["smollm2-135m-instruct"], "translation_prompts": 145, "layout_per_subcategory": 10, "samples": 10,
        "translation_samples": 11, "temperature": 0.7, "max_new_tokens": 512, "protocol": "auto", "shots": 2,
        "svg": True, "batch_size": 16, "min_attempts": 1, "n_perm": 2500, "n_perm_layers": 100, "n_boot": 10_000,
        "continuations": 9, "intervene_cuts": 0, "intervene_tokens": 128, "patch_layer_step": 1, "patch_cuts": 20,
        "patch_continuations": 9,
    },
}


@dataclass(frozen=True)
class StudyConfig:
    preset: str = "quick"
    models: tuple[str, ...] = ("smollm2-135m-instruct",)
    translation_prompts: int = 20
    layout_per_subcategory: int = 1
    samples: int = 2  #: sampled layout attempts per prompt besides the greedy one (paper: 10)
    translation_samples: int = 2  #: sampled translation attempts per reference besides the greedy one (paper: 11)
    temperature: float = 0.7
    max_new_tokens: int = 128
    protocol: str = "few-shot"
    shots: int = 2
    svg: bool = False
    batch_size: int = 8
    min_attempts: int = 1
    n_perm: int = 999
    n_perm_layers: int = 49
    n_boot: int = 2000
    continuations: int = 3
    intervene_cuts: int = 6  #: 0 = every cut
    intervene_tokens: int = 64
    patch_layer_step: int = 6
    patch_cuts: int = 2
    patch_continuations: int = 2
    seed: int = 0
    device: str | None = None
    dtype: str | None = None
    judge_url: str | None = None
    judge_model: str | None = None
    judge_name: str | None = None

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> "StudyConfig":
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}: use {', '.join(PRESETS)}")
        values = dict(PRESETS[preset], preset=preset)
        values["models"] = tuple(values["models"])
        values.update({k: (tuple(v) if k == "models" else v) for k, v in overrides.items() if v is not None})
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["models"] = list(self.models)
        return d


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


def _settings(c: StudyConfig, task: str, output: str = "canvas") -> GenerateSettings:
    samples = c.translation_samples if task == "translation" else c.samples
    return GenerateSettings(samples, c.temperature, c.seed, c.max_new_tokens, c.batch_size, c.protocol, c.shots, output)


def _bar(total: int | None, desc: str, unit: str) -> Any:
    """A progress bar on stderr (shown on a terminal, silent in logs and tests)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False)


def run_study(c: StudyConfig, out: Path, shard: tuple[int, int] | None = None,
              say: Callable[[str], None] = print) -> dict[str, Any]:
    from experiments.generation import capture_stage, generate_stage
    from experiments.intervention import InterveneSettings, PatchSettings, intervene_stage, patch_stage
    from interp.prompts import Protocol
    from interp.runtime import Runtime, describe

    from interp.models import resolve

    for m in c.models:  # a typo fails here, before the run directory records any settings
        resolve(m)
    out.mkdir(parents=True, exist_ok=True)
    study = {"config": c.as_dict(), "versions": versions(), "shard": list(shard) if shard else None}
    record_config(out, "study", study)
    sets = prompt_sets(c)
    for m in c.models:
        say(f"[model {m}] loading")
        rt = Runtime.load(m, device=c.device, dtype=c.dtype)
        say(f"[model {m}] {describe(rt)}")
        outputs = ["canvas"] + (["svg"] if c.svg else [])
        for output in outputs:
            for task in ("translation", "layout"):
                if output == "svg" and task == "translation":
                    continue
                gs = _settings(c, task, output)
                total = len(sets[task]) * (gs.samples + 1)
                say(f"[model {m}] generate {task} ({output}): {len(sets[task])} prompts x {gs.samples + 1} attempts")
                with _bar(total, f"generate {task} ({output})", "attempt") as bar:
                    generate_stage(rt, sets[task], out, gs, model=m, shard=shard,
                                   progress=lambda n, toks, bar=bar: bar.update(n))
        proto = Protocol(c.protocol, c.shots)
        say(f"[model {m}] capture the residual stream ({rt.info.n_layers + 1} sites x 3 positions)")
        with _bar(len(sets["translation"]) + len(sets["layout"]), "capture", "prompt") as bar:
            capture_stage(rt, sets["translation"] + sets["layout"], out, proto, batch_size=c.batch_size, model=m, shard=shard,
                          progress=bar.update)
        if shard is None:
            say(f"[model {m}] interventions (layout): {c.continuations} continuations per arm")
            with _bar(c.intervene_cuts or None, "interventions", "cut") as bar:
                counts = intervene_stage(rt, out, m, InterveneSettings(
                    task="layout", continuations=c.continuations, temperature=c.temperature,
                    max_new_tokens=c.intervene_tokens, seed=c.seed, limit=c.intervene_cuts or None), progress=bar.update)
            say(f"[model {m}] interventions: {counts['cuts']} cuts, {counts['continuations']} continuations written, "
                f"splices byte-identical {counts['splices_byte_identical']}, excluded {counts['excluded']}")
            layers = tuple(range(0, rt.info.n_layers, max(1, c.patch_layer_step)))
            say(f"[model {m}] activation patching at layers {list(layers)}")
            with _bar(None, "patching", "layer") as bar:
                pc = patch_stage(rt, out, m, PatchSettings(
                    task="layout", layers=layers, continuations=c.patch_continuations, temperature=c.temperature,
                    max_new_tokens=c.intervene_tokens, seed=c.seed, limit=c.patch_cuts or None), progress=bar.update)
            say(f"[model {m}] patching: {pc['rows']} rows over {pc['cuts']} cuts "
                f"({pc['cuts_with_unequal_token_counts']} cuts skipped: unequal token counts)")
        del rt
    if shard is not None:
        say(f"shard {shard[0]}/{shard[1]} done: merge the shards with `ambench merge`, then rerun `ambench run` on the merge")
        return {"shard": shard}
    return finish(c, out, sets, say)


def finish(c: StudyConfig, out: Path, sets: dict[str, list[Any]], say: Callable[[str], None] = print) -> dict[str, Any]:
    from experiments.layout import layout_table
    from experiments.probing import ProbeError, ProbeSettings, probe_stage
    from experiments.render import render_stage
    from experiments.report import write_report
    from experiments.translation import score_attempts

    say("renders")
    render_stage(out)
    say("translation scores")
    refs = out / "translation_refs.jsonl"
    if not refs.exists():
        from bench.translation.references import load_references

        tmp = refs.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for r in load_references("all"):
                f.write(json.dumps(r.to_json(), sort_keys=True) + "\n")
        tmp.replace(refs)
    gens = out / GENERATIONS
    summary: dict[str, Any] = {}
    if any(r["task"] == "translation" for r in read_rows(gens)):
        # score_attempts reads the translation rows of generations.jsonl as they are (by prompt_id)
        summary["translation"] = score_attempts(refs, gens, out / "translation_scores.jsonl")
    say("layout tables")
    tiers = layout_table(out, "tier")
    (out / "layout_table.json").write_text(json.dumps(tiers, indent=1, sort_keys=True) + "\n")
    summary["layout"] = [t for t in tiers if t["tier"] == "all"]
    say("probes")
    try:
        probe_stage(out, None, ProbeSettings(min_attempts=c.min_attempts, n_perm=c.n_perm, n_perm_layers=c.n_perm_layers,
                                             n_boot=c.n_boot, seed=c.seed),
                    progress=lambda m: say("  " + m))
    except ProbeError as e:
        say(f"  probes skipped: {e}")
    from experiments.intervention import summarise_interventions

    say("intervention tables")
    it = summarise_interventions(out, c.seed)
    if it:
        summary["interventions"] = it["counts"]
    if c.judge_url and c.judge_model:
        from experiments.judges import make_judge
        from experiments.judging import judge_stage

        say("judge")
        judge_stage(out, make_judge({"kind": "openai", "name": c.judge_name or c.judge_model, "base_url": c.judge_url,
                                     "model": c.judge_model}))
    from experiments.layout import media_table

    media = media_table(out, n_boot=c.n_boot, seed=c.seed)
    if media:
        say("medium comparison (Exp. 2)")
        (out / "media_table.json").write_text(json.dumps(media, indent=1, sort_keys=True) + "\n")
        summary["media"] = media
    say("report")
    path = write_report(out)
    summary["report"] = str(path.relative_to(out))
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary


# --------------------------------------------------------------------------- Ray


def run_ray(c: StudyConfig, out: Path, n_shards: int, say: Callable[[str], None] = print,
            num_cpus: int | None = None) -> dict[str, Any]:
    """Generation and capture as `n_shards` Ray tasks (one GPU each when the study runs on CUDA), merged
    into `out` in the unsharded order; the remaining stages then run here. Connects to the cluster in
    RAY_ADDRESS when it is set, else starts a local Ray instance."""
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

        # Ray starts workers with OMP_NUM_THREADS=1; CPU matmuls round differently with another
        # thread count, so the tasks use the driver's count and the merge equals a one-machine run
        torch.set_num_threads(threads)
        cfg = StudyConfig(**{**config, "models": tuple(config["models"])})
        run_study(cfg, Path(folder), (i, n), say=lambda m: None)
        return folder

    folders = [str(out / "shards" / f"{i}-of-{n_shards}") for i in range(n_shards)]
    say(f"ray: {n_shards} shard tasks ({gpus} GPU each)")
    done = ray.get([shard_task.remote(c.as_dict(), f, i, n_shards, threads) for i, f in enumerate(folders)])
    say("ray: merging shards")
    merge_runs([Path(f) for f in done], out)
    return run_study(c, out, None, say)


# --------------------------------------------------------------------------- shards


def merge_runs(shards: list[Path], out: Path) -> dict[str, int]:
    """Merge shard directories of one `ambench run` into `out`, rows in an unsharded run's order."""
    import numpy as np

    from activations.store import ActivationStore, ActivationWriter

    if not shards:
        raise ValueError("no shard directories")
    configs = [json.loads((s / "config.json").read_text()) for s in shards]
    base = configs[0]["stages"]["study"]["config"]
    for s, cfg in zip(shards, configs):
        if cfg["stages"]["study"]["config"] != base:
            raise ValueError(f"{s} was made with other settings than {shards[0]}")
    c = StudyConfig(**{**base, "models": tuple(base["models"])})
    sets = prompt_sets(c)
    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((shards[0] / "config.json").read_text())
    cfg["stages"]["study"]["shard"] = None
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    # generations: the unsharded order is model, then output medium, then task, then prompt, then sample
    order_m = {m: i for i, m in enumerate(c.models)}
    prompt_index = {("translation", it.id): i for i, it in enumerate(sets["translation"])}
    prompt_index.update({("layout", it.id): i for i, it in enumerate(sets["layout"])})
    rows = {}
    for s in shards:
        for r in read_rows(s / GENERATIONS):
            rows[AttemptKey.of(r)] = r

    def key(r: dict[str, Any]) -> tuple:
        svg = r.get("medium") == "svg"
        return (order_m.get(r["model"], 99), svg, 0 if r["task"] == "translation" else 1,
                prompt_index.get((r["task"], r["prompt_id"]), 10**6), r["sample"])

    merged = sorted(rows.values(), key=key)
    if (out / GENERATIONS).exists():
        (out / GENERATIONS).unlink()
    append_rows(out / GENERATIONS, merged)
    from experiments.generation import record_prompts, run_prompts

    for s in shards:
        record_prompts(out, list(run_prompts(s).values()))
    # activations: every prompt once, in the unsharded batch order
    n_acts = 0
    for m in c.models:
        parts = [s / "activations" / f"{safe_name(m)}.h5" for s in shards]
        parts = [p for p in parts if p.exists()]
        if not parts:
            continue
        stores = [ActivationStore(p) for p in parts]
        meta = stores[0].meta
        meta = {k: v for k, v in meta.items() if k != "store_dtype"}
        by_id = {}
        for st in stores:
            for i, (task, pid) in enumerate(zip(st.tasks, st.prompt_ids)):
                by_id[(task, pid)] = (st, i)
        ids = [(it.task, it.id) for it in sets["translation"] + sets["layout"] if (it.task, it.id) in by_id]
        _, n_sites, n_pos, d = stores[0].shape
        target = out / "activations" / f"{safe_name(m)}.h5"
        if target.exists():
            target.unlink()
        with ActivationWriter(target, n_sites, n_pos, d, meta, stores[0].meta.get("store_dtype", "float32")) as w:
            for i in range(0, len(ids), c.batch_size):
                batch = ids[i: i + c.batch_size]
                resid = np.stack([by_id[p][0].f["resid"][by_id[p][1]] for p in batch])
                pos = np.stack([by_id[p][0].token_positions[by_id[p][1]] for p in batch])
                w.append([p for _, p in batch], resid, pos, [t for t, _ in batch])
                n_acts += len(batch)
        for st in stores:
            st.close()
    return {"generations": len(merged), "activations": n_acts}


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: use i/n, e.g. 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"--shard {text!r}: need 0 <= i < n")
    return i, n


__all__ = ["PRESETS", "StudyConfig", "finish", "merge_runs", "parse_shard", "prompt_sets", "run_study"]
