"""Fixtures of the perfgate plugin. The server is booted once per pytest session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from perfgate.correctness import CorrectnessResult, off_reason, probe_spec
from perfgate.errors import PerfgateError
from perfgate.plugin._benchmark import benchmark_rounds, record
from perfgate.plugin._gate import CapacityChecks, CorrectnessChecks, GateChecks
from perfgate.plugin._progress import ProgressLine
from perfgate.plugin._state import STATE_KEY
from perfgate.profile import Profile, Sweep, Workload
from perfgate.server import RunningServer
from perfgate.session import Session, WorkloadResult


@pytest.fixture(scope="session")
def perf_profile(pytestconfig: pytest.Config) -> Profile:
    """The validated profile this run gates."""
    return pytestconfig.stash[STATE_KEY].profile()


@pytest.fixture(scope="session")
def perf_session(pytestconfig: pytest.Config) -> Iterator[Session]:
    """The gate session; its server and telemetry are torn down when the pytest session ends."""
    state = pytestconfig.stash[STATE_KEY]
    yield state.gate_session()
    state.close()


@pytest.fixture
def perf_server(request: pytest.FixtureRequest, perf_session: Session) -> RunningServer:
    """The server under test, booted (or attached) once per session and ready to serve.

    A boot that failed fails every test that needs the server: the first with the whole
    message, the others with one line pointing to it.
    """
    try:
        return perf_session.server()
    except PerfgateError as e:
        error = e
    # Outside the except block, so the report does not chain the error to itself.
    request.config.stash[STATE_KEY].fail_once(error, request.node.nodeid)


@pytest.fixture
def perf_result(
    request: pytest.FixtureRequest, perf_session: Session, perf_server: RunningServer, perf_workload: Workload
) -> WorkloadResult:
    """The judged result of ``perf_workload``: run once per session, shared by every test of that workload."""
    progress = ProgressLine(request.config, perf_workload.name)
    first = perf_workload.name not in perf_session.results and perf_workload.name not in perf_session.failures
    benchmark = request.getfixturevalue("benchmark") if first and _has_benchmark(request) else None
    try:
        result = perf_session.run(perf_workload, on_progress=progress, repeat_runner=benchmark_rounds(benchmark, first))
    except PerfgateError as e:
        error = e
    else:
        _record_properties(request, benchmark, result)
        return result
    request.config.stash[STATE_KEY].fail_once(error, request.node.nodeid)


def _record_properties(request: pytest.FixtureRequest, benchmark: Any, result: WorkloadResult) -> None:
    if benchmark is not None:
        record(benchmark, result)
    for name, value in sorted(result.repeats[-1].flat_metrics().items()):
        request.node.user_properties.append((f"perf.{name}", round(value, 4)))


@pytest.fixture
def perf_gate(request: pytest.FixtureRequest, perf_workload: Workload) -> GateChecks:
    """The checks of one workload: its validity, and each category (throughput, latency, power) of
    its verdict: against the baseline, or with --perf-ab, B's against A's."""
    state = request.config.stash[STATE_KEY]
    if not state.ab_mode:
        result = request.getfixturevalue("perf_result")
        return GateChecks.of_gate(result, request.getfixturevalue("perf_session").stack.telemetry_note)
    try:
        summary = state.ab_summary(request.session.items)
        if summary.stopped:
            raise PerfgateError(f"the A/B stopped: {summary.stopped}")
    except PerfgateError as e:
        error = e
    else:
        workload = next(w for w in summary.workloads if w.name == perf_workload.name)
        notes = {boot.telemetry_note for v in summary.variants for boot in v.boots if boot.telemetry_note}
        return GateChecks.of_ab(workload, "; ".join(sorted(notes)), accept=summary.accept)
    state.fail_once(error, request.node.nodeid)


def _has_benchmark(request: pytest.FixtureRequest) -> bool:
    return request.config.pluginmanager.hasplugin("benchmark")


@pytest.fixture
def perf_capacity(request: pytest.FixtureRequest, perf_sweep: Sweep) -> CapacityChecks:
    """The judged capacity of ``perf_sweep``: every load run (once per session), then its capacity.
    An A/B (--perf-ab) judges workloads round by round, not capacities: skipped there."""
    if request.config.stash[STATE_KEY].ab_mode:
        pytest.skip(f"{perf_sweep.name}: --perf-ab judges workloads, not a sweep's capacity; run the gate for it")
    session: Session = request.getfixturevalue("perf_session")
    request.getfixturevalue("perf_server")
    progress = ProgressLine(request.config, perf_sweep.name)
    try:
        result = session.run_sweep(perf_sweep, on_progress=progress)
    except PerfgateError as e:
        error = e
    else:
        return CapacityChecks(result)
    request.config.stash[STATE_KEY].fail_once(error, request.node.nodeid)


@pytest.fixture
def perf_correctness(request: pytest.FixtureRequest) -> CorrectnessChecks:
    """The correctness probe of this session's server (run once, after boot, before the workloads);
    with --perf-ab, B's probe held to A's answers."""
    state = request.config.stash[STATE_KEY]
    error: PerfgateError
    if state.ab_mode:
        try:
            summary = state.ab_summary(request.session.items)
        except PerfgateError as e:
            error = e
        else:
            if summary.correctness is None:
                pytest.skip("correctness: the A/B did not probe (no boot of both stacks completed)")
            return CorrectnessChecks(summary.correctness)
        state.fail_once(error, request.node.nodeid)
    session: Session = request.getfixturevalue("perf_session")
    if probe_spec(session.profile) is None:
        # Off: nothing to boot the server for.
        return CorrectnessChecks(CorrectnessResult(None, note=off_reason(session.profile)))
    request.getfixturevalue("perf_server")
    result = session.correctness
    assert result is not None, "the server booted without its correctness probe"
    if result.outcome is not None:
        for name, value in sorted(result.outcome.metrics.items()):
            if value == value:  # NaN (not measured) is no property
                request.node.user_properties.append((f"perf.{name}", round(value, 6)))
    gate = session.profile.gate
    return CorrectnessChecks(result, require_reference=gate.require_baseline and not session.options.update_baselines)
