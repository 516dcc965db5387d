"""The perfgate pytest plugin (registered through the ``pytest11`` entry point).

Options live in _options, fixtures in _fixtures, hooks in _hooks; everything they do is in
perfgate.session, so the plugin stays a thin layer.
"""

from perfgate.plugin._fixtures import (
    perf_capacity,
    perf_correctness,
    perf_gate,
    perf_profile,
    perf_result,
    perf_server,
    perf_session,
)
from perfgate.plugin._gate import CapacityChecks, CorrectnessChecks, GateChecks
from perfgate.plugin._hooks import (
    pytest_configure,
    pytest_generate_tests,
    pytest_make_collect_report,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_terminal_summary,
    pytest_unconfigure,
)
from perfgate.plugin._options import pytest_addoption

__all__ = [
    "CapacityChecks",
    "CorrectnessChecks",
    "GateChecks",
    "perf_capacity",
    "perf_correctness",
    "perf_gate",
    "perf_profile",
    "perf_result",
    "perf_server",
    "perf_session",
    "pytest_addoption",
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_make_collect_report",
    "pytest_runtest_makereport",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_unconfigure",
]
