"""Shards: `--shard i/n` parsing and `ambench merge`, which puts shard directories back together in the order
of an unsharded run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.rundir import AttemptKey, RunDir, RunError, read_rows, writing
from experiments.study.config import StudyConfig, generation_order, prompt_sets


def merge_runs(shards: list[Path], out: Path) -> dict[str, int]:
    """Merge shard directories of one `ambench run` into `out`, rows in an unsharded run's order.

    `out` may be new, or hold exactly these shards' earlier merge (a rerun after more units finished);
    a directory with other settings or with rows the shards do not have is refused. Each shard records which
    shard (i/n) and model phase it holds (`RunDir.record_shard`): the same shard twice, or shards of
    different splits, are refused; the merge records which shards it holds and which are missing
    (`config.json` "merged", and the returned counts), and `ambench run` on it names the missing ones."""
    from activations.store import merge_stores
    from bench.intervene.splice import ARMS

    if not shards:
        raise RunError("no shard directories")
    for s in shards:
        if not (s / RunDir.CONFIG).is_file():
            raise RunError(f"{s} is not a shard of `ambench run` (no {RunDir.CONFIG})")
    seen_paths: dict[Path, Path] = {}
    for s in shards:
        if s.resolve() in seen_paths:
            raise RunError(f"{s} is given twice: give each shard directory once")
        seen_paths[s.resolve()] = s
    configs = [RunDir(s).config() for s in shards]
    study = configs[0].get("stages", {}).get("study", {})
    base = study.get("config")
    if base is None:
        raise RunError(f"{shards[0]} was not made by `ambench run`")
    for s, cfg in zip(shards, configs):
        other = cfg.get("stages", {}).get("study", {})
        if other.get("config") != base:
            raise RunError(f"{s} was made with other settings than {shards[0]}")
        if other.get("threads") != study.get("threads"):
            raise RunError(f"{s} ran with {other.get('threads')} threads and {shards[0]} with {study.get('threads')}: CPU "
                           "results round differently, so shards of one study run with one thread count")
    held = _shards_held(shards, configs)
    c = StudyConfig.from_dict(base)
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
        cfg.pop("shard", None)
        if held is not None:
            cfg["merged"] = held
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
        if held is not None:
            counts["shards"] = [f"{i}/{held['n']}" for i in held["shards"]]
            counts["missing"] = [f"{i}/{held['n']}" for i in held["missing"]]
            counts["phase"] = held["phase"]
    return counts


def _shards_held(shards: list[Path], configs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Which shards (i of n, and the model phase) the directories hold; the same shard twice, or shards of
    different splits or phases, are refused. None when no directory records a shard (an older run)."""
    labels = [(s, cfg.get("shard")) for s, cfg in zip(shards, configs)]
    known = [(s, x) for s, x in labels if x is not None]
    if not known:
        return None
    unlabelled = [s for s, x in labels if x is None]
    if unlabelled:
        raise RunError(f"{unlabelled[0]} records no shard: it is not a finished `ambench run --shard i/n` (rerun its command "
                       "to finish it)")
    n, phase = known[0][1]["n"], known[0][1]["phase"]
    by_index: dict[int, Path] = {}
    for s, x in known:
        if (x["n"], x["phase"]) != (n, phase):
            raise RunError(f"{s} is shard {x['i']}/{x['n']} of phase {x['phase']} and {known[0][0]} shard {known[0][1]['i']}/{n} "
                           f"of phase {phase}: merge the shards of one split and one phase")
        if x["i"] in by_index:
            raise RunError(f"{by_index[x['i']]} and {s} are both shard {x['i']}/{n} (phase {phase}): give each shard once")
        by_index[x["i"]] = s
    return {"n": n, "phase": phase, "shards": sorted(by_index), "missing": [i for i in range(n) if i not in by_index]}


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: use i/n, e.g. 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"--shard {text!r}: need 0 <= i < n")
    return i, n


__all__ = ["merge_runs", "parse_shard"]
