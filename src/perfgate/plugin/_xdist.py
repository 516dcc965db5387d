"""pytest-xdist and the gate: a gate measures one server at a time, so it never runs on a worker.

Under ``pytest -n N`` every worker would collect the perf tests, boot a server of its own and
record baselines, N measurements at once on one host. A worker refuses as soon as it collects
a perf test (before any fixture, so before anything boots) with a collection error; the
controller, which collects nothing itself, sees that error arrive and turns it into pytest's
usage error, shown once whatever the number of workers (a process that only inherited a
worker's environment does the same with its own error). Tests that need no server
(perfgate's own suite) still run under xdist.
"""

from __future__ import annotations

import os

import pytest

from perfgate.errors import PerfgateError

# Starts the message a worker raises, so the controller knows it from any other collection error.
_REFUSAL = "the perf gate cannot run under pytest-xdist"


def worker_name(config: pytest.Config) -> str | None:
    """The xdist worker this process is (gw0, ...), or None outside a worker.

    xdist sets both: ``workerinput`` on the worker's config and PYTEST_XDIST_WORKER in its
    environment, which a process the worker starts inherits (a nested gate is a worker's too).
    """
    workerinput = getattr(config, "workerinput", None)
    if isinstance(workerinput, dict) and workerinput.get("workerid"):
        return str(workerinput["workerid"])
    return os.environ.get("PYTEST_XDIST_WORKER") or (None if workerinput is None else "worker")


def refuse_on_worker(config: pytest.Config) -> None:
    """Raise PerfgateError in an xdist worker: nothing may boot or attach a server there."""
    worker = worker_name(config)
    if worker is not None:
        raise PerfgateError(
            f"{_REFUSAL} (this is worker {worker}): a gate measures one server at a time, and every "
            "worker would boot its own and record baselines at once. Run the perf tests without "
            "-n/--dist (or with -p no:xdist); other tests may still use xdist in a pytest run of their own."
        )


class XdistGuard:
    """Turns a worker's refusal, arriving at the controller as a failed collection, into pytest's
    usage error. A real worker lets the report go to its controller (raising there would crash
    it); a process that only inherited a worker's environment ends on its own refusal."""

    def __init__(self, config: pytest.Config) -> None:
        self.real_worker = hasattr(config, "workerinput")

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        message = None if self.real_worker else _worker_refusal(report)
        if message is not None:
            raise pytest.UsageError(message)


def _worker_refusal(report: pytest.CollectReport) -> str | None:
    """The refusal a worker's failed collection carries (from "perfgate: " on, one line), or None."""
    if not report.failed:
        return None
    text = str(report.longrepr)
    start = text.find(_REFUSAL)
    return None if start < 0 else "perfgate: " + text[start:].splitlines()[0]
