"""The page: every run's sections in one ordered list, the summary, the table of contents, and the written files."""

from __future__ import annotations

import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from experiments.rundir import RunDir, reading, writing
from experiments.stages.report import (attention, causal, consistency, interventions, layout, media, mosaics, probes, selectivity,
                                       steering, tier_gaps, trajectory, translation)
from experiments.stages.report.blocks import Answer, Block, Section, table
from experiments.stages.report.validated import is_run, methods_validated, organism_runs, validation_rows


def paper_values() -> dict[str, Any]:
    return json.loads(resources.files("experiments").joinpath("data/paper.json").read_text(encoding="utf-8"))


def _config(run: RunDir, title: str) -> dict[str, Any] | None:
    cfg = run.json(RunDir.CONFIG) or {}
    study = cfg.get("stages", {}).get("study", {})
    if not study:
        return None
    rows = [{"setting": k, "value": v} for k, v in sorted(study.get("config", {}).items())]
    rows += [{"setting": f"version: {k}", "value": v} for k, v in sorted(study.get("versions", {}).items())]
    seen = set()
    for k, v in sorted(cfg.get("stages", {}).items()):
        m = v.get("model") if k.startswith("generate/") else None
        if m and m["name"] not in seen:
            seen.add(m["name"])
            rows.append({"setting": f"model: {m['name']}", "value": f"{m['architecture']}, {m['n_layers']} layers, d_model "
                         f"{m['d_model']}, {m['dtype']} on {m['device']}, weights {m['weights_digest']}"})
    return {"title": title, "table": table(rows, ["setting", "value"])}


#: the sections of a run's results, in the page's order: a new section is one module with `section(run, paper)` and one line here
SECTIONS: tuple[Section, ...] = (translation.section, layout.section, media.section, tier_gaps.section, probes.section,
                                 selectivity.section, causal.section, interventions.section, steering.section,
                                 attention.section, trajectory.section, consistency.section, mosaics.section)


def text_node(v: Any) -> Any:
    """A value escaped for element content: <, > and & (what can open markup there); quotes stay as they are,
    so "the prompt's words" reads the same in the HTML source. Attribute values keep Jinja2's full escaping."""
    import html

    from markupsafe import Markup

    return Markup(html.escape(str(v), quote=False))


def contents(runs: list[dict[str, Any]], validated: bool, config: bool) -> list[dict[str, Any]]:
    """The table of contents: the summary, the validated methods, each run and its sections (the level-1 headings of
    its blocks, which get their anchor ids here), the configuration. A page of 10,000 pixels needs one."""
    toc: list[dict[str, Any]] = [{"id": "summary", "text": "Summary", "children": []}]
    if validated:
        toc.append({"id": "validated", "text": "The methods, validated: known answers in model organisms", "children": []})
    for i, run in enumerate(runs, 1):
        children = []
        for j, b in enumerate(run["blocks"]):
            if b.get("kind") == "heading" and b.get("level") == 1:
                b["id"] = f"run-{i}-section-{j}"
                children.append({"id": b["id"], "text": b["text"]})
        toc.append({"id": f"run-{i}", "text": run["title"], "children": children})
    if config:
        toc.append({"id": "configuration", "text": "Configuration", "children": []})
    return toc


def render_page(paths: Sequence[Path]) -> str:
    """The report of `paths` (run directories, or folders of runs such as the organisms preset's output) as one
    HTML page. A folder of runs contributes its known-answer verdicts; a run contributes its results and, when its
    models declare a constructed answer, its verdicts too."""
    import jinja2

    paper = paper_values()
    summary: list[Answer] = []
    groups: list[tuple[Path, list[dict[str, Any]]]] = []
    runs: list[dict[str, Any]] = []
    config: list[dict[str, Any]] = []
    answers_by_run: list[tuple[str, list[Answer]]] = []
    for path in map(Path, paths):
        single = is_run(path)
        for run in organism_runs(path):
            groups.append((run, validation_rows(run)))
        if not single:
            continue
        rd = reading(path)
        models = sorted({r["model"] for r in rd.rows(RunDir.GENERATIONS)})
        blocks: list[Block] = []
        answers: list[Answer] = []
        for section in SECTIONS:
            b, a = section(rd, paper)
            blocks += [x for x in b if x]
            answers += a
        name = path.resolve().name
        runs.append({"title": f"Results: {', '.join(models) or 'no models yet'} (run {name})", "blocks": blocks})
        answers_by_run.append((name, answers))
        c = _config(rd, f"run {name}")
        if c:
            config.append(c)
    validated, v_answers = methods_validated(groups)
    summary += v_answers
    for name, answers in answers_by_run:
        summary += [{"q": a["q"] + (f" [run {name}]" if len(answers_by_run) > 1 else ""), "a": a["a"]} for a in answers]
    if not validated:
        summary.append({"q": "Do the methods recover answers built into model organisms? (the methods, validated)",
                        "a": "Not shown on this page: `ambench run --preset organisms --out ORG` validates every method on "
                             "model organisms, and `ambench report ORG RUN --out DIR` puts those verdicts beside this run."})
    toc = contents(runs, validated is not None, bool(config))
    env = jinja2.Environment(loader=jinja2.PackageLoader("experiments", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["text"] = text_node
    intro = ("The paper's questions and the answers of these runs. Each of the paper's tables below is reproduced from a run "
             f"with the paper's published values beside it for reference: {paper['source']}.")
    return env.get_template("report.html.j2").render(title="AM-Bench report", intro=intro, summary=summary,
                                                     validated=validated, runs=runs, config=config, toc=toc)


def write_report(run: Any) -> Path:
    """`RUN/report/index.html` for one run (under the run's lock)."""
    with writing(run) as rd:
        rd.write_text(RunDir.REPORT, render_page([rd.path]))
        return rd.file(RunDir.REPORT)


def write_combined(paths: Sequence[Path], out: Path) -> Path:
    """`out/index.html`: the report of several runs (`ambench report RUN... --out DIR`), written atomically; the
    runs are only read."""
    page = render_page(paths)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".index-", suffix=".html")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(page)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the page from a web server or another user
    os.replace(tmp, out / "index.html")
    return out / "index.html"
