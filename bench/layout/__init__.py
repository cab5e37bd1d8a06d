"""The layout task: the 150 underspecified prompts, validity and triviality, the judge rubric and backends."""
