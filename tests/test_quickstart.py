"""docs/quickstart.ipynb runs from top to bottom (nbclient, a real Jupyter kernel): a cell that fails fails here."""

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "quickstart.ipynb"


@pytest.mark.slow
def test_the_quickstart_notebook_runs(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert [c.cell_type for c in nb.cells].count("code") >= 6 and not any(c.get("outputs") for c in nb.cells)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parents[1])}})
    client.execute()  # raises CellExecutionError, naming the cell, when one fails
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "Delta R^2" in text and "continued drawing" in text
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))  # the R^2 plot drew
