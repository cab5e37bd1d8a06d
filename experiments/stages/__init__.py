"""The stages of a study, one module each, each with one frozen settings dataclass where it has settings.

Model-running stages (work units that `--shard i/n`, `ambench merge` and `--backend ray` handle alike):
`generate` (batches of attempts), `capture` (batches of prompts), `intervene` (cuts), `patch` (cuts x
layers), `steer` (prompts). Scoring and analysis stages read the run directory and rewrite their
files: `render`, `translation`, `layout`, `judge`, `probe`, `consistency`, `report`, `human`. Every stage reads and
writes only through `experiments.rundir.RunDir`.
"""
