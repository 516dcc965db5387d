from __future__ import annotations

from pathlib import Path

import pytest
from sglang_wheels import sglang_root


@pytest.fixture(scope="session")
def sglang_0_5_12() -> Path:
    """Unpacked SGLang 0.5.12: flashinfer_cutlass left out of autotune (needs the patch)."""
    return sglang_root("0.5.12")


@pytest.fixture(scope="session")
def sglang_0_5_23() -> Path:
    """Unpacked SGLang 0.5.23: flashinfer_cutlass autotuned natively."""
    return sglang_root("0.5.23")
