"""The dry run's stand-in for the GPU image's missing packages: imports of the names in $GPU_CHECK_BLOCK fail.

perf/gpu_check.sh puts this folder first on PYTHONPATH for the CPU dry run, so the dry run (and every
process it starts: pytest, `ambench run`, sandbox workers) sees only what the device will have: its image
plus the carried wheels (perf/gpu_carry.py). A `None` in sys.modules makes `import NAME` raise
ModuleNotFoundError and `importlib.util.find_spec(NAME)` return None, as for a package that is absent.
"""

import os
import sys

for _name in filter(None, os.environ.get("GPU_CHECK_BLOCK", "").split(",")):
    sys.modules.setdefault(_name.strip(), None)  # type: ignore[assignment]
