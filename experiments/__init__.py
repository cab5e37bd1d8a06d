"""Experiments as pipelines over a run directory, and the `ambench` command line."""
