"""`ambench run --preset organisms`: the unchanged study on the model organisms, and whether each method recovered
the answer that was constructed into them (docs/organisms.md).

The preset (experiments/data/presets.json, `organisms`) holds settings shared by its parts and one part per
group of organisms that share a prompt set: each part is an ordinary study (`run_study`) on its organisms'
held-out prompt file, run into `OUT/<part>`. Nothing in the pipeline knows it runs on an organism: the
parts use the two settings any user has for their own prompts (`prompt_files`, `references`).

`known_answers(OUT)` then reads the parts' result rows (never the organisms' training records) and states,
per organism and method, the expected answer, the measured value with its CI, and whether it was recovered;
`OUT/known_answers.json` and `OUT/known_answers.md` hold them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from experiments.rundir import RunDir, reading


def parts_of(preset: str) -> dict[str, dict[str, Any]] | None:
    """The parts of a preset that runs several studies, with the shared settings merged in; None for a plain preset."""
    from experiments.study import PRESETS

    spec = PRESETS.get(preset, {})
    if "parts" not in spec:
        return None
    shared = {k: v for k, v in spec.items() if k != "parts" and not k.startswith("_")}
    return {name: {**shared, **part} for name, part in spec["parts"].items()}


def part_config(preset: str, name: str, overrides: dict[str, Any] | None = None) -> Any:
    """The StudyConfig of part `name` of `preset` (recorded as preset `preset/name`)."""
    from experiments.study import StudyConfig

    values = {**parts_of(preset)[name], **{k: v for k, v in (overrides or {}).items() if v is not None}}
    c = StudyConfig.from_preset("quick", **values)
    return StudyConfig.from_dict({**c.as_dict(), "preset": f"{preset}/{name}"})


def run_parts(preset: str, out: Path, overrides: dict[str, Any], say: Callable[[str], None] = print,
              clock: Any = None) -> dict[str, Any]:
    """Every part of `preset` as a study in `out/<part>` (each resumable), then the known-answer table; `clock`
    (a StageTimes) collects each part's stage times, named `<part>/<stage>`."""
    from experiments.study import run_study
    from experiments.study.timing import StageTimes

    clock = clock if clock is not None else StageTimes()

    parts = parts_of(preset)
    if parts is None:
        raise ValueError(f"preset {preset!r} is a single study")
    if overrides.get("models"):
        raise ValueError(f"preset {preset!r} names its own models per part; drop --model")
    summary: dict[str, Any] = {}
    for name in parts:
        c = part_config(preset, name, overrides)
        say(f"[{preset}] part {name}: {', '.join(c.models)}")
        clock.prefix = f"{name}/"
        summary[name] = run_study(c, Path(out) / name, None, say, clock)
    clock.prefix = ""
    rows = known_answers(out)
    summary["known_answers"] = [{k: r[k] for k in ("organism", "method", "recovered")} for r in rows]
    return summary


# --------------------------------------------------------------------------- reading the parts' rows


