"""docs/probe_sweep.ipynb (a probe sweep across layers, and the per-layer R^2 plot) runs from top to bottom in a real
Jupyter kernel, and finds the organism's constructed answer: the plan of organism:xor-planner (an XOR of two prompt
words) is decodable at the last prompt token in its last layer, beyond a bag of words."""

import re
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "probe_sweep.ipynb"


@pytest.mark.slow
def test_the_probe_sweep_notebook_runs_and_finds_the_plan():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells)  # committed without outputs: what runs is what is read
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parents[1])}})
    client.execute()  # raises CellExecutionError, naming the cell, when one fails
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    m = re.search(r"best: layer (\d+) at (\w+), R\^2 ([-\d.]+) \[([-\d.]+), ([-\d.]+)\]; text baseline ([-\d.]+); "
                  r"Delta R\^2 ([-\d.]+) \[([-\d.]+), ([-\d.]+)\]", text)
    assert m, text[-2000:]
    layer, pos = int(m.group(1)), m.group(2)
    r2, lo, text_r2, delta_lo = float(m.group(3)), float(m.group(4)), float(m.group(6)), float(m.group(8))
    assert pos == "last" and layer >= 3 and r2 > 0.8 and lo > 0.6 and text_r2 < 0.2 and delta_lo > 0.5
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))  # the plot drew
