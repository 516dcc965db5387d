"""Hooks of the perfgate plugin: parametrization over the profile's workloads and the reports."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path

import pytest

from perfgate._redact import SECRETS, RedactingStream
from perfgate.ab import PLUGIN_FLAGS
from perfgate.baseline import BaselineStore
from perfgate.errors import PerfgateError
from perfgate.plugin._benchmark import BenchmarkHooks
from perfgate.plugin._state import STATE_KEY, PluginState
from perfgate.plugin._xdist import XdistGuard, refuse_on_worker
from perfgate.report import ratchet_note, render_text, report_lines, rows, write_ab_results, write_results
from perfgate.server import check_url, describe_autotune
from perfgate.session import RunSummary, SweepResult, WorkloadResult


# Last, so that pytest's terminal reporter exists to have its output redacted.
@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    _check_options(config)
    config.stash[STATE_KEY] = PluginState(config)
    if config.pluginmanager.hasplugin("benchmark"):
        config.pluginmanager.register(BenchmarkHooks(), "perfgate-benchmark")
    config.pluginmanager.register(XdistGuard(config), "perfgate-xdist")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        # Every line pytest prints (reports, captured output, our summary) passes here.
        writer = reporter._tw
        writer._file = RedactingStream(writer._file)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    redact_report(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    redact_report(report)
    return report


def redact_report(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Redact the run's secrets from ``report`` before the terminal, JUnit XML or any other
    plugin reads it: the failure text (a server's answer quoted in an error), captured output
    and logs, user properties."""
    if not SECRETS.values:
        return
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):
        path, lineno, reason = longrepr
        report.longrepr = (path, lineno, SECRETS.text(reason))
    elif longrepr is not None:
        text = str(longrepr)
        redacted = SECRETS.text(text)
        if redacted != text:
            report.longrepr = redacted
    report.sections = [(title, SECRETS.text(content)) for title, content in report.sections]
    if isinstance(report, pytest.TestReport):
        report.user_properties = [(name, SECRETS.json(value)) for name, value in report.user_properties]


# A run whose results files could not all be written exits like a failed gate (1): CI goes red
# with the line naming each file, rather than green with the evidence missing.
EXIT_NOT_WRITTEN = pytest.ExitCode.TESTS_FAILED


def _check_options(config: pytest.Config) -> None:
    """Refuse contradictory or impossible options before anything is collected or booted."""
    ab = config.getoption("perf_ab")
    accepting = config.getoption("perf_update_baselines") or (ab and config.getoption("perf_accept_candidate"))
    if config.getoption("perf_accept_regression") is not None and not accepting:
        raise pytest.UsageError(
            "--perf-accept-regression only applies when recording: add --perf-update-baselines "
            "(or, with --perf-ab, --perf-accept-candidate; a gate run never accepts a regression)"
        )
    _check_ab_options(config, ab)
    results = config.getoption("perf_results")
    if results and Path(results).exists() and not Path(results).is_dir():
        raise pytest.UsageError(
            f"--perf-results {results}: that is a file; pass a directory (it is created if missing)"
        )
    if results:
        try:
            BaselineStore(PluginState(config).baselines_dir()).refuse_inside(
                Path(results), "--perf-results", "--perf-baselines"
            )
        except PerfgateError as e:
            raise pytest.UsageError(str(e)) from None
    base_url = config.getoption("perf_base_url")
    if base_url:
        try:
            check_url(base_url, "--perf-base-url")
        except PerfgateError as e:
            raise pytest.UsageError(str(e)) from None


# Gate options that mean nothing to an A/B, and what to use instead.
_NOT_WITH_AB = {
    "perf_update_baselines": "with --perf-ab, --perf-accept-candidate records B's numbers",
    "perf_base_url": "an A/B boots both variants itself; it cannot attach to a running server",
    "perf_repeats": "each A/B round runs every workload once; set --perf-ab-rounds",
    "perf_boots": "each A/B round boots both variants afresh; set --perf-ab-rounds",
}


