"""The runtime on a GPU (marker `gpu`): the architecture matrix, placement, default dtype and capture error on CUDA.

Skipped cleanly without CUDA. perf/gpu_check.sh runs them on the device machine (`pytest -m gpu`); its CPU
dry run runs the same assertions on the CPU (AMBENCH_TEST_DEVICE=cpu), which is how CI proves they work.
The TransformerBridge half of the matrix stays on the CPU suite: the device image has no transformer-lens.
"""

from __future__ import annotations

import os

import pytest
import torch

from tests.interp.archs import PAPER_MODELS, WINDOWED, build_arch, check_architecture

DEVICE = os.environ.get("AMBENCH_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE.startswith("cuda") and not torch.cuda.is_available(),
                                 reason="needs a CUDA GPU (perf/gpu_check.sh runs these on the device machine)")]
#: the paper's architectures and every windowed one (Gemma 3's sliding window among them)
ARCHS = sorted(set(PAPER_MODELS.values()) | WINDOWED)
#: bf16 capture against float32 on the CPU: largest relative L2 error of one residual vector (perf/gpu_check.py)
CAPTURE_REL = 0.05


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models (see test_architectures.py); the GPU's kernels do not use these threads
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("archs-device")
    return {a: build_arch(a, root / a) for a in ARCHS}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("arch", ARCHS)
def test_every_runtime_feature_on_the_device(arch, dtype, folders):
    res = check_architecture(arch, dtype, folders[arch], device=DEVICE, bridge=False)
    assert all(res[k] for k in ("load", "generate", "capture", "patch", "steer", "continue"))


def test_default_placement_and_dtype_on_the_device(folders):
    from interp.runtime import Runtime

    rt = Runtime.load(str(folders["llama"]), device=DEVICE)
    want = "bfloat16" if DEVICE.startswith("cuda") else "float32"
    assert rt.info.dtype == want and rt.info.device.startswith(DEVICE)
    assert {p.device.type for p in rt.model.parameters()} == {torch.device(DEVICE).type}
    if DEVICE.startswith("cuda"):
        assert Runtime.load(str(folders["llama"])).info.device.startswith("cuda")  # a GPU machine's default


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_bf16_capture_on_the_device_is_near_float32_on_the_cpu(arch, folders):
    from interp.runtime import Runtime

    dev = Runtime.from_folder(folders[arch], device=DEVICE, dtype=torch.bfloat16)
    ref = Runtime.from_folder(folders[arch], device="cpu", dtype=torch.float32)
    prompts = [dev.tokenizer(t)["input_ids"] for t in ("Draw the flag of Germany on a grid, please.", "A cat on a mat")]
    positions = [[0, len(p) // 2, len(p) - 1] for p in prompts]
    a, r = dev.capture(prompts, positions), ref.capture(prompts, positions)
    rel = ((a - r).norm(dim=-1) / r.norm(dim=-1)).amax().item()
    assert 0 < rel <= CAPTURE_REL  # bf16 rounds (so > 0) and stays close
