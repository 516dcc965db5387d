from __future__ import annotations

import importlib.util
from pathlib import Path

# The wheel fixtures live with the autotune tests; loaded by path (the test directories are
# not packages) so both directories share one definition and one download cache.
_spec = importlib.util.spec_from_file_location(
    "perfgate_tests_sglang_wheels", Path(__file__).parents[1] / "autotune" / "sglang_wheels.py"
)
_wheels = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_wheels)

sglang_0_5_12 = _wheels.sglang_0_5_12
sglang_0_5_23 = _wheels.sglang_0_5_23
