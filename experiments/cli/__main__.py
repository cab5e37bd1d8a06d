from experiments.cli import app

app()
