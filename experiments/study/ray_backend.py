"""`ambench run --backend ray`: both model phases as Ray tasks, merged after each, then the host stages."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

from experiments.rundir import RunDir
from experiments.study.checks import check_dino, check_models
from experiments.study.config import StudyConfig
from experiments.study.merge import merge_runs
from experiments.study.phases import run_study


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
        cfg = StudyConfig.from_dict(config)
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


__all__ = ["run_ray"]
