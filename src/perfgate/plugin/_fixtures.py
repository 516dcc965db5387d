"""Fixtures of the perfgate plugin. The server is booted once per pytest session."""

from __future__ import annotations

from typing import Iterator

import pytest

from perfgate.errors import PerfgateError
from perfgate.plugin._gate import Gate
from perfgate.plugin._progress import ProgressLine
from perfgate.plugin._state import STATE_KEY
from perfgate.profile import Profile, Workload
from perfgate.server import RunningServer
from perfgate.session import GateSession, WorkloadResult


@pytest.fixture(scope="session")
def perf_profile(pytestconfig: pytest.Config) -> Profile:
    """The validated profile this run gates."""
    return pytestconfig.stash[STATE_KEY].profile()


@pytest.fixture(scope="session")
def perf_session(pytestconfig: pytest.Config) -> Iterator[GateSession]:
    """The gate session; its server and telemetry are torn down when the pytest session ends."""
    state = pytestconfig.stash[STATE_KEY]
    yield state.gate_session()
    state.close()


@pytest.fixture(scope="session")
def perf_server(perf_session: GateSession) -> RunningServer:
    """The server under test, booted (or attached) once and ready to serve."""
    try:
        return perf_session.server()
    except PerfgateError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture
def perf_result(
    request: pytest.FixtureRequest, perf_session: GateSession, perf_server: RunningServer, perf_workload: Workload
) -> WorkloadResult:
    """The judged result of ``perf_workload``: run once per session, shared by every test of that workload."""
    progress = ProgressLine(request.config, perf_workload.name)
    try:
        result = perf_session.run(perf_workload, on_progress=progress)
    except PerfgateError as e:
        pytest.fail(str(e), pytrace=False)
    for name, value in sorted(result.repeats[-1].values().items()):
        request.node.user_properties.append((f"perf.{name}", round(value, 4)))
    return result


@pytest.fixture
def perf_gate(perf_result: WorkloadResult, perf_session: GateSession) -> Gate:
    """Asserts one category (throughput, latency, power) of the workload's verdict."""
    return Gate(perf_result, perf_session.telemetry_note)
