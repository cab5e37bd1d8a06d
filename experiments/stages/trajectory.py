"""Plan or state along the generation (the paper's open question): probes at every statement boundary.

While a model writes its program, is the final canvas already in its residual stream (a plan), or only
the canvas drawn so far (a state it tracks)? For each greedy, valid attempt the prompt and the model's own
answer are run through the model once (teacher forcing: a causal model's activations at a token are the
ones it had when it wrote the next one). The residual stream is captured at every site at boundary 0 (the
last prompt token, before any code) and at boundary k (the last token of the k-th top-level drawing
statement's line, just before the model writes statement k+1). At each boundary three probes run, each
the usual nested-CV PCA+ridge with the layer chosen inside the folds (`interp.probes.LayerSweep`):

- `drawn`: the 6x6 occupancy of the canvas the program has drawn so far (statements 1..k, rendered in
  the sandbox: the prefix program, as the model's code stands at that token; zero at boundary 0);
- `final`: the 6x6 occupancy of the attempt's final render;
- `state`: the final occupancy predicted from the drawn-so-far occupancy itself (no activations): how much
  of the final canvas any reader of the code so far could guess.

`final - state` (paired prompt-bootstrap CI) is the plan signal: the part of the final canvas the
activations hold beyond what is already drawn. A planner's `final` is decodable at boundary 0 and its
`final - state` is positive before the picture is drawn; a tracker's `final` follows `drawn`.
Rows go to RUN/trajectory.jsonl (one per model, task, boundary and probe) and one plot per model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from experiments.rundir import AttemptKey, RunDir, RunError, answer_text, content_hash, reading, safe_name, writing

TRAJECTORY = RunDir.TRAJECTORY
PROBES = ("drawn", "final", "state")


@dataclass(frozen=True)
class TrajectorySettings:
    """Which attempts and boundaries are probed, and how."""

    task: str = "layout"  #: the task whose attempts are read (the question is the layout task's)
    boundaries: int = 6  #: statement boundaries after boundary 0 (the last prompt token)
    samples: tuple[int, ...] = (0,)  #: attempt samples used (0: the greedy attempt; one attempt per prompt keeps folds by prompt)
    min_attempts: int = 10  #: attempts a boundary needs to be probed (fewer: the boundary is skipped, with a row saying so)
    lead_margin: float = 0.05  #: final - state counts as a lead when its CI's lower end exceeds this R^2 (two
    #: probes of equal information differ by a little in regularisation; a lead must be more than that)
    seed: int = 0  #: the probes' folds derive from it
    batch_size: int = 4  #: attempts per forward pass
    final_site: str = "pre-norm"  #: the last capture site (as the capture stage)

    def __post_init__(self) -> None:
        from interp.prompts import TASKS

        if self.task not in TASKS:
            raise RunError(f"trajectory task {self.task!r}: use {' or '.join(TASKS)}")
        if self.boundaries < 1 or self.min_attempts < 10 or self.batch_size < 1:
            raise RunError("trajectory settings: boundaries >= 1, min_attempts >= 10 (5-fold nested CV) and batch_size >= 1")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples"] = list(self.samples)
        return d


@dataclass
class Attempt:
    """One attempt's answer and its boundaries (character offsets into the model's text)."""

    key: AttemptKey
    row: dict[str, Any]
    answer: str  #: prefix + text (what the extractor reads)
    ends: list[int]  #: per boundary k >= 1: the offset just after statement k's line in `answer`
    n_statements: int  #: top-level drawing statements in the whole program
    code_start: int  #: offset of the program's first character in `answer`
    final: np.ndarray  #: [36] occupancy of the final render
    drawn: list[np.ndarray | None]  #: per boundary k >= 0: occupancy drawn so far (None: the prefix did not render)


def plan_attempts(run: Any, model: str, s: TrajectorySettings) -> tuple[list[Attempt], dict[str, int]]:
    """The attempts to probe (valid canvas attempts of `model` on the task, the settings' samples) with their
    boundaries and drawn-so-far targets; and the count of attempts left out, by reason."""
    from bench.intervene.splice import code_region, statements
    from bench.sandbox.pool import run_programs
    from experiments.stages.render import read_renders, render_stage, row_key
    from interp.probes import occupancy

    rd = reading(run)
    if rd.writable:
        render_stage(rd)
    renders = read_renders(rd)
    counts = {"attempts": 0, "invalid": 0, "no statement": 0, "used": 0}
    out: list[Attempt] = []
    for r in rd.rows(RunDir.GENERATIONS):
        key = AttemptKey.of(r)
        if key.model != model or key.task != s.task or key.medium != "v1" or key.sample not in s.samples:
            continue
        counts["attempts"] += 1
        rend = renders.get(row_key(r))
        if rend is None or rend["outcome"] != "ok":
            counts["invalid"] += 1
            continue
        answer = answer_text(r)
        try:
            stmts = statements(answer)
        except Exception:  # noqa: BLE001 - model text is hostile: an attempt we cannot parse is left out
            stmts = []
        if not stmts:
            counts["no statement"] += 1
            continue
        start, _ = code_region(answer)
        final = occupancy(rend["pixels"], rend["background"]).ravel()
        out.append(Attempt(key, r, answer, [st.line_end for st in stmts[: s.boundaries]], len(stmts), start, final,
                           [np.zeros(36)]))
    # the drawn-so-far canvases: each prefix program in the sandbox (model code is hostile)
    jobs = [(a, k, a.answer[a.code_start: end]) for a in out for k, end in enumerate(a.ends, 1)]
    results = run_programs([t for _, _, t in jobs]) if jobs else []
    for (a, k, _), res in zip(jobs, results):
        ok = res.outcome == "ok" and res.pixels is not None
        a.drawn.append(occupancy(res.pixels, res.background or (255, 255, 255)).ravel() if ok else None)
    counts["used"] = len(out)
    return out, counts


def boundary_tokens(rt: Any, item: Any, a: Attempt) -> tuple[list[int], list[int]]:
    """The attempt's tokens (prompt + answer, as the capture stage builds prompts) and the token index of
    each boundary: 0 = the last prompt token; k = the last token that starts before statement k's line end."""
    from experiments.cuts import protocol_from_label
    from interp.prompts import build

    built = build(item, protocol_from_label(a.key.protocol, a.key.medium), rt.tokenizer, chat=rt.info.chat)
    plen = len(a.row.get("prefix", ""))  # the prompt already holds an open fence
    text = a.answer[plen:]
    enc = rt.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offs = list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
    base = len(built.tokens)
    pos = [base - 1]
    for end in a.ends:
        e = end - plen
        inside = [i for i, (lo, _) in enumerate(offs) if lo < e]
        pos.append(base + inside[-1] if inside else base - 1)
    return list(built.tokens) + ids, pos


def capture_boundaries(rt: Any, run: Any, attempts: Sequence[Attempt], s: TrajectorySettings,
                       progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
    """Per attempt: float32 [boundaries present, sites, d_model], the residual at each of its boundaries."""
    from experiments.cuts import prompt_items

    get = prompt_items(run)
    out: list[np.ndarray] = []
    for i in range(0, len(attempts), s.batch_size):
        batch = attempts[i: i + s.batch_size]
        seqs, pos = zip(*(boundary_tokens(rt, get(a.key.task, a.key.prompt_id), a) for a in batch))
        width = max(len(p) for p in pos)
        padded = [list(p) + [p[-1]] * (width - len(p)) for p in pos]  # capture takes one width; the copies are dropped
        acts = rt.capture(list(seqs), padded, final=s.final_site).numpy()  # [batch, sites, width, d]
        for j, p in enumerate(pos):
            out.append(np.ascontiguousarray(acts[j, :, : len(p)].transpose(1, 0, 2)))
        if progress:
            progress(len(batch))
    return out


def probe_boundaries(attempts: Sequence[Attempt], acts: Sequence[np.ndarray], s: TrajectorySettings,
                     base: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows for every boundary: the three probes' R^2 with CIs, and final - state with its paired CI."""
    from interp.intervals import delta_interval, fold_sums, r2_interval, test_over_train
    from interp.probes import Grid, LayerSweep

    grid = Grid()
    rows: list[dict[str, Any]] = []
    for k in range(s.boundaries + 1):
        use = [i for i, a in enumerate(attempts) if k < len(acts[i]) and k < len(a.drawn) and a.drawn[k] is not None]
        row = {**base, "kind": "boundary", "boundary": k, "n": len(use),
               "fully_drawn": int(sum(1 for i in use if k >= attempts[i].n_statements))}
        if len(use) < s.min_attempts:
            rows.append({**row, "skipped": f"{len(use)} attempts reach boundary {k} (at least {s.min_attempts} needed)"})
            continue
        y_final = np.stack([attempts[i].final for i in use])
        y_drawn = np.stack([attempts[i].drawn[k] for i in use])
        xs = [np.stack([acts[i][k, li] for i in use]).astype(np.float64) for li in range(acts[use[0]].shape[1])]
        sweep = LayerSweep(xs, grid, seed=s.seed)
        res = {"drawn": sweep.best(y_drawn), "final": sweep.best(y_final)}
        res["state"] = LayerSweep([y_drawn], grid, seed=s.seed).best(y_final)
        # intervals of the expected R^2 (interp/intervals.py), from the folds the three probes share (same seed, n)
        n, ratio = len(use), test_over_train(len(use), grid.outer)
        sums = {name: fold_sums(y_drawn if name == "drawn" else y_final, res[name].pred, sweep.outer) for name in PROBES}
        for name in PROBES:
            r = res[name]
            layers = sorted({c.get("layer") for c in r.chosen if c.get("layer") is not None})
            iv = r2_interval(sums[name][0][None], sums[name][1][None], n, ratio)
            # R^2 of a constant target (nothing drawn yet at every attempt) is undefined: None, not NaN
            rows.append({**row, "probe": name, "r2": _num(r.r2), "ci": [_num(iv.lo), _num(iv.hi)],
                         "layers": layers if name != "state" else None})
        d = float(res["final"].r2 - res["state"].r2)
        iv = delta_interval(sums["final"][0][None], sums["state"][0][None], sums["final"][1][None], n, ratio)
        ci = [_num(iv.lo), _num(iv.hi)]
        rows.append({**row, "probe": "final-state", "r2": _num(d), "ci": ci, "layers": None,
                     "lead": bool(ci[0] is not None and ci[0] > s.lead_margin), "lead_margin": s.lead_margin})
    return rows


def _num(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def trajectory_stage(rt: Any, run: Any, model: str | None = None, s: TrajectorySettings = TrajectorySettings(),
                     progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Capture and probe `model`'s attempts; its rows in RUN/trajectory.jsonl replace its earlier ones and
    its plot is redrawn. Returns {rows, counts}."""
    model = model or rt.info.name
    with writing(run) as rd:
        if not rd.file(RunDir.GENERATIONS).is_file():
            raise RunError(f"{rd.path} has no {RunDir.GENERATIONS}: run `ambench generate --task {s.task} --out {rd.path}` first")
        attempts, counts = plan_attempts(rd, model, s)
        base = {"model": model, "task": s.task, "weights": rt.info.weights_digest,
                "input": content_hash([a.answer for a in attempts], s.as_dict(), rt.info.weights_digest)}
        acts = capture_boundaries(rt, rd, attempts, s, progress) if attempts else []
        rows = [{**base, "kind": "settings", "settings": s.as_dict(), "counts": counts, "n_sites": rt.info.n_layers + 1}]
        rows += probe_boundaries(attempts, acts, s, base) if attempts else []
        keep = [r for r in rd.rows(TRAJECTORY) if (r["model"], r["task"]) != (model, s.task)]
        rd.write_rows(TRAJECTORY, keep + rows)
        _plot(rd, model, s.task, rows)
    return {"rows": rows, "counts": counts}


def _plot(rd: RunDir, model: str, task: str, rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    pts = [r for r in rows if r.get("kind") == "boundary" and "probe" in r]
    if not pts:
        return
    fig, ax = plt.subplots(figsize=(6.5, 4), dpi=110)
    style = {"drawn": ("tab:blue", "(a) canvas drawn so far"), "final": ("tab:red", "(b) final canvas"),
             "state": ("tab:gray", "final from the drawn canvas alone (no activations)")}
    for name, (colour, label) in style.items():
        sel = [r for r in pts if r["probe"] == name]
        ks = [r["boundary"] for r in sel]
        v = lambda x: np.nan if x is None else x  # noqa: E731 - undefined R^2 (constant target) is a gap
        ax.plot(ks, [v(r["r2"]) for r in sel], marker="o", color=colour, label=label, ls="--" if name == "state" else "-")
        ax.fill_between(ks, [v(r["ci"][0]) for r in sel], [v(r["ci"][1]) for r in sel], color=colour, alpha=0.15)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # layers are whole numbers: no 0.5 ticks
    ax.axhline(0, color="black", lw=0.5)
    ax.set_xlabel("statement boundary (0 = last prompt token; k = after statement k)")
    ax.set_ylabel("probe R^2 (best layer inside the folds)")
    ax.set_title(f"Plan or state: {model} ({task})", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    rd.save_figure(fig, f"{RunDir.TRAJECTORY_PLOTS}/{safe_name(model)}-{safe_name(task)}.png")
    plt.close(fig)


def verdict(rows: Sequence[dict[str, Any]]) -> str:
    """One sentence per model from the rows: does the final canvas lead what is drawn?"""
    pts = {(r["boundary"], r["probe"]): r for r in rows if r.get("kind") == "boundary" and "probe" in r}
    first = pts.get((0, "final"))
    if first is None or first["r2"] is None:
        return "too few attempts to probe the first boundary"
    gaps = [pts[(k, "final-state")] for k in sorted({k for k, p in pts if p == "final-state"})]
    lead = [g["boundary"] for g in gaps if g["lead"]]
    s = (f"the final canvas is decodable before any code with R^2 {first['r2']:.2f} "
         f"[{first['ci'][0]:.2f}, {first['ci'][1]:.2f}]; ")
    if lead:
        return s + f"the activations hold more of it than the code drawn so far at boundaries {lead} (a plan ahead of the state)"
    return s + (f"at no boundary do the activations hold more of it than the code drawn so far (the CI of final - state "
                f"never lies above {gaps[0]['lead_margin'] if gaps else 0.05})")


__all__ = ["TrajectorySettings", "trajectory_stage", "plan_attempts", "boundary_tokens", "capture_boundaries",
           "probe_boundaries", "verdict", "TRAJECTORY"]