def _check_ab_options(config: pytest.Config, ab: bool) -> None:
    if not ab:
        for flag in PLUGIN_FLAGS.ab_only:
            if config.getoption(flag):
                raise pytest.UsageError(f"{flag} only applies with --perf-ab")
        return
    for name, instead in _NOT_WITH_AB.items():
        if config.getoption(name):
            raise pytest.UsageError(f"--{name.replace('_', '-')} does not apply with --perf-ab: {instead}")
    state = PluginState(config)
    try:
        state.ab_candidate()
        state.ab_options()
    except PerfgateError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if {"perf_workload", "perf_sweep"} & set(metafunc.fixturenames):
        try:
            refuse_on_worker(metafunc.config)
        except PerfgateError as e:
            raise pytest.Collector.CollectError(f"perfgate: {e}") from None
    if "perf_workload" in metafunc.fixturenames:
        state = metafunc.config.stash[STATE_KEY]
        profile = state.profile()
        # Metric names (and an A/B's candidate) are checked here too, so a misspelt one stops the
        # run before anything boots.
        try:
            state.check_ab() if state.ab_mode else state.gate_session()
        except PerfgateError as e:
            raise pytest.Collector.CollectError(f"perfgate: {e}") from None
        metafunc.parametrize("perf_workload", profile.workloads, ids=[w.name for w in profile.workloads])
    if "perf_sweep" in metafunc.fixturenames:
        profile = metafunc.config.stash[STATE_KEY].profile()
        if profile.sweeps:
            metafunc.parametrize("perf_sweep", profile.sweeps, ids=[s.name for s in profile.sweeps])
        else:
            skip = pytest.mark.skip(reason="the profile has no sweep (concurrency = [...] or request_rate = [...])")
            metafunc.parametrize("perf_sweep", [pytest.param(None, marks=skip, id="no-sweep")])


def _header(summary: RunSummary) -> list[str]:
    lines = [f"profile: {summary.profile_name} ({summary.profile_path})"]
    server = summary.server
    if server is not None:
        version = server.version or "unknown version"
        lines.append(
            f"target: {server.kind} {server.model} at {server.base_url} ({version}), ready in {server.boot_s:.1f} s"
        )
    gpus = summary.gpus
    if gpus:
        names = sorted({g.name for g in gpus})
        limits = sorted({f"{g.power_limit_w:.0f} W" for g in gpus if g.power_limit_w})
        lines.append(
            f"GPUs: {len(gpus)} x {', '.join(names)}, enforced power limit {', '.join(limits) or 'not reported'} "
            f"(telemetry from {summary.power_source})"
        )
    else:
        lines.append(f"GPU power: not measured ({summary.telemetry_note})")
    if summary.server_metrics_url:
        # A note beside the URL: the source was dropped mid-run (an answer past a bound).
        note = f" ({summary.server_metrics_note})" if summary.server_metrics_note else ""
        lines.append(f"server metrics: {summary.server_metrics_url}{note}")
    elif summary.server_metrics_note:
        lines.append(f"server metrics: {summary.server_metrics_note}")
    if summary.host_cpu_note:
        lines.append(f"host CPU: {summary.host_cpu_note}")
    autotune = server.provenance.get("autotune") if server is not None else None
    # A server kind without the autotune (the simulator, vLLM, an attached one) records none.
    if isinstance(autotune, dict) and autotune:
        lines.append(f"autotune: {describe_autotune(autotune)}")
    return lines


