import os
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one of several pytest workers (`-n 2`, test.sh): each worker and every process it starts computes on one thread,
    # so that two workers on two cores do not spin against each other's thread pools (measured: a machine-loading
    # test beside another worker took 20x its time alone). Before numpy and torch load: they read these once. A test
    # that compares thread counts sets its own (threadpool_limits(2), torch.set_num_threads), which these do not cap.
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import sys  # noqa: E402

from hypothesis import settings  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    # numpy is already loaded when this file runs (a plugin imports it), so its OpenBLAS started with one thread per
    # core and read no variable: measured, 2 threads in each worker, whose spinning the other worker paid for. Capped now.
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)

settings.register_profile("ci", max_examples=150, deadline=None)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    from tests.interp.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny(tiny_folder):
    from interp.runtime import Runtime

    return Runtime.from_folder(tiny_folder, name="tiny")


# --------------------------------------------------------------------------- the fast lane (issue 29)
#: tests measured slow, one per line: a test (path::name, every parametrisation) or a whole file (path), then its
#: measured seconds (`pytest --durations=0`, setup included: a file whose module fixture builds a study is listed whole,
#: so the fast lane never builds it). They get the `slow` marker: `./test.sh -m "not slow"` leaves them out.
SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")


def _slow_entries() -> set[str]:
    lines = SLOW_TESTS.read_text(encoding="utf-8").splitlines() if SLOW_TESTS.exists() else []
    return {ln.split()[0] for ln in lines if ln.strip() and not ln.lstrip().startswith("#")}


def pytest_collection_modifyitems(config, items):
    slow = _slow_entries()
    for item in items:
        nodeid = item.nodeid.split("[")[0].split("@")[0]  # without an xdist group's suffix (below)
        if nodeid in slow or nodeid.split("::")[0] in slow:
            item.add_marker(pytest.mark.slow)
    _xdist_group_suffix(config, items)


def _xdist_group_suffix(config, items) -> None:
    """`--dist loadgroup` keeps the tests of one `xdist_group` on one worker by the suffix `@group` that pytest-xdist
    adds to their node ids on each worker; pytest-xdist 3.8 writes it to `item._nodeid`, which pytest 9.2 no longer
    reads (a node's id is `item._id`), so the groups were silently dealt test by test to both workers: in a 15.6-minute
    suite on a cold cache, test_real_models.py's module fixture was set up twice per model (Gemma 3: 42 s and 29 s),
    once on each worker. The same suffix, written where this pytest reads it; a no-op where xdist's own works (its
    suffix is there already) and outside loadgroup."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if not names or item.nodeid.endswith(suffix) or not hasattr(item, "_id"):
            continue
        from _pytest.nodeid import NodeId

        old = item._id  # the suffix after the parameters, as xdist writes it: `path::name[params]@group`
        last = old.names[-1] + ("" if old.params is None else f"[{old.params}]") + suffix
        item._id = NodeId(path=old.path, names=(*old.names[:-1], last))


# --------------------------------------------------------------------------- CPU seconds per test (issue 29)
#: AMBENCH_TEST_CPU=FILE appends one JSON line per test: its wall seconds and the CPU seconds (user + system) of the
#: test process and of the child processes it reaped during the test (setup, call and teardown). On two workers a
#: test's wall time depends on what the other worker runs; its CPU seconds do not, and they are what a 2-core suite
#: has to spend (`python scripts/test_cpu.py FILE` sums them by test and by file).
_CPU_LOG = os.environ.get("AMBENCH_TEST_CPU")
_FOUND: dict[str, int] = {}  #: what the autouse fixture below found at the test's start (torch threads)
if _CPU_LOG:
    import json as _json
    import time as _time

    from experiments.study.timing import cpu_seconds as _cpu_now  # this process and the children it reaped

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        cpu, wall = _cpu_now(), _time.perf_counter()
        yield
        row = {"test": item.nodeid, "cpu_s": round(_cpu_now() - cpu, 3), "wall_s": round(_time.perf_counter() - wall, 3),
               "worker": os.environ.get("PYTEST_XDIST_WORKER", "-"), "torch_threads_found": _FOUND.get("torch", 1)}
        with open(_CPU_LOG, "a", encoding="utf-8") as f:
            f.write(_json.dumps(row) + "\n")


if os.environ.get("PYTEST_XDIST_WORKER"):
    @pytest.fixture(autouse=True)
    def _one_torch_thread_per_worker():
        """Each test in a worker starts with one torch thread: a test that compares thread counts, or a module fixture
        that restores what it found, must not leave the worker's next tests spinning two threads against the other
        worker (AMBENCH_TEST_CPU records `torch_threads_found` where a test found more than one)."""
        torch = sys.modules.get("torch")
        found = torch.get_num_threads() if torch is not None else 1
        if found != 1:
            torch.set_num_threads(1)
        _FOUND["torch"] = found
        yield

