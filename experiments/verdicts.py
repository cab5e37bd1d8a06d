"""Known-answer verdicts: whether each method recovered the answer an organism was built with, from a run's rows.

What a model declares it constructs (`KINDS`; `declared`: the zoo for `organism:NAME`, `known_answer` in a
folder's training.json for a user's own organism) picks the verdict rule, never the model's name.
`verdicts(RUN)` reads one run's result rows (never the organisms' training results); `known_answers(OUT)` does
it for every run under OUT and writes `OUT/known_answers.json` and `.md`. A rule whose statistic is missing (no
permutations, no rows) says "not measured", never "recovered".

Its own module, below both the study and the report: the report shows these verdicts and the organisms preset
(experiments/organisms.py) runs studies, so with the verdicts inside experiments/organisms.py the report stage
imported the study back (organisms -> study -> finish -> stages.report -> organisms, an import circle).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from experiments.rundir import RunDir, reading


# --------------------------------------------------------------------------- what each organism declares

#: The known answers a model can declare it constructs, and the verdict rule each one gets. An organism declares
#: its kind (interp/organisms/zoo.py for the built-in ones; `known_answer` in a folder's training.json for one a
#: user trained with `train_organism`); the rule follows the declaration, never the model's name.
KINDS = {
    "stated-geometry": "the prompt states the geometry: held-out PIoU ~1, occupancy decodable from some layer",
    "hidden-plan": "a plan no linear read of the prompt's words gives: TF-IDF R^2 ~0, Delta R^2 > 0 (CI excludes 0, "
                   "q < 0.01), selective against other hidden-plan models, a decodable specific component",
    "no-plan": "nothing to find: Delta R^2 not significant (q >= 0.05) on a target that holds no prompt-determined decision",
    "state-tracking": "the next statement depends on the geometry already drawn: moved-unused continues more than "
                      "null-asis and than moved-used; patching moves the rate",
    "fixed-plan": "the next statement ignores the geometry already drawn: moved arms continue as null-asis; patching "
                  "moves nothing",
    "readable-unused": "a plan readable at the last prompt token that the drawing does not read: interchange and "
                       "erasure there change the announced line, not the drawing (interp.causal.causal_test and "
                       "causal_site with the announced layout as the target, tests/interp/test_causal.py; the study's "
                       "probe reads the drawn layout, which this organism does not hold there)",
}


def declared(model: str, run: Path | None = None) -> dict[str, Any] | None:
    """What `model` declares it constructs ({"kind": one of KINDS, ...}), or None for a model that declares nothing
    (any real model). `organism:NAME` reads the zoo; a folder reads `known_answer` in its training.json (relative
    paths are tried from the working directory and from the run's parent, where the study was started)."""
    from interp.organisms import PREFIX, record

    if model.startswith(PREFIX):
        from interp.organisms import parse
        from interp.organisms.zoo import ORGANISMS

        name, _ = parse(model)
        org = ORGANISMS.get(name)
        return {"kind": org.constructs, "statement": org.known_answer} if org else None
    for base in [Path.cwd()] + ([Path(run).resolve().parent] if run is not None else []):
        folder = base / model
        if folder.is_dir():
            rec = record(folder) or {}
            ka = rec.get("known_answer")
            if isinstance(ka, dict) and ka.get("kind") in KINDS:
                return ka
            return None
    return None


# --------------------------------------------------------------------------- verdicts from a run's rows


def _probe(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def _short(model: str) -> str:
    return model.split(":", 1)[1].split("@")[0] if model.startswith("organism:") else Path(model).name or model


def _fmt_ci(ci: Any) -> str:
    return "[" + ", ".join("-" if x is None else f"{x:.3f}" for x in ci) + "]" if ci else "[-]"


def _row(organism: str, method: str, expected: str, measured: str, recovered: bool | None, values: dict[str, Any],
         kind: str = "") -> dict[str, Any]:
    verdict = {True: "recovered", False: "NOT recovered", None: "not measured"}[recovered]
    return {"organism": organism, "kind": kind, "method": method, "expected": expected, "measured": measured,
            "recovered": recovered, "values": values,
            "sentence": f"{organism}, {method}: {verdict} (expected {expected}; measured {measured})."}


def _lo(ci: Any) -> float | None:
    return ci[0] if ci and ci[0] is not None else None


def _stated_geometry(ctx: "_Run", m: str) -> list[dict[str, Any]]:
    name, out = _short(m), []
    scores = [r for r in ctx.scores if r.get("sample") == 0 and r.get("model") == m]
    if scores:
        med = float(np.median([r["piou"] for r in scores]))
        out.append(_row(name, "translation PIoU (greedy, held-out)", "median >= 0.9", f"median {med:.3f} over {len(scores)}",
                        med >= 0.9, {"piou_median": med, "n": len(scores)}))
    else:
        out.append(_row(name, "translation PIoU (greedy, held-out)", "median >= 0.9", "no scores", None, {}))
    layers = [r for r in _probe(ctx.probes, model=m, task="translation", target="own", features="resid", position="last")
              if isinstance(r.get("layer"), int)]
    if layers:
        layers.sort(key=lambda r: r["layer"])
        r2 = [r["r2"] if r["r2"] is not None else float("nan") for r in layers]
        top = int(np.nanargmax(np.round(r2, 6)))  # the first of equal values, not the last bits
        ok = r2[top] >= 0.8 and r2[0] <= r2[top] - 0.3
        out.append(_row(name, "occupancy probe at `last` by layer", "R^2 >= 0.8 at some layer, far less at layer 0",
                        f"R^2 by layer {[round(x, 3) for x in r2]} (best layer {top}, CI {_fmt_ci(layers[top]['ci'])})",
                        ok, {"r2_by_layer": r2, "best_layer": top, "best_ci": layers[top]["ci"]}))
    else:
        out.append(_row(name, "occupancy probe at `last` by layer", "R^2 >= 0.8 at some layer", "no probe rows", None, {}))
    return out


def _delta_row(ctx: "_Run", m: str) -> dict[str, Any] | None:
    d = _probe(ctx.probes, model=m, task="layout", target="own", features="delta", position="last")
    return d[0] if d else None


def _delta_values(d: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    q = d.get("q_bh")
    measured = (f"Delta {d['delta_r2']:.3f} CI {_fmt_ci(d.get('delta_ci'))} q {q} (resid {d['r2_resid']:.3f}, "
                f"text {d['r2_text']:.3f}; target: {d.get('target_attempts', 'all')} attempts)")
    vals = {k: d.get(k) for k in ("delta_r2", "delta_ci", "q_bh", "p_perm", "r2_resid", "r2_text", "target_attempts")}
    return measured, vals


def _hidden_plan(ctx: "_Run", m: str) -> list[dict[str, Any]]:
    name, out = _short(m), []
    d = _delta_row(ctx, m)
    if d is None:
        return [_row(name, "Delta R^2 (own, `last`)", "-", "no delta row", None, {})] + _causal(ctx, m, True)
    measured, vals = _delta_values(d)
    q = d.get("q_bh")
    out.append(_row(name, "TF-IDF text baseline", "R^2 near 0 (< 0.1)", f"R^2 {d['r2_text']:.3f}",
                    None if d["r2_text"] is None else d["r2_text"] < 0.1, {"r2_text": d["r2_text"]}))
    lo = _lo(d.get("delta_ci"))
    ok = None if q is None or lo is None or d["delta_r2"] is None else (d["delta_r2"] > 0 and lo > 0 and q < 0.01)
    out.append(_row(name, "Delta R^2 (own, `last`)", "> 0 with CI excluding 0 and q < 0.01", measured, ok, vals))
    for other in ctx.of_kind("hidden-plan"):
        if other == m:
            continue
        best_own = _probe(ctx.probes, model=m, task="layout", target="own", features="resid", position="last", layer="best")
        best_other = _probe(ctx.probes, model=m, task="layout", target=f"model:{other}", features="resid", position="last",
                            layer="best")
        if best_own and best_other:
            a, b = best_own[0], best_other[0]
            ok = None if a["r2"] is None or b["r2"] is None or _lo(a["ci"]) is None or not b["ci"] or b["ci"][1] is None \
                else a["r2"] - b["r2"] > 0.3 and a["ci"][0] > b["ci"][1]
            out.append(_row(name, f"cross-model selectivity vs {_short(other)}", "own R^2 - other's R^2 > 0 (other's ~0)",
                            f"own {a['r2']:.3f} {_fmt_ci(a['ci'])}, {_short(other)}'s {b['r2']:.3f} {_fmt_ci(b['ci'])}",
                            ok, {"own": a["r2"], "other": b["r2"], "own_ci": a["ci"], "other_ci": b["ci"]}))
    spec = _probe(ctx.probes, model=m, task="layout", target="specific", features="resid", position="last", layer="best")
    if spec:
        s = spec[0]
        out.append(_row(name, "specific component (own - shared) at `last`", "decodable: R^2 > 0 with CI excluding 0",
                        f"R^2 {s['r2']:.3f} CI {_fmt_ci(s['ci'])}", None if _lo(s["ci"]) is None else _lo(s["ci"]) > 0,
                        {"r2": s["r2"], "ci": s["ci"]}))
    return out + _causal(ctx, m, True)


def _no_plan(ctx: "_Run", m: str) -> list[dict[str, Any]]:
    name = _short(m)
    d = _delta_row(ctx, m)
    if d is None:
        return [_row(name, "Delta R^2 (own, `last`)", "-", "no delta row", None, {})] + _causal(ctx, m, False)
    measured, vals = _delta_values(d)
    q = d.get("q_bh")
    # a missing q (no permutations: --n-perm 0) is no test, so it cannot pass as "not significant"
    return [_row(name, "Delta R^2 (own, `last`)", "nothing beyond chance: q >= 0.05", measured,
                 None if q is None else q >= 0.05, vals)] + _causal(ctx, m, False)


def _arms(ctx: "_Run", m: str) -> dict[str, dict[str, Any]]:
    return {r["arm"]: r for r in ctx.table.get("arms", []) if r.get("task") == "layout" and r.get("model") == m}


def _arm_line(by: dict[str, dict[str, Any]]) -> str:
    return ", ".join(f"{arm} {by[arm]['delta_vs_asis']:+.3f} {_fmt_ci(by[arm].get('delta_ci'))}"
                     for arm in ("moved-unused", "moved-used", "null-empty") if arm in by and by[arm].get("delta_vs_asis") is not None)


def _patching(ctx: "_Run", m: str, tracking: bool, by: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = [r for r in ctx.table.get("patching", []) if r.get("task") == "layout" and r.get("model") == m]
    if not rows:
        return []
    prof = {d: {r["layer"]: round(r["rate"], 3) for r in rows if r["direction"] == d} for d in sorted({r["direction"] for r in rows})}
    asis = by.get("null-asis", {}).get("rate")
    moved = by.get("moved-unused", {}).get("rate")
    # moved->asis: the as-is run given the moved statement's activations; a layer that carries the geometric state
    # moves the rate from null-asis's towards moved-unused's
    shift = None if asis is None else max((abs(r - asis) for r in prof.get("moved->asis", {}).values()), default=None)
    ok = None if shift is None else (shift >= 0.3 if tracking else shift <= 0.15)
    return [_row(_short(m), "activation patching at the spliced statement (layer profile)",
                 "moves the rate at some layers" if tracking else "moves nothing",
                 f"continued-drawing rate by layer {prof} (null-asis {asis}, moved-unused {moved})", ok,
                 {"profile": prof, "null_asis": asis, "moved_unused": moved, "max_shift": shift})]


def _state_tracking(ctx: "_Run", m: str) -> list[dict[str, Any]]:
    name, by = _short(m), _arms(ctx, m)
    mu, mused = by.get("moved-unused"), by.get("moved-used")
    if not mu or mu.get("delta_vs_asis") is None:
        return [_row(name, "interventions", "-", "no intervention rows", None, {})]
    vals = {arm: {k: by[arm].get(k) for k in ("rate", "rate_ci", "delta_vs_asis", "delta_ci", "q_bh", "paired_cuts")}
            for arm in ("null-asis", "moved-unused", "moved-used", "null-empty") if arm in by}
    lo = _lo(mu.get("delta_ci"))
    out = [_row(name, "moved-unused - null-asis (continued drawing)", ">= +0.3 with CI excluding 0",
                f"Delta vs null-asis: {_arm_line(by)}", None if lo is None else mu["delta_vs_asis"] >= 0.3 and lo > 0, vals)]
    if mused:
        out.append(_row(name, "dose-response (moved-unused > moved-used)", "moved-unused rate > moved-used rate",
                        f"moved-unused {mu['rate']:.3f} {_fmt_ci(mu.get('rate_ci'))}, moved-used {mused['rate']:.3f} "
                        f"{_fmt_ci(mused.get('rate_ci'))}", mu["rate"] > mused["rate"], vals))
    return out + _patching(ctx, m, True, by)


def _fixed_plan(ctx: "_Run", m: str) -> list[dict[str, Any]]:
    name, by = _short(m), _arms(ctx, m)
    if not by.get("moved-unused") or by["moved-unused"].get("delta_vs_asis") is None:
        return [_row(name, "interventions", "-", "no intervention rows", None, {})]
    vals = {arm: {k: by[arm].get(k) for k in ("rate", "rate_ci", "delta_vs_asis", "delta_ci", "q_bh", "paired_cuts")}
            for arm in ("null-asis", "moved-unused", "moved-used", "null-empty") if arm in by}
    moved = [by[a] for a in ("moved-unused", "moved-used") if a in by]
    cis = [r.get("delta_ci") for r in moved]
    ok = None if any(not c or None in c for c in cis) else all(c[0] <= 0 <= c[1] for c in cis)
    return [_row(name, "moved arms - null-asis", "every moved-arm Delta CI includes 0", f"Delta vs null-asis: {_arm_line(by)}",
                 ok, vals)] + _patching(ctx, m, False, by)


def _causal(ctx: "_Run", m: str, expect_used: bool) -> list[dict[str, Any]]:
    """The causal stage's row (experiments/stages/causal.py): a hidden plan the drawing follows must come out "used";
    a model with nothing to use must not (not readable, or readable and not shown to be used)."""
    from experiments.stages.causal import verdict

    method = "causal test at the best layout-probe site (interchange along the concept)"
    expected = "used (interchange p <= 0.05, interval above 0)" if expect_used else "not used (not readable, or not shown)"
    row = next((r for r in ctx.causal if r.get("model") == m and r.get("task") == "layout"), None)
    if row is None:
        if not ctx.asks_causal:  # a run whose study did not ask for the stage (or made before it existed)
            return []
        return [_row(_short(m), method, expected, "not computed: the causal stage did not run", None, {})]
    outcome = row.get("outcome")
    ok = None if outcome == "no-test" else (outcome == "used") == expect_used
    ic = (row.get("methods") or {}).get("interchange") or {}
    return [_row(_short(m), method, expected, verdict(row), ok,
                 {"outcome": outcome, "site": row.get("site"), **{k: ic.get(k) for k in ("effect", "effect_lo",
                                                                                          "effect_hi", "p", "n")}})]


def _readable_unused(ctx: "_Run", m: str) -> list[dict[str, Any]]:
    """The decoy's announced layout is readable at the last token; what it draws is not (the drawing computes its own
    plan later): the study's probe reads the drawn layout, so the study cannot test this known answer, and a run says
    so rather than borrowing another test's words (tests/interp/test_causal.py checks it with the announced layout)."""
    return [_row(_short(m), "interchange and erasure at `last`", "the drawing unchanged, the line moved",
                 "not computed by the study: its probe reads the drawn layout, not the announced one "
                 "(interp.causal.causal_site with the announced layout as the target does, in the tests)", None, {})]


RULES: dict[str, Callable[["_Run", str], list[dict[str, Any]]]] = {
    "stated-geometry": _stated_geometry, "hidden-plan": _hidden_plan, "no-plan": _no_plan,
    "state-tracking": _state_tracking, "fixed-plan": _fixed_plan, "readable-unused": _readable_unused}


class _Run:
    """The rows of one run that verdicts read, and what each of its models declares."""

    def __init__(self, run: Path, declarations: dict[str, dict[str, Any] | None] | None = None) -> None:
        rd = reading(run)
        self.probes = rd.rows(RunDir.PROBES)
        self.scores = rd.rows(RunDir.TRANSLATION_SCORES)
        self.table = rd.json(RunDir.INTERVENTIONS_TABLE) or {}
        self.causal = rd.rows(RunDir.CAUSAL)
        study = ((rd.config().get("stages") or {}).get("study") or {}).get("config") or {}
        #: the run's study asked for the causal stage (its rows are then expected; else the rule has none to read)
        self.asks_causal = bool(self.causal) or study.get("causal", "off") != "off"
        models = sorted({r["model"] for r in rd.rows(RunDir.GENERATIONS)})
        self.declared = {m: (declarations or {}).get(m) or declared(m, run) for m in models}

    def of_kind(self, kind: str) -> list[str]:
        return [m for m, d in self.declared.items() if d and d.get("kind") == kind]


def verdicts(run: Path, declarations: dict[str, dict[str, Any] | None] | None = None) -> list[dict[str, Any]]:
    """One row per model that declares a known answer and per method of its kind's rule, from the run's rows;
    `declarations` (model -> {"kind": ...}) overrides what the models declare."""
    ctx = _Run(Path(run), declarations)
    rows: list[dict[str, Any]] = []
    for m, d in ctx.declared.items():
        if d:
            rows += [dict(r, kind=d["kind"]) for r in RULES[d["kind"]](ctx, m)]
    return rows


def known_answers(out: Path) -> list[dict[str, Any]]:
    """The verdicts of every run under `out` (the organisms preset's parts, a part not run yet left out) or of `out`
    itself when it is one run; written to `out/known_answers.json` and `.md`."""
    out = Path(out)

    def is_run(p: Path) -> bool:
        return (p / RunDir.CONFIG).is_file() or (p / RunDir.GENERATIONS).is_file()

    runs = [out] if is_run(out) else sorted(p for p in out.iterdir() if is_run(p)) if out.is_dir() else []
    rows: list[dict[str, Any]] = []
    for run in runs:
        rows += verdicts(run)
    out.mkdir(parents=True, exist_ok=True)
    # beside the parts' run directories, not in one: a summary over several runs, rewritten from their rows
    (out / "known_answers.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (out / "known_answers.md").write_text("# Known answers: did each method recover what was built into the organisms?\n\n"
                                          + "\n".join(f"- {r['sentence']}" for r in rows) + "\n", encoding="utf-8")
    return rows


__all__ = ["KINDS", "RULES", "declared", "known_answers", "verdicts"]
