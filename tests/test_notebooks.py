"""docs/patching.ipynb and docs/dose_response.ipynb run from top to bottom (nbclient, a real Jupyter kernel) and
show what they promise: a patching scan with its attribution counterpart, a dose-response table with intervals."""

from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _run(name):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(DOCS / name, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells)  # committed without outputs: what runs is what is read
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(DOCS.parent)}})
    client.execute()  # raises CellExecutionError, naming the cell, when one fails
    outs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outs)
    return text, any("image/png" in o.get("data", {}) for o in outs)


@pytest.mark.slow
def test_the_patching_notebook_runs():
    text, drew = _run("patching.ipynb")
    assert "correlation exact vs attribution" in text and "restored fraction" in text and drew
    assert "pairs in" in text and "mean_effect" in text and "head" in text  # the many-pair and the path scans


@pytest.mark.slow
def test_the_dose_response_notebook_runs():
    text, drew = _run("dose_response.ipynb")
    assert "alpha" in text and "high" in text and "n" in text and drew


@pytest.mark.slow
def test_the_causal_notebook_runs():
    from interp.organisms import WEIGHTS, record
    from interp.organisms.zoo import code_version

    if (record(WEIGHTS / "decoy-planner") or {}).get("code_version") != code_version("decoy-planner"):
        pytest.skip("committed decoy-planner weights missing or stale")
    text, _ = _run("causal.ipynb")
    assert "xor-planner" in text and "decoy-planner" in text and "interchange" in text and "line_share" in text