def _probe(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def _short(model: str) -> str:
    return model.split(":", 1)[1].split("@")[0] if model.startswith("organism:") else model


def _fmt_ci(ci: Any) -> str:
    return "[" + ", ".join("-" if x is None else f"{x:.3f}" for x in ci) + "]" if ci else "[-]"


def _row(organism: str, method: str, expected: str, measured: str, recovered: bool | None, values: dict[str, Any]) -> dict[str, Any]:
    verdict = {True: "recovered", False: "NOT recovered", None: "not measured"}[recovered]
    return {"organism": organism, "method": method, "expected": expected, "measured": measured, "recovered": recovered,
            "values": values, "sentence": f"{organism}, {method}: {verdict} (expected {expected}; measured {measured})."}


def _translator(run: Path) -> list[dict[str, Any]]:
    out = []
    rd = reading(run)
    scores = [r for r in rd.rows(RunDir.TRANSLATION_SCORES) if r.get("sample") == 0]
    if scores:
        med = float(np.median([r["piou"] for r in scores]))
        out.append(_row("translator", "translation PIoU (greedy, held-out)", "median >= 0.9", f"median {med:.3f} over {len(scores)}",
                        med >= 0.9, {"piou_median": med, "n": len(scores)}))
    else:
        out.append(_row("translator", "translation PIoU (greedy, held-out)", "median >= 0.9", "no scores", None, {}))
    probes = rd.rows(RunDir.PROBES)
    layers = [r for r in _probe(probes, task="translation", target="own", features="resid", position="last")
              if isinstance(r.get("layer"), int)]
    if layers:
        r2 = [r["r2"] if r["r2"] is not None else float("nan") for r in sorted(layers, key=lambda r: r["layer"])]
        top = int(np.nanargmax(r2))
        ok = r2[top] >= 0.8 and r2[0] <= r2[top] - 0.3
        out.append(_row("translator", "occupancy probe at `last` by layer", "R^2 >= 0.8 at some layer, far less at layer 0",
                        f"R^2 by layer {[round(x, 3) for x in r2]} (best layer {top}, CI {_fmt_ci(layers[top]['ci'])})",
                        ok, {"r2_by_layer": r2, "best_layer": top, "best_ci": layers[top]["ci"]}))
    else:
        out.append(_row("translator", "occupancy probe at `last` by layer", "R^2 >= 0.8 at some layer", "no probe rows", None, {}))
    return out


def _planners(run: Path) -> list[dict[str, Any]]:
    out = []
    probes = reading(run).rows(RunDir.PROBES)
    models = sorted({r["model"] for r in probes if r.get("task") == "layout" and r.get("features") == "delta"})
    xor = [m for m in models if "xor-planner" in m]
    for m in models:
        name = _short(m)
        d = _probe(probes, model=m, task="layout", target="own", features="delta", position="last")
        if not d:
            out.append(_row(name, "Delta R^2 (own, `last`)", "-", "no delta row", None, {}))
            continue
        d = d[0]
        lo = d["delta_ci"][0] if d.get("delta_ci") else None
        q = d.get("q_bh")
        measured = (f"Delta {d['delta_r2']:.3f} CI {_fmt_ci(d['delta_ci'])} q {q} (resid {d['r2_resid']:.3f}, "
                    f"text {d['r2_text']:.3f})")
        vals = {"delta_r2": d["delta_r2"], "delta_ci": d["delta_ci"], "q_bh": q, "r2_resid": d["r2_resid"], "r2_text": d["r2_text"]}
        if m in xor:
            out.append(_row(name, "TF-IDF text baseline", "R^2 near 0 (< 0.1)", f"R^2 {d['r2_text']:.3f}",
                            d["r2_text"] is not None and d["r2_text"] < 0.1, {"r2_text": d["r2_text"]}))
            out.append(_row(name, "Delta R^2 (own, `last`)", "> 0 with CI excluding 0 and q < 0.01", measured,
                            bool(d["delta_r2"] and d["delta_r2"] > 0 and lo is not None and lo > 0 and q is not None and q < 0.01),
                            vals))
            for other in xor:
                if other == m:
                    continue
                best_own = _probe(probes, model=m, task="layout", target="own", features="resid", position="last", layer="best")
                best_other = _probe(probes, model=m, task="layout", target=f"model:{other}", features="resid", position="last",
                                    layer="best")
                if best_own and best_other:
                    a, b = best_own[0]["r2"], best_other[0]["r2"]
                    out.append(_row(name, f"cross-model selectivity vs {_short(other)}", "own R^2 - other's R^2 > 0 (other's ~0)",
                                    f"own {a:.3f} {_fmt_ci(best_own[0]['ci'])}, {_short(other)}'s {b:.3f} {_fmt_ci(best_other[0]['ci'])}",
                                    a - b > 0.3 and best_own[0]["ci"][0] > best_other[0]["ci"][1],
                                    {"own": a, "other": b, "own_ci": best_own[0]["ci"], "other_ci": best_other[0]["ci"]}))
            spec = _probe(probes, model=m, task="layout", target="specific", features="resid", position="last", layer="best")
            if spec:
                s = spec[0]
                out.append(_row(name, "specific component (own - shared) at `last`", "decodable: R^2 > 0 with CI excluding 0",
                                f"R^2 {s['r2']:.3f} CI {_fmt_ci(s['ci'])}", bool(s["ci"] and s["ci"][0] is not None and s["ci"][0] > 0),
                                {"r2": s["r2"], "ci": s["ci"]}))
        else:
            out.append(_row(name, "Delta R^2 (own, `last`)", "nothing beyond chance: q >= 0.05", measured,
                            q is None or q >= 0.05, vals))
    return out


def _trackers(run: Path) -> list[dict[str, Any]]:
    out = []
    table = reading(run).json(RunDir.INTERVENTIONS_TABLE) or {}
    arms = [r for r in table.get("arms", []) if r.get("task") == "layout"]
    by = {(_short(r["model"]), r["arm"]): r for r in arms}
    for name in ("tracker", "fixed-plan"):
        mu, mused = by.get((name, "moved-unused")), by.get((name, "moved-used"))
        if not mu or mu.get("delta_vs_asis") is None:
            out.append(_row(name, "interventions", "-", "no intervention rows", None, {}))
            continue
        line = ", ".join(f"{arm} {by[(name, arm)]['delta_vs_asis']:+.3f} {_fmt_ci(by[(name, arm)].get('delta_ci'))}"
                         for arm in ("moved-unused", "moved-used", "null-empty") if (name, arm) in by
                         and by[(name, arm)].get("delta_vs_asis") is not None)
        vals = {arm: {k: by[(name, arm)].get(k) for k in ("rate", "rate_ci", "delta_vs_asis", "delta_ci", "q_bh", "paired_cuts")}
                for arm in ("null-asis", "moved-unused", "moved-used", "null-empty") if (name, arm) in by}
        if name == "tracker":
            lo = (mu.get("delta_ci") or [None])[0]
            ok = mu["delta_vs_asis"] >= 0.3 and lo is not None and lo > 0
            out.append(_row(name, "moved-unused - null-asis (continued drawing)", ">= +0.3 with CI excluding 0",
                            f"Delta vs null-asis: {line}", ok, vals))
            if mused:
                out.append(_row(name, "dose-response (moved-unused > moved-used)", "moved-unused rate > moved-used rate",
                                f"moved-unused {mu['rate']:.3f} {_fmt_ci(mu.get('rate_ci'))}, moved-used {mused['rate']:.3f} "
                                f"{_fmt_ci(mused.get('rate_ci'))}", mu["rate"] > mused["rate"], vals))
        else:
            moved = [by[(name, a)] for a in ("moved-unused", "moved-used") if (name, a) in by]
            ok = all(r.get("delta_ci") and r["delta_ci"][0] is not None and r["delta_ci"][0] <= 0 <= r["delta_ci"][1] for r in moved)
            out.append(_row(name, "moved arms - null-asis", "every moved-arm Delta CI includes 0", f"Delta vs null-asis: {line}",
                            ok, vals))
    patch = [r for r in table.get("patching", []) if r.get("task") == "layout"]
    for name in ("tracker", "fixed-plan"):
        rows = [r for r in patch if _short(r["model"]) == name]
        if not rows:
            continue
        prof = {d: {r["layer"]: round(r["rate"], 3) for r in rows if r["direction"] == d} for d in sorted({r["direction"] for r in rows})}
        asis = by.get((name, "null-asis"), {}).get("rate")
        moved = by.get((name, "moved-unused"), {}).get("rate")
        shift = None
        if asis is not None:
            # moved->asis: the as-is run given the moved statement's activations; a layer that carries the
            # geometric state moves the rate from null-asis's towards moved-unused's
            shift = max((abs(r - asis) for r in prof.get("moved->asis", {}).values()), default=None)
        expected = "moves the rate at some layers" if name == "tracker" else "moves nothing"
        ok = None if shift is None else (shift >= 0.3 if name == "tracker" else shift <= 0.15)
        out.append(_row(name, "activation patching at the spliced statement (layer profile)", expected,
                        f"continued-drawing rate by layer {prof} (null-asis {asis}, moved-unused {moved})", ok,
                        {"profile": prof, "null_asis": asis, "moved_unused": moved, "max_shift": shift}))
    return out


CHECKS: dict[str, Callable[[Path], list[dict[str, Any]]]] = {"translator": _translator, "planners": _planners, "tracker": _trackers}


#: what each built-in organism constructs (the rule its verdicts follow), by its short name
_KIND = {"translator": "stated-geometry", "xor-planner": "hidden-plan", "xor-planner-b": "hidden-plan",
         "random-planner": "no-plan", "tracker": "state-tracking", "fixed-plan": "fixed-plan"}


def verdicts(run: Path) -> list[dict[str, Any]]:
    """The known-answer rows of one run of the organisms preset (a part, by its folder name), each with the kind of
    answer its organism constructs; empty for any other run. Read only: nothing is written."""
    check = CHECKS.get(Path(run).name)
    return [dict(r, kind=_KIND.get(r["organism"], "")) for r in check(Path(run))] if check else []


def known_answers(out: Path) -> list[dict[str, Any]]:
    """One row per organism and method from the parts' result files (a part not run yet is left out)."""
    out = Path(out)
    rows: list[dict[str, Any]] = []
    for part, check in CHECKS.items():
        if (out / part / RunDir.CONFIG).is_file():
            rows += check(out / part)
    out.mkdir(parents=True, exist_ok=True)
    # beside the parts' run directories, not in one: a summary over several runs, rewritten from their rows
    (out / "known_answers.json").write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (out / "known_answers.md").write_text("# Known answers: did each method recover what was built into the organisms?\n\n"
                                          + "\n".join(f"- {r['sentence']}" for r in rows) + "\n", encoding="utf-8")
    return rows


__all__ = ["CHECKS", "known_answers", "verdicts", "part_config", "parts_of", "run_parts"]
