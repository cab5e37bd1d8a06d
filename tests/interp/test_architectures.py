"""The architecture matrix: every supported architecture through every runtime feature, float32 and bf16.

For each tiny random model (tests/interp/archs.py) and dtype:
- load: `Runtime.from_folder` with the default options (remote code with its explicit flag);
- generate: batched greedy equals Hugging Face `generate` on a separately loaded model;
- capture: equals Hugging Face `output_hidden_states` (block inputs; the post-norm site equals its last
  entry; the pre-norm final site is what the final norm reads);
- patch: an identity prefill hook is an exact no-op (tokens and entropies bit for bit), and patching the
  layer-0 residual at the cut with another suffix's captured activations continues exactly as that
  suffix does (a constructed answer);
- steer: a zero steering vector is an exact no-op; a large one changes the tokens;
- continue: `continue_batch` over suffixes of different lengths equals generating each row alone
  (windowed architectures have an 8-token window, shorter than the prompt);
- bridge (float32, architectures TransformerBridge adapts): capture, patch and steer through the
  bridge equal the forward-hook path.
With AMBENCH_ARCH_MATRIX=path set, each case appends its results as a JSON line there
(`scripts/architecture_table.py` turns them into the table in docs/runtime.md).
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from tests.interp.archs import ARCHS, PAPER_MODELS, build_arch, check_architecture


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # 2-block models with d_model 32: each op is microseconds, and a second thread only adds the cost of
    # waking it (60x slower per op on a busy 2-core machine, measured)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("archs")
    return {a: build_arch(a, root / a) for a in ARCHS}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_architecture(arch, dtype, folders):
    res = check_architecture(arch, dtype, folders[arch])
    out = os.environ.get("AMBENCH_ARCH_MATRIX")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(res) + "\n")


@pytest.mark.parametrize("arch", sorted(set(PAPER_MODELS.values())))
def test_paper_architectures_run_from_the_default_command_line(arch, folders, tmp_path):
    """`ambench generate --model FOLDER` with no other model option; remote code only with its flag."""
    from typer.testing import CliRunner

    from experiments.cli import app

    argv = ["generate", "--model", str(folders[arch]), "--task", "translation", "--limit", "1", "--samples", "0",
            "--max-new-tokens", "4", "--no-check", "--out", str(tmp_path / "run")]
    res = CliRunner().invoke(app, argv)
    if arch == "custom":
        assert res.exit_code == 2 and "--trust-remote-code" in res.output and "Traceback" not in res.output
        res = CliRunner().invoke(app, argv + ["--trust-remote-code"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (tmp_path / "run" / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["n_tokens"] >= 1
