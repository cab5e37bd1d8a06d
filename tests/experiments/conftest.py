import pytest


@pytest.fixture(scope="session")
def small_study(tmp_path_factory, tiny_folder):
    """One small finished study on the tiny model (`tests.experiments.runs.run_small_study`), which
    tests/experiments/test_refusals.py and test_finished_study.py read and copy and never write: built once for both
    (their modules share the xdist group "small-study", so one worker runs them), not once per module and worker
    (measured: 7.5 s each, four times in a suite on two workers)."""
    from tests.experiments.runs import run_small_study

    out = tmp_path_factory.mktemp("finished") / "run"
    run_small_study(tiny_folder, out)
    return out