def _baseline_lines(name: str, judged: WorkloadResult | SweepResult) -> list[str]:
    """What a workload or sweep did with its baseline, what changed in the stack since it was
    recorded, and the ratchet, one line each where there is something to say."""
    lines = []
    if judged.baseline_note:
        recorded = f" -> {judged.baseline_path}" if judged.recorded else ""
        lines.append(f"baseline: {name}: {judged.baseline_note}{recorded}")
    if judged.changes:
        lines.append(f"changed since the baseline: {name}: {'; '.join(judged.changes)}")
    if judged.improved:
        lines.append(f"ratchet: {name}: {ratchet_note(judged.improved)}")
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = terminalreporter.config.stash.get(STATE_KEY, None)
    if state is not None and state.ab is not None:
        terminalreporter.write_sep("=", "perfgate ab summary")
        for line in report_lines(state.ab):
            terminalreporter.write_line(line)
        _artefact_lines(terminalreporter, state)
        return
    if state is None or state.session is None or not (state.session.results or state.session.correctness):
        return
    summary = state.summary()
    terminalreporter.write_sep("=", "perfgate summary")
    for line in _header(summary):
        terminalreporter.write_line(line)
    table = rows(summary)
    if table:
        terminalreporter.write_line("")
        terminalreporter.write_line(render_text(table))
    for res in summary.workloads:
        for note in dict.fromkeys(note for rep in res.repeats for note in rep.notes()):
            terminalreporter.write_line(f"note: {res.workload}: {note}")
        answers = res.answers_summary()
        if answers:
            terminalreporter.write_line(f"load answers: {res.workload}: {answers}")
        host_bound = res.host_bound_summary()
        if host_bound:
            terminalreporter.write_line(f"{res.workload}: {host_bound}")
        for line in _baseline_lines(res.workload, res):
            terminalreporter.write_line(line)
        if res.explain is not None:
            terminalreporter.write_line(f"explain: {res.workload}: {res.explain.status()}")
    for sw in summary.sweeps:
        for note in sw.notes:
            terminalreporter.write_line(f"note: {sw.sweep}: {note}")
        for line in _baseline_lines(sw.sweep, sw):
            terminalreporter.write_line(line)
    c = summary.correctness
    if c is not None:
        took = f" in {c.outcome.duration_s:.1f} s ({c.outcome.in_flight()})" if c.outcome is not None else ""
        recorded = f" -> {c.baseline_path}" if c.recorded else ""
        terminalreporter.write_line(f"correctness: probe{took}; {c.note or c.error}{recorded}")
    if state.unreported_correctness:
        terminalreporter.write_line(
            "correctness: FAILED, and test_correctness was not selected: the run fails all the same; "
            + state.unreported_correctness
        )
    for note in summary.store_notes:
        terminalreporter.write_line(f"baseline store: {note}")
    # pytest's own line says only how many were skipped; which and why is part of the verdict.
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        test = getattr(report, "nodeid", "").rpartition("::")[2]
        terminalreporter.write_line(f"skipped: {test}: {reason.removeprefix('Skipped: ')}")
    for name, err in summary.failures.items():
        # The whole message is in the test report; one line here says which workload it stopped.
        terminalreporter.write_line(f"error: {name}: {err.splitlines()[0]}")
    for note in summary.teardown_notes:
        terminalreporter.write_line(f"teardown: {note}")
    _artefact_lines(terminalreporter, state)


def _artefact_lines(terminalreporter: pytest.TerminalReporter, state: PluginState) -> None:
    for line in [*state.artefacts.skipped, *state.artefacts.failed]:
        terminalreporter.write_line(f"results: {line}")
    if state.artefacts.failed:
        terminalreporter.write_line(
            f"results: {len(state.artefacts.failed)} file(s) not written; the run exits {EXIT_NOT_WRITTEN} "
            "unless it failed already (free space or fix the results folder, and run again)"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(STATE_KEY, None)
    if state is None:
        return
    results_dir = state.results_dir()
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if state.ab is not None and results_dir is not None:
        state.artefacts = write_ab_results(state.ab, results_dir, step_summary=step_summary)
    if state.session is not None:
        # Fixture teardown has run by now (pytest tears down session fixtures first), but a run
        # interrupted before fixtures were set up still needs its server stopped.
        state.close()
        probe = state.session.correctness
        if probe is not None and not probe.passed and session.exitstatus == pytest.ExitCode.OK:
            # test_correctness did not run (-k, --deselect) or it would have failed the run: a fast
            # server computing the wrong model is never green because its test was not selected.
            state.unreported_correctness = probe.failure_message()
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if results_dir is not None and (state.session.results or state.session.correctness):
            state.artefacts = write_results(state.summary(), results_dir, step_summary=step_summary)
    if state.artefacts.failed and session.exitstatus == pytest.ExitCode.OK:
        # The gate's verdict is printed, but the files CI keeps of it are not all there: a run
        # that did not complete cleanly is not green.
        session.exitstatus = EXIT_NOT_WRITTEN


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is not None:
        state.close()


__all__ = [
    "pytest_configure",
    "pytest_generate_tests",
    "pytest_make_collect_report",
    "pytest_runtest_makereport",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_unconfigure",
]
