"""`RUN/report/index.html` and `ambench report RUN... --out DIR`: one self-contained page (every image inline)
that leads with the evidence.

Order: a table of contents (every section of every run links from it); the summary (the paper's questions, the runs' answers with CIs, one sentence each saying what the
numbers support, and how many of the methods recovered the answers built into the model organisms); then
"the methods, validated": per method, the organism, the constructed answer, the measured value with its CI
and whether it was recovered, computed from the organism runs' rows (`experiments.verdicts.verdicts`),
beside the organisms' per-layer R^2 plots and patching profile; then each real model's results: the
paper's tables reproduced from the run, each with the paper's published values beside it
(`experiments/data/paper.json`), where every table that could not be computed says in one line why and
which command or preset computes it (steering included: "not computed", why and the command, until a run has
steering rows); the mosaics; the configuration last. The page has no timestamps, so the same runs give the same
bytes.

Honest at small n (issue 30): every rate is shown with its n (prompts, cuts, continuations) and its prompt-clustered
95% CI, and where one prompt is all there is the cell says "n = 1, no interval" (a bootstrap of one prompt is a
point: "[0.333, 0.333]" read as certainty); figures are drawn 1,100 px wide and shown at full page width, so their
10-11 pt text reads at 14-15 px (the interventions figure was squeezed into half the page, text ~6 px).

The page is `experiments/templates/report.html.j2`, rendered by Jinja2 with autoescaping on: the
sections return data (headings, texts, tables of formatted cells, figures), never markup, so no
value from a run can become HTML. Numbers are shown to 3 significant digits (`experiments.numbers`).

The package: `blocks` (the page's building blocks); one module per section of a run's results, each a
`section(run, paper) -> (blocks, answers)`: `translation`, `layout`, `media`, `tier_gaps`, `probes`, `selectivity`,
`causal` (readable or used), `interventions` (with patching), `steering`, `attention`, `trajectory`, `consistency`,
`mosaics`; `validated` (the organisms' verdicts); and `page` (the one ordered list of sections, `render_page`, `write_report`, `write_combined`).
The statistics are the stages' code (the steering rows' bootstrap is `experiments.stages.steer.steering_table`): the
sections read the stages' tables, or call the stage's function on its rows, and format and draw what they get.
"""

from __future__ import annotations

from experiments.stages.report.blocks import delta_note, interval
from experiments.stages.report.interventions import _no_patching  # noqa: F401 - tests read it here
from experiments.stages.report.page import SECTIONS, contents, paper_values, render_page, write_combined, write_report
from experiments.stages.report.validated import is_run, organism_runs, validation_rows

__all__ = ["SECTIONS", "contents", "delta_note", "interval", "is_run", "organism_runs", "paper_values", "render_page",
           "validation_rows", "write_combined", "write_report"]
