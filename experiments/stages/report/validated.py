"""The methods, validated: the organisms' known-answer verdicts, with their probe plots and patching profile."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.rundir import RunDir, reading, safe_name
from experiments.stages.report.blocks import Answer, Block, delta_note, figure


#: the kinds of known answer a probe checks (their runs' per-layer R^2 plots go beside the verdicts); the others
#: are checked by interventions and patching (their runs' patching profile goes beside them)
PROBE_KINDS = ("stated-geometry", "hidden-plan", "no-plan")


def is_run(path: Path) -> bool:
    """A run directory: it has the settings record or attempts."""
    return (Path(path) / RunDir.CONFIG).is_file() or (Path(path) / RunDir.GENERATIONS).is_file()


def organism_runs(path: Path) -> list[Path]:
    """The run directories of `path`: itself when it is one, else the runs in it (the organisms preset's parts)."""
    path = Path(path)
    if is_run(path):
        return [path]
    return sorted(p for p in path.iterdir() if is_run(p)) if path.is_dir() else []


def validation_rows(run: Path) -> list[dict[str, Any]]:
    """The known-answer verdicts of one run (`experiments.verdicts.verdicts`): empty for a run whose models
    declare no constructed answer (any real model)."""
    from experiments.verdicts import verdicts

    return verdicts(run)


def _short(model: str) -> str:
    """An organism's name as verdict rows give it (`organism:NAME@SEED` -> NAME; a folder -> its name)."""
    return model.split(":", 1)[1].split("@")[0] if model.startswith("organism:") else Path(model).name or model


_VERDICT = {True: ("yes", "recovered"), False: ("NO", "not-recovered"), None: ("not measured", "")}


def methods_validated(groups: list[tuple[Path, list[dict[str, Any]]]]) -> tuple[dict[str, Any] | None, list[Answer]]:
    """The section of verdicts, one group per organism run, with its probe plots and patching profile beside it."""
    groups = [(run, rows) for run, rows in groups if rows]
    if not groups:
        return None, []
    out = []
    for run, rows in groups:
        probed = {r["organism"] for r in rows if r.get("kind") in PROBE_KINDS}
        figures: list[Block | None] = []
        models = sorted({r["model"] for r in reading(run).rows(RunDir.PROBES) if r.get("features") == "resid"})
        for m in (m for m in models if _short(m) in probed):
            for task in ("layout", "translation"):
                figures.append(figure(run / RunDir.PROBE_PLOTS / f"{safe_name(m)}-{task}.png",
                                      f"{_short(m)}: per-layer R² of the occupancy probe ({task}), text baseline dashed"))
        if any("patching" in r["method"] for r in rows):
            figures.append(figure(run / "patching-layout.png",
                                  f"{run.name}: activation patching profile (continued drawing by patched layer)"))
        table_rows = [{**r, "verdict": _VERDICT[r["recovered"]][0], "css": _VERDICT[r["recovered"]][1]} for r in rows]
        big = [r["values"] for r in rows if isinstance(r.get("values"), dict) and (r["values"].get("delta_r2") or 0) > 1]
        notes = [n["text"] for n in [delta_note(big)] if n]
        out.append({"title": f"{run.name} ({', '.join(sorted({r['organism'] for r in rows}))})", "rows": table_rows,
                    "figures": [f for f in figures if f], "notes": notes})
    rows = [r for _, rs in groups for r in rs]
    yes = [r for r in rows if r["recovered"] is True]
    no = [r for r in rows if r["recovered"] is False]
    unmeasured = [r for r in rows if r["recovered"] is None]
    missed = "; ".join(f"{r['organism']}, {r['method']}" for r in no)
    answer = (f"{len(yes)} of {len(rows)} checks recovered the answer constructed into the organism"
              + (f"; NOT recovered: {missed}" if no else "")
              + (f"; {len(unmeasured)} not measured (no rows for them)" if unmeasured else "")
              + ". Every verdict is computed from the organism runs' result rows, with thresholds that can fail.")
    intro = ("Small models trained here with a constructed plan (docs/organisms.md): each method below must recover what was "
             "built into them before its number on a real model means anything. The verdicts are computed from the runs' "
             "rows by experiments.organisms (the same code as known_answers.md); measured values with their 95% CIs.")
    return ({"intro": intro, "groups": out},
            [{"q": "Do the methods recover answers built into model organisms? (the methods, validated)", "a": answer}])
