"""Fault cases of process and stream hygiene: xdist, endless streams and headers, a SIGKILLed
gate, doctor's --python, a 200 that is not a stream (issue #18).

Every case asserts the exit code and the one message the user sees; the ``gate`` fixture checks
afterwards that no process of the run is left and nothing was written where it should not be.
"""

from __future__ import annotations

import pytest

from tests.faults.conftest import Gate

USAGE = int(pytest.ExitCode.USAGE_ERROR)
XDIST = "the perf gate cannot run under pytest-xdist"


# -- pytest-xdist ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [("-n", "2"), ("-p", "xdist", "-n", "2"), ("-n", "1"), ("--dist", "each", "--tx", "2*popen")],
    ids=["n2", "p-xdist", "n1", "dist-each"],
)
def test_xdist_is_refused_before_anything_boots(gate: Gate, args: tuple[str, ...]) -> None:
    outcome = gate.run(*args, "--perf-update-baselines")
    assert outcome.ret == USAGE, outcome.out[-3000:]
    assert outcome.out.count(XDIST) == 1, outcome.out[-3000:]
    assert "Run the perf tests without -n/--dist (or with -p no:xdist)" in outcome.out
    assert "ready in" not in outcome.out and "Traceback" not in outcome.out and "INTERNALERROR" not in outcome.out
    assert gate.baseline_bytes() == {}


def test_a_gate_started_from_an_xdist_worker_is_refused(gate: Gate) -> None:
    outcome = gate.run("--perf-update-baselines", env={"PYTEST_XDIST_WORKER": "gw3"})
    assert outcome.ret == USAGE, outcome.out[-3000:]
    assert outcome.out.count(XDIST) == 1 and "(this is worker gw3)" in outcome.out, outcome.out[-3000:]
    assert gate.baseline_bytes() == {}


def test_tests_that_need_no_server_still_run_under_xdist(gate: Gate) -> None:
    gate.write("test_plain.py", "def test_one() -> None:\n    pass\n\n\ndef test_two() -> None:\n    pass\n")
    outcome = gate.run("-n", "2", "test_plain.py")
    assert outcome.ret == 0, outcome.out[-3000:]
    assert "2 passed" in outcome.out and XDIST not in outcome.out
