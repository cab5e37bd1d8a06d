"""Interventions (Exp. 3, stage 2): splice coordinates into a model's own code and watch it continue.

Sources: a run's valid canvas attempts (greedy sample 0 by default) that have a spliceable drawing
statement. The cut is after the last spliceable top-level drawing statement (the completed picture,
as in the paper; `cut="all"` cuts after each one). For each cut, the four arms of
`bench.intervene.splice.cut_arms`; for each arm, N continuations (paper: 9), seeded by
sha256(run seed, model, prompt, sample, cut, arm, k), sampled at the generation temperature through
`Runtime.continue_batch`, which computes the shared prefix (prompt + code before the cut statement)
once for all arms and continuations of a cut. A continuation *continued drawing* when it emits at
least one more primitive call before its code block closes.

Model input for an arm: the prompt's tokens, then the answer text up to the cut with the arm's
statement, tokenised in two pieces (the code before the cut statement, then the statement line) so
that every arm shares the first piece. Rows go to `RUN/interventions.jsonl`, one per continuation,
written a cut at a time (resumable: finished cuts are skipped).

`ambench patch` (`patch_stage`) goes beyond the paper: for cuts whose moved and as-is statement
lines have the same number of tokens, it replaces the residual stream (resid_pre of layer L) at
the statement's token positions of one arm with the other arm's, for every layer L, and samples
continuations; the continuation rate per layer shows which layers carry the geometric state.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bench.intervene.splice import ARMS, continued_drawing, cut_arms, statements
from experiments.generation import GENERATIONS, answer_text, append_rows, derive_seed, read_rows
from experiments.render import read_renders, render_stage, row_key
from interp.prompts import PromptItem, Protocol, build, items_by_id

INTERVENTIONS = "interventions.jsonl"
PATCHING = "patching.jsonl"


def protocol_from_label(label: str) -> Protocol:
    if label.startswith("svg/"):
        raise ValueError("SVG attempts have no canvas statements to splice")
    if label == "zero-shot":
        return Protocol("zero-shot", 0)
    name, _, k = label.rpartition("-")
    return Protocol(name, int(k))


def plan_cuts(run: Path, model: str, samples: Iterable[int] = (0,), cut: str = "last",
              limit: int | None = None) -> list[dict[str, Any]]:
    """Every (attempt, cut statement) with its arms, from valid canvas attempts of `model`."""
    render_stage(run)
    renders = read_renders(run)
    wanted = set(samples)
    cuts = []
    for r in read_rows(run / GENERATIONS):
        if r["model"] != model or r["sample"] not in wanted or r["protocol"].startswith("svg/"):
            continue
        rend = renders.get(row_key(r))
        if rend is None or rend["outcome"] != "ok":
            continue
        answer = answer_text(r)
        every = statements(answer)
        stmts = [s for s in every if s.spliceable]
        if not stmts:
            continue
        painted = np.any(rend["pixels"] != rend["background"], axis=-1)
        chosen = stmts[-1:] if cut == "last" else stmts
        for s in chosen:
            idx = every.index(s)
            arms = cut_arms(answer, s, painted)
            cuts.append({"row": r, "answer": answer, "stmt": s, "cut": idx, "arms": arms})
        if limit and len(cuts) >= limit:
            break
    return cuts[:limit] if limit else cuts


def _tokens(rt: Any, r: dict[str, Any], cut: dict[str, Any], items: dict[str, PromptItem]) -> tuple[list[int], dict[str, list[int]]]:
    built = build(items[r["prompt_id"]], protocol_from_label(r["protocol"]), rt.tokenizer, chat=rt.info.chat)
    plen = len(r.get("prefix", ""))  # the prompt already holds an open fence: drop it from the answer
    arms = {a.arm: a.prefix[plen:] for a in cut["arms"]}
    shared_text = arms["null-empty"]
    full = list(built.tokens) + (rt.tokenizer(shared_text, add_special_tokens=False)["input_ids"] if shared_text else [])
    shared, last = full[:-1], full[-1]
    suffixes = {}
    for name, text in arms.items():
        rest = text[len(shared_text):]
        suffixes[name] = [last] + (rt.tokenizer(rest, add_special_tokens=False)["input_ids"] if rest else [])
    return shared, suffixes


def intervene_stage(rt: Any, run: Path, model: str | None = None, arms: Iterable[str] = ARMS, continuations: int = 9,
                    temperature: float = 0.7, max_new_tokens: int = 96, seed: int = 0, cut: str = "last",
                    limit: int | None = None, progress: Callable[[int], None] | None = None) -> dict[str, int]:
    from interp.runtime import Sampling, StopRule

    model = model or rt.info.name
    arms = [a for a in ARMS if a in set(arms)]
    items = items_by_id()
    path = run / INTERVENTIONS
    done = {(x["prompt_id"], x["sample"], x["cut"]) for x in read_rows(path)}
    cuts = plan_cuts(run, model, cut=cut, limit=limit)
    # every moved arm was built by `move`, which asserts byte identity outside the digits; count them
    splices = sum(a.arm.startswith("moved") for c in cuts for a in c["arms"])
    written = 0
    for c in cuts:
        r = c["row"]
        key = (r["prompt_id"], r["sample"], c["cut"])
        if key in done:
            if progress:
                progress(1)
            continue
        shared, suffixes = _tokens(rt, r, c, items)
        present = [a for a in c["arms"] if a.arm in arms]
        rows_in, sfx, smp = [], [], []
        for a in present:
            for k in range(continuations):
                s = derive_seed(seed, model, r["prompt_id"], r["sample"], c["cut"], a.arm, k)
                rows_in.append((a, k, s))
                sfx.append(suffixes[a.arm])
                smp.append(Sampling(temperature, s))
        gens = rt.continue_batch(shared, sfx, smp, StopRule(max_new_tokens=max_new_tokens, open_fence=True))
        out = []
        for (a, k, s), g in zip(rows_in, gens):
            out.append({"model": model, "prompt_id": r["prompt_id"], "task": r["task"], "sample": r["sample"],
                        "protocol": r["protocol"], "cut": c["cut"], "statement": c["stmt"].name, "arm": a.arm, "k": k,
                        "seed": s, "temperature": temperature, "dr": a.dr, "dc": a.dc, "distance": a.distance,
                        "overlap": a.overlap, "continuation": g.text, "stop": g.stop, "n_tokens": len(g.tokens),
                        "continued": continued_drawing(g.text)})
        append_rows(path, out)
        written += len(out)
        if progress:
            progress(1)
    return {"cuts": len(cuts), "continuations_written": written, "splices_byte_identical": f"{splices}/{splices}"}


# --------------------------------------------------------------------------- statistics


def _cluster_boot(per_prompt: dict[str, list[float]], n_boot: int, seed: int) -> tuple[float, float]:
    keys = sorted(per_prompt)
    rng = np.random.default_rng(seed)
    means = []
    vals = [np.asarray(per_prompt[k], dtype=float) for k in keys]
    for _ in range(n_boot):
        pick = rng.integers(0, len(keys), len(keys))
        means.append(np.mean(np.concatenate([vals[i] for i in pick])))
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def arm_table(rows: list[dict[str, Any]], n_boot: int = 2000, n_perm: int = 2000, seed: int = 0) -> list[dict[str, Any]]:
    """Continuation rate per (model, arm), and delta vs null-asis with a prompt-clustered bootstrap CI
    and a paired permutation test (arm labels swapped within each cut), BH-adjusted across models x arms."""
    from interp.probes import benjamini_hochberg

    out = []
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        by_cut: dict[tuple, dict[str, list[float]]] = {}
        for r in mine:
            by_cut.setdefault((r["prompt_id"], r["sample"], r["cut"]), {}).setdefault(r["arm"], []).append(float(r["continued"]))
        for arm in ARMS:
            vals = [r for r in mine if r["arm"] == arm]
            if not vals:
                continue
            per_prompt: dict[str, list[float]] = {}
            for r in vals:
                per_prompt.setdefault(r["prompt_id"], []).append(float(r["continued"]))
            row: dict[str, Any] = {"model": model, "arm": arm, "continuations": len(vals), "cuts": len({(r["prompt_id"], r["sample"], r["cut"]) for r in vals}),
                                   "rate": float(np.mean([r["continued"] for r in vals])),
                                   "rate_ci": list(_cluster_boot(per_prompt, n_boot, seed))}
            if arm != "null-asis":
                pairs = [(c[arm], c["null-asis"]) for c in by_cut.values() if arm in c and "null-asis" in c]
                if pairs:
                    deltas = np.array([np.mean(a) - np.mean(b) for a, b in pairs])
                    per_prompt_delta: dict[str, list[float]] = {}
                    for (key, c) in by_cut.items():
                        if arm in c and "null-asis" in c:
                            per_prompt_delta.setdefault(key[0], []).append(np.mean(c[arm]) - np.mean(c["null-asis"]))
                    rng = np.random.default_rng(seed)
                    null = [np.mean(deltas * rng.choice([-1.0, 1.0], size=deltas.size)) for _ in range(n_perm)]
                    obs = float(deltas.mean())
                    row.update({"delta_vs_asis": obs, "delta_ci": list(_cluster_boot(per_prompt_delta, n_boot, seed)),
                                "p_perm": float((1 + sum(abs(v) >= abs(obs) - 1e-12 for v in null)) / (1 + n_perm)),
                                "mean_distance": float(np.mean([r["distance"] for r in vals]))})
            out.append(row)
    tested = [r for r in out if "p_perm" in r]
    for r, q in zip(tested, benjamini_hochberg([r["p_perm"] for r in tested])):
        r["q_bh"] = q
    return out


def dose_response(rows: list[dict[str, Any]], bins: Iterable[float] = (0, 3, 5, 7, 10, 20)) -> list[dict[str, Any]]:
    """Continuation rate of the moved arms by displacement distance bin, per model."""
    edges = list(bins)
    out = []
    for model in sorted({r["model"] for r in rows}):
        moved = [r for r in rows if r["model"] == model and r["arm"].startswith("moved")]
        for lo, hi in zip(edges, edges[1:]):
            sel = [r for r in moved if lo <= r["distance"] < hi]
            if sel:
                out.append({"model": model, "bin": [lo, hi], "continuations": len(sel),
                            "rate": float(np.mean([r["continued"] for r in sel])),
                            "mean_distance": float(np.mean([r["distance"] for r in sel]))})
    return out


def plot_interventions(run: Path, table: list[dict[str, Any]], dose: list[dict[str, Any]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for model in sorted({r["model"] for r in table}):
        t = [r for r in table if r["model"] == model]
        xs = [ARMS.index(r["arm"]) for r in t]
        a1.errorbar(xs, [r["rate"] for r in t], yerr=[[r["rate"] - r["rate_ci"][0] for r in t], [r["rate_ci"][1] - r["rate"] for r in t]],
                    marker="o", capsize=3, label=model, ls="none")
        d = [r for r in dose if r["model"] == model]
        a2.plot([r["mean_distance"] for r in d], [r["rate"] for r in d], marker="o", label=model)
    a1.set_xticks(range(len(ARMS)), ARMS, fontsize=8)
    a1.set_ylabel("continued drawing")
    a1.set_ylim(-0.05, 1.05)
    a1.set_title("continuation rate per arm (prompt-bootstrap 95% CI)")
    a2.set_xlabel("displacement (cells)")
    a2.set_ylabel("continued drawing (moved arms)")
    a2.set_ylim(-0.05, 1.05)
    a2.set_title("dose-response")
    a1.legend(fontsize=7)
    fig.tight_layout()
    out = run / "interventions.png"
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)
    return out


# --------------------------------------------------------------------------- activation patching


def patch_stage(rt: Any, run: Path, model: str | None = None, layers: Iterable[int] | None = None, continuations: int = 9,
                temperature: float = 0.7, max_new_tokens: int = 64, seed: int = 0, moved_arm: str = "moved-unused",
                limit: int | None = None, progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Patch resid_pre of layer L at the cut statement's tokens between `moved_arm` and null-asis, both ways."""
    from interp.runtime import Sampling, StopRule

    model = model or rt.info.name
    items = items_by_id()
    layers = list(range(rt.info.n_layers)) if layers is None else list(layers)
    path = run / PATCHING
    done = {(x["prompt_id"], x["sample"], x["cut"], x["layer"], x["direction"]) for x in read_rows(path)}
    skipped = 0
    for c in plan_cuts(run, model, limit=limit):
        names = {a.arm for a in c["arms"]}
        if moved_arm not in names:
            continue
        r = c["row"]
        shared, suffixes = _tokens(rt, r, c, items)
        src = {"moved->asis": (moved_arm, "null-asis"), "asis->moved": ("null-asis", moved_arm)}
        if len(suffixes[moved_arm]) != len(suffixes["null-asis"]):
            skipped += 1
            continue
        span = len(suffixes["null-asis"])
        if all((r["prompt_id"], r["sample"], c["cut"], layer, d) in done for layer in layers for d in src):
            continue
        # each arm's residual stream at the statement tokens, every patched layer in one capture pass
        acts = {}
        for arm in (moved_arm, "null-asis"):
            toks = shared + suffixes[arm]
            acts[arm] = rt.capture([toks], [list(range(len(toks) - span, len(toks)))], layers)[0]  # [layers, span, d]
        for li, layer in enumerate(layers):
            hook_name = rt.hook_names([layer])[0]
            for direction, (donor, target) in src.items():
                key = (r["prompt_id"], r["sample"], c["cut"], layer, direction)
                if key in done:
                    continue

                def put(act: Any, hook: Any = None, donor_acts: Any = acts[donor][li]) -> Any:
                    act[:, -span:, :] = donor_acts.to(act.device, act.dtype)
                    return act

                smp = [Sampling(temperature, derive_seed(seed, model, r["prompt_id"], r["sample"], c["cut"], "patch", layer, direction, k))
                       for k in range(continuations)]
                gens = rt.continue_batch(shared, [suffixes[target]] * continuations, smp,
                                         StopRule(max_new_tokens=max_new_tokens, open_fence=True),
                                         prefill_hooks=[(hook_name, put)])
                rate = float(np.mean([continued_drawing(g.text) for g in gens]))
                row = {"model": model, "prompt_id": r["prompt_id"], "sample": r["sample"], "cut": c["cut"], "layer": layer,
                       "direction": direction, "moved_arm": moved_arm, "continuations": continuations, "rate": rate,
                       "seed": seed}
                append_rows(path, [row])
                done.add(key)
            if progress:
                progress(1)
    rows = read_rows(path)
    return rows + ([{"kind": "skipped", "cuts_with_unequal_token_counts": skipped}] if skipped else [])


def plot_patching(run: Path, rows: list[dict[str, Any]]) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if "layer" in r]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for direction in sorted({r["direction"] for r in rows}):
        sel = [r for r in rows if r["direction"] == direction]
        layers = sorted({r["layer"] for r in sel})
        ax.plot(layers, [np.mean([r["rate"] for r in sel if r["layer"] == L]) for L in layers], marker="o", label=direction)
    ax.set_xlabel("patched layer (resid_pre)")
    ax.set_ylabel("continued drawing")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("activation patching at the cut statement")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = run / "patching.png"
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)
    return out


def summarise_interventions(run: Path, seed: int = 0) -> dict[str, Any] | None:
    """Write RUN/interventions_table.json and the plots from the rows so far; None without rows."""
    rows = read_rows(run / INTERVENTIONS)
    if not rows:
        return None
    table = arm_table(rows, seed=seed)
    dose = dose_response(rows)
    out = {"arms": table, "dose_response": dose}
    (run / "interventions_table.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    plot_interventions(run, table, dose)
    if (run / PATCHING).exists():
        plot_patching(run, read_rows(run / PATCHING))
    return out
