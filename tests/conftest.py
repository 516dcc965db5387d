"""Process-wide setup of perfgate's own suite.

Under pytest-xdist the gates its tests start are their own runs: a worker's environment names it
(PYTEST_XDIST_WORKER), and a gate started from a worker refuses to run (docs/faults.md); the
suite's cases start gates on purpose, one per case, so the worker's name does not reach them.

A suite started in the background by a non-interactive shell (``cmd &``) inherits SIGINT
ignored, and so does every gate it starts: the Ctrl-C cases would then wait forever for a gate
that never sees the signal (a fresh-clone CI run started that way hung in both). Ctrl-C is what
they test, so the suite takes SIGINT back; the gates it starts inherit the default.

The suite starts hundreds of Python processes (gates, simulators, CLIs), each importing pytest
and perfgate, whose modules pytest also rewrites for assertions (perfgate is a pytest plugin).
With PYTHONDONTWRITEBYTECODE set, as on this project's CI machines, each of them compiled and
rewrote every module again: a gate that only refuses its profile took 4.1 s of CPU instead of
1.9 s. The bytecode then goes to a cache outside the work tree (PYTHONPYCACHEPREFIX), which
keeps the tree as clean as the variable asked and lets every process of the suite share it.
"""

import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
    os.environ.pop(name, None)
# The suite's own options (CI sets --durations=25 here) are not the gates' it starts.
os.environ.pop("PYTEST_ADDOPTS", None)

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) and not os.environ.get("PYTHONPYCACHEPREFIX"):
    prefix = Path(tempfile.gettempdir()) / f"perfgate-tests-pycache-{os.getuid()}"
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    sys.pycache_prefix = str(prefix)
    sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "long: runs for tens of seconds; scheduled first, so that pytest-xdist's workers end together"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A 116 s case collected late kept one worker busy alone at the end (4 workers: 1,702 s of
    # tests in 591 s wall, 2026-12-04). The long ones go first; sorted stably, the rest keep their order.
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """pytest-xdist's default ("load") hands each worker a contiguous quarter of its first tests:
    every long case to one worker (634 s wall). Work stealing starts the same way, but an idle worker
    takes half of the busiest one's queue, long cases included. An explicit --dist is left alone.
    (The dist mode is not set in addopts: pytest-benchmark turns itself off under any --dist, and
    addopts reach the gate's own runs of perf_tests too.)"""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)
