"""Fault cases of process and stream hygiene: xdist, endless streams and headers, a SIGKILLed
gate, doctor's --python, a 200 that is not a stream (issue #18).

Every case asserts the exit code and the one message the user sees; the ``gate`` fixture checks
afterwards that no process of the run is left and nothing was written where it should not be.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.conftest import Gate, quirky_command
from tests.support import processes_with

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


# -- streams that send bytes but make no progress ---------------------------------------------

FAILED = int(pytest.ExitCode.TESTS_FAILED)
WARMUP_FAILED = "workload c16-in32-out16: 2 of 2 warmup requests to"


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        ("comment", "without progress"),
        ("blank", "without progress"),
        ("event", "without progress"),
        ("field", "without progress"),
        ("space", "without progress"),
        ("json", "without progress"),
        ("empty-event", "without progress"),
        ("same-chunk", "without progress"),
        ("html", "of an HTTP 200 text/html body (not a stream) that never ended"),
        ("header", "of a status line and headers that never ended"),
        ("status-line", "of a status line and headers that never ended"),
    ],
)
def test_bytes_without_progress_fail_on_the_stall_timeout(gate: Gate, kind: str, detail: str) -> None:
    t0 = time.monotonic()
    outcome = gate.run(kind="command", server=quirky_command("--endless", kind), workload="stall_timeout_s = 2")
    assert outcome.ret == FAILED, outcome.out[-3000:]
    outcome.shown_once(WARMUP_FAILED)
    assert "stream stalled: no data for 2 s: " in outcome.out and detail in outcome.out, outcome.out[-3000:]
    assert "Traceback" not in outcome.out
    assert gate.baseline_bytes() == {}
    # Boot, two warmup requests stalled 2 s each at most, teardown: far below a hung gate.
    assert time.monotonic() - t0 < 120


def test_a_200_that_is_not_a_stream_names_its_type_and_body(gate: Gate) -> None:
    key = f"sk-{uuid.uuid4().hex}"
    gate.secrets.append(key)
    outcome = gate.run(
        kind="command",
        server=quirky_command("--html-200") + '\napi_key_env = "PERFGATE_FAULT_KEY"',
        env={"PERFGATE_FAULT_KEY": key},
    )
    assert outcome.ret == FAILED, outcome.out[-3000:]
    outcome.shown_once(WARMUP_FAILED)
    assert (
        "not a stream: HTTP 200 from /generate with Content-Type text/html; charset=utf-8, not text/event-stream; "
        "the body starts: <html><body><h1>Sign in</h1><p>Your request (Bearer <redacted>) needs a session."
    ) in outcome.out, outcome.out[-3000:]
    assert "truncated stream" not in outcome.out


# -- perfgate SIGKILLed: no teardown runs, the server goes all the same ---------------------------


def _sigkill_mid_run(gate: Gate, argv: list[str]) -> float:
    """Start ``argv`` (a gate or an A/B), SIGKILL it once the server serves, and return how long
    the server's processes outlived it."""
    proc = subprocess.Popen(argv, cwd=gate.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not processes_with(gate.marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_with(gate.marker), "the server never started"
        time.sleep(3.0)
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    killed = time.monotonic()
    while processes_with(gate.marker) and time.monotonic() < killed + SHUTDOWN_S:
        time.sleep(0.1)
    assert processes_with(gate.marker) == [], f"server processes outlived the SIGKILLed run by {SHUTDOWN_S} s"
    return time.monotonic() - killed


SHUTDOWN_S = 5.0  # the profile's shutdown_timeout_s
LONG = "output_len = 2000"


@pytest.mark.parametrize("kind", ["simulator", "command"])
def test_sigkilled_gate_takes_its_server_along(gate: Gate, kind: str) -> None:
    if kind == "simulator":
        profile = gate.profile(sim="time_scale = 1.0", workload=LONG)
    else:
        profile = gate.profile(kind="command", server=quirky_command(), workload=LONG)
    _sigkill_mid_run(gate, gate.argv(profile=profile))
    assert gate.baseline_bytes() == {}


def test_sigkilled_ab_takes_its_server_along(gate: Gate) -> None:
    profile = gate.profile(sim="time_scale = 1.0", workload=LONG)
    argv = [sys.executable, "-m", "perfgate.cli", "ab", str(profile), "--candidate-env", "PERFGATE_SIM_SLOWDOWN=2"]
    _sigkill_mid_run(gate, [*argv, "--baselines", str(gate.baselines), "--rounds", "2"])
    assert gate.baseline_bytes() == {}


# -- perfgate doctor --python --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: d / "nonexistent", "no such file"),
        (lambda d: d, "not executable (or a directory)"),
        (lambda d: _script(d, "exit 3", mode=0o644), "not executable (or a directory)"),
        (lambda d: _script(d, "exit 3"), "is not a Python interpreter: `"),
        (lambda d: _script(d, "echo 3.11"), "is not a Python interpreter: `"),
    ],
    ids=["missing", "directory", "not-executable", "exits-3", "not-python"],
)
def test_doctor_refuses_a_python_that_is_not_one(tmp_path: Path, make: Callable[[Path], Path], reason: str) -> None:
    python = make(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "perfgate.cli", "doctor", "--python", str(python)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("perfgate doctor: --python: ") and str(python) in line and reason in line, line
    assert line.endswith("pass --python the interpreter of SGLang's environment"), line
    assert proc.stdout == ""


def _script(directory: Path, body: str, mode: int = 0o755) -> Path:
    path = directory / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(mode)
    return path
