"""perfgate: a pytest-based performance-regression gate for LLM serving.

The pytest plugin (``pytest perf_tests``) and the ``perfgate`` command are the entry points most
users need. For Python callers the names in ``__all__`` are the stable API; each is imported on
first use, so ``import perfgate`` (which pytest does in every run, for the plugin) stays cheap.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

try:
    __version__ = importlib.metadata.version("perfgate")
except importlib.metadata.PackageNotFoundError:
    __version__ = "unknown (not installed)"

# name -> the package that defines it.
_API = {
    "load_profile": "perfgate.profile",
    "Session": "perfgate.session",
    "SessionOptions": "perfgate.session",
    "start_server": "perfgate.server",
    "run_workload": "perfgate.load",
    "compute_metrics": "perfgate.metrics",
    "BaselineStore": "perfgate.baseline",
    "judge": "perfgate.verdict",
    "read_results": "perfgate.report",
    "run_ab": "perfgate.ab",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'perfgate' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
