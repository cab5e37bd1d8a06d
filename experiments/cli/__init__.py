"""The `ambench` command line, split by theme; every command is a thin wrapper over a stage.

- `render`: one answer through the sandbox (experiments/cli/render.py)
- `translation ...`: references, prompts, scoring, null baseline (translation.py)
- `generate`, `capture`: the model-running commands over a prompt set (models.py)
- `layout ...`, `renders`: prompts, renders, tables, arm comparisons (layout.py)
- `judge`, `human ...`: VLM judges and the human kit (judges.py)
- `probe`, `intervene`, `patch`, `steer`: Exp. 3 and beyond (analysis.py)
- `consistency`: the DINO appendix analyses, concept consistency and the entropy confound (consistency.py)
- `run`, `merge`, `repair`: the whole study, shards, and the way out of a damaged run directory (study.py)
- `organism list|train`: the model organisms with known plans (organisms.py)
"""

from __future__ import annotations

# importing a theme registers its commands, in this order in `ambench --help`
from experiments.cli import render  # noqa: F401,I001
from experiments.cli import translation  # noqa: F401
from experiments.cli import models  # noqa: F401
from experiments.cli import layout  # noqa: F401
from experiments.cli import judges  # noqa: F401
from experiments.cli import analysis  # noqa: F401
from experiments.cli import consistency  # noqa: F401
from experiments.cli import study  # noqa: F401
from experiments.cli import organisms  # noqa: F401
from experiments.cli.common import app, fail

__all__ = ["app", "fail", "main"]


def main() -> None:  # pragma: no cover
    app()
