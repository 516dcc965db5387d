"""A gate session: boot the server once, run each workload's repeats under telemetry,
judge them against the baseline store, and record baselines when asked.

The pytest plugin is a thin layer over this class; nothing here imports pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from perfgate.baseline import BaselineStore, Fingerprint, fingerprint_for, others_note
from perfgate.errors import BaselineError, LoadError, PerfgateError, ProfileError, TelemetryError
from perfgate.gpu import Hardware, host_without_gpus
from perfgate.load import ClientLimits, LoadRun, Progress, run_workload
from perfgate.metrics import ServingMetrics, compute_metrics
from perfgate.profile import Profile, Workload
from perfgate.server import RunningServer, ServerConfig, server_config, start_server
from perfgate.session._record import record_baseline
from perfgate.session._result import RepeatResult, WorkloadResult
from perfgate.session._summary import RunSummary, ServerSummary
from perfgate.telemetry import GpuIdentity, Monitor, NotMeasured, open_monitor
from perfgate.verdict import MetricRule, WorkloadVerdict, judge, rules_for


RepeatRunner = Callable[[Callable[[], None], int], None]


def _call_n_times(fn: Callable[[], None], n: int) -> None:
    for _ in range(n):
        fn()


@dataclass(frozen=True)
class SessionOptions:
    baselines_dir: Path
    log_dir: Path
    base_url: str = ""
    update_baselines: bool = False
    accept_regression: str | None = None
    repeats: int | None = None
    lock_wait_s: float = 0.0
    # perfgate ab: the session runs the repeats and nothing else (no baseline read or written,
    # nothing judged, no reruns); the A/B judges pairs of sessions itself.
    measure_only: bool = False


def _failed_summary(load: LoadRun) -> str:
    failed = [r.error for r in load.records if r.error]
    if not failed:
        return "no request had failed yet"
    return f"{len(failed)} of {len(load.records)} requests failed; first: {failed[0]}"


class Session:
    """One gate run over a profile.

    Everything that can be checked without the server is checked in the constructor (metric
    names, every baseline file of the profile, a writable store when recording), so a bad
    input stops the run before a multi-minute boot. ``results`` holds every workload that ran,
    also one that failed part-way (with its completed repeats and ``error``); ``failures``
    the error each failed workload raised.
    """

    def __init__(self, profile: Profile, options: SessionOptions) -> None:
        if options.repeats is not None and options.repeats < 1:
            raise PerfgateError(f"repeats must be at least 1, got {options.repeats}")
        self.profile = profile
        self.options = options
        self.store = BaselineStore(options.baselines_dir)
        self._stack = ExitStack()
        self._server: RunningServer | None = None
        self._server_error: PerfgateError | None = None
        self._config: ServerConfig | None = None
        self._monitor: Monitor | None = None
        self.telemetry_note = ""
        self.results: dict[str, WorkloadResult] = {}
        self.failures: dict[str, PerfgateError] = {}
        # Rules are validated up front so a misspelt metric stops the run before anything boots.
        self._rules = {}
        for w in profile.workloads:
            try:
                self._rules[w.name] = rules_for(profile.gate, w)
            except ValueError as e:
                raise ProfileError(f"profile {profile.path}: {e}") from None
        self.store_notes = [] if options.measure_only else self.store.check(profile.name, for_update=options.update_baselines)

    # -- server and telemetry -------------------------------------------------------------
    def server(self) -> RunningServer:
        """The server, booted on first use; a boot that failed is not retried (its error is raised again)."""
        if self._server_error is not None:
            raise self._server_error
        if self._server is None:
            try:
                self._server = start_server(
                    self.profile.server,
                    log_dir=self.options.log_dir,
                    stack=self._stack,
                    base_url=self.options.base_url,
                    lock_wait_s=self.options.lock_wait_s,
                )
                self._open_telemetry(self._server)
            except PerfgateError as e:
                self._server_error = e
                raise
        return self._server

    def _check_server(self, server: RunningServer, doing: str) -> None:
        """Raise (and remember) a ServerError when the launched server has died."""
        died = server.died(doing)
        if died is not None:
            self._server_error = died
            raise died

    def _open_telemetry(self, server: RunningServer) -> None:
        spec = self.profile.telemetry
        monitor = open_monitor(spec, gpus=server.telemetry_gpus, base_url=server.base_url)
        if isinstance(monitor, NotMeasured):
            self.telemetry_note = monitor.reason
            if spec.require_power:
                raise TelemetryError(
                    f"profile {self.profile.path}: [telemetry] require_power = true but power cannot be measured: {monitor.reason}"
                )
            return
        monitor.start()
        self._stack.callback(monitor.stop)
        self._monitor = monitor

    def summary(self, teardown_notes: tuple[str, ...] = ()) -> RunSummary:
        """The run so far as plain data for reports."""
        server = None
        if self._server is not None:
            s = self._server
            server = ServerSummary(s.kind, s.model, s.base_url, s.versions.get("server", ""), s.boot_s, s.provenance())
        return RunSummary(
            profile_name=self.profile.name,
            profile_path=str(self.profile.path),
            server=server,
            gpus=tuple(self.gpus()),
            power_source=self._monitor.source if self._monitor is not None else "",
            telemetry_note=self.telemetry_note,
            workloads=tuple(self.results.values()),
            rules={name: tuple(rules) for name, rules in self._rules.items()},
            error_rates={w.name: w.max_error_rate for w in self.profile.workloads},
            store_notes=tuple(self.store_notes),
            teardown_notes=teardown_notes,
        )

    def gpus(self) -> list[GpuIdentity]:
        return self._monitor.gpus() if self._monitor is not None else []

    def close(self) -> list[str]:
        self._stack.close()
        return self._server.notes if self._server else []

    # -- workloads ------------------------------------------------------------------------
    def repeats_for(self, workload: Workload) -> int:
        return self.options.repeats or self.profile.repeats_for(workload)

    def run(
        self,
        workload: Workload,
        on_progress: Callable[[Progress], None] | None = None,
        repeat_runner: RepeatRunner | None = None,
    ) -> WorkloadResult:
        """Run (once per session) and judge ``workload``; later calls return the cached result.

        ``repeat_runner(one_repeat, n)`` must call ``one_repeat`` n times; the plugin passes
        pytest-benchmark's pedantic mode so each repeat is also a timed benchmark round. On a
        PerfgateError the repeats completed so far stay in ``results`` with the error.
        """
        return self._once(workload, lambda repeats: self._run(workload, repeats, on_progress, repeat_runner or _call_n_times))

    def measure(self, workload: Workload, on_progress: Callable[[Progress], None] | None = None) -> WorkloadResult:
        """Run ``workload``'s repeats and nothing more: no verdict, no baseline, no reruns
        (``perfgate ab`` judges pairs of sessions itself). Cached, and kept on errors, as :meth:`run`."""

        def measure_only(repeats: list[RepeatResult]) -> WorkloadResult:
            _, fingerprint = self._measure(workload, repeats, on_progress, _call_n_times)
            return WorkloadResult(
                workload=workload.name,
                repeats=repeats,
                invalid_reasons=self._invalid_reasons(workload, repeats),
                fingerprint=fingerprint,
            )

        return self._once(workload, measure_only)

    def _once(self, workload: Workload, body: Callable[[list[RepeatResult]], WorkloadResult]) -> WorkloadResult:
        if workload.name in self.failures:
            raise self.failures[workload.name]
        if workload.name in self.results:
            return self.results[workload.name]
        repeats: list[RepeatResult] = []
        try:
            result = body(repeats)
        except PerfgateError as e:
            self.failures[workload.name] = e
            self.results[workload.name] = WorkloadResult(
                workload=workload.name, repeats=repeats, invalid_reasons=self._invalid_reasons(workload, repeats), error=str(e)
            )
            raise
        self.results[workload.name] = result
        return result

    def _measure(
        self,
        workload: Workload,
        repeats: list[RepeatResult],
        on_progress: Callable[[Progress], None] | None,
        repeat_runner: RepeatRunner,
    ) -> tuple[Callable[[], None], Fingerprint]:
        """Run the workload's repeats into ``repeats``; return the function that runs one more
        and the fingerprint the results belong to."""
        server = self.server()
        self._check_server(server, f"before workload {workload.name}")
        n = self.repeats_for(workload)

        def one_repeat() -> None:
            doing = f"during workload {workload.name} (repeat {len(repeats) + 1})"
            if self._monitor is not None:
                # Energy-counter reads bracket the run, so its windows' energy is exact at the edges.
                self._monitor.mark()
            try:
                load = run_workload(
                    server.base_url,
                    workload,
                    model=server.model,
                    api_key_env=self.profile.server.api_key_env,
                    admin_api_key_env=self.profile.server.admin_api_key_env,
                    limits=ClientLimits(self.profile.gate.client_max_lag_p99_ms, self.profile.gate.client_max_cpu_share),
                    on_progress=on_progress,
                    repeat=len(repeats),
                    keep_alive=self.profile.server.keep_alive,
                )
            except LoadError as e:
                # Requests to a dead server fail as connection errors: say that the server died, and how.
                self._check_server(server, f"{doing}: {e}")
                raise
            if self._monitor is not None:
                self._monitor.mark()
            self._check_server(server, f"{doing}: {_failed_summary(load)}")
            metrics = compute_metrics(load, target_concurrency=min(workload.concurrency, workload.num_prompts))
            repeats.append(self._with_telemetry(load, metrics))

        repeat_runner(one_repeat, n)
        if len(repeats) != n:
            raise PerfgateError(f"workload {workload.name}: {len(repeats)} of {n} repeats ran; the repeat runner must run each once")
        return one_repeat, self._fingerprint(server, workload)

    def _run(
        self,
        workload: Workload,
        repeats: list[RepeatResult],
        on_progress: Callable[[Progress], None] | None,
        repeat_runner: RepeatRunner,
    ) -> WorkloadResult:
        one_repeat, fingerprint = self._measure(workload, repeats, on_progress, repeat_runner)
        n = self.repeats_for(workload)
        baseline = self.store.load(self.profile.name, workload.name, fingerprint)
        note = ""
        if baseline is None:
            note = others_note(fingerprint, self.store.others(self.profile.name, workload.name, fingerprint))
        gate = self.profile.gate

        def verdict_now() -> WorkloadVerdict:
            return judge(
                workload.name,
                self._rules[workload.name],
                [r.flat_metrics() for r in repeats],
                baseline.repeats if baseline else None,
                alpha=gate.alpha,
                require_baseline=gate.require_baseline and not self.options.update_baselines,
                no_baseline_note=note,
                inconclusive=gate.inconclusive,
            )

        verdict = verdict_now()
        if not self.options.update_baselines:
            if gate.confirm_on_fail and verdict.failures and not verdict.inconclusive:
                # A failure is confirmed on twice the evidence: the same number of repeats again,
                # judged together with the first ones, before it is reported.
                _call_n_times(one_repeat, n)
                verdict = verdict_now()
            # Past the limit but not yet distinguishable from noise: more repeats decide it.
            max_repeats = max(self.profile.max_repeats_for(workload), n)
            while verdict.inconclusive and len(repeats) < max_repeats:
                one_repeat()
                verdict = verdict_now()
        result = WorkloadResult(
            workload=workload.name,
            repeats=repeats,
            invalid_reasons=self._invalid_reasons(workload, repeats),
            verdict=verdict,
            fingerprint=fingerprint,
            baseline_path=str(self.store.path_for(self.profile.name, workload.name, fingerprint)) if baseline else "",
            baseline_note=note,
            previous_values=baseline.medians() if baseline else {},
        )
        if self.options.update_baselines:
            self._record(workload, result)
            if result.recorded:
                # The accepted numbers are now the baseline: the tests pass against them, and the
                # summary shows the previous baseline next to them (old -> new).
                result.verdict = judge(
                    workload.name,
                    self._rules[workload.name],
                    result.repeat_metrics(),
                    result.repeat_metrics(),
                    alpha=gate.alpha,
                )
        return result

    def _with_telemetry(self, load: LoadRun, metrics: ServingMetrics) -> RepeatResult:
        """Line telemetry up with the steady window, or the whole measured phase when there is none."""
        if self._monitor is None:
            return RepeatResult(load, metrics, None, self.telemetry_note or "telemetry disabled")
        steady = metrics.steady
        t0, t1 = (steady.start_s, steady.end_s) if steady is not None else (load.start_s, load.end_s)
        return RepeatResult(
            load,
            metrics,
            self._monitor.summarize(t0, t1),
            "steady window" if steady is not None else "whole measured phase",
            self._monitor.timeline(load.start_s, load.end_s),
        )

    def _invalid_reasons(self, workload: Workload, repeats: list[RepeatResult]) -> list[str]:
        reasons = []
        for i, r in enumerate(repeats, start=1):
            total = len(r.load.records)
            failed = r.metrics.failed
            if total and failed / total > workload.max_error_rate:
                kinds = ", ".join(f"{n} {k}" for k, n in sorted(r.metrics.errors.items()))
                first = next(rec.error for rec in r.load.records if rec.error)
                reasons.append(
                    f"repeat {i}: {failed} of {total} requests failed ({kinds}); first: {first}"
                    + (f" (allowed error rate {workload.max_error_rate:.1%})" if workload.max_error_rate else "")
                )
            client = r.load.client
            if not client.valid:
                reasons.append(f"repeat {i}: the load client, not the server, set the pace ({client.reason}): {client.advice}")
        return reasons

    def hardware(self) -> Hardware:
        """The hardware of this run: from telemetry, else what the server reports about itself
        (the simulator's GPUs), else the profile's GPUs unread, else the host's processor."""
        gpus = self.gpus()
        if gpus:
            return Hardware(gpus[0].name, len(gpus), gpus[0].power_limit_w, gpus[0].driver_version)
        reported = self._server.hardware() if self._server is not None else None
        if reported is not None:
            return reported
        if self.profile.server.gpus:
            return Hardware("unknown", len(self.profile.server.gpus), None, "")
        return host_without_gpus()

    def server_config(self) -> ServerConfig:
        """The server's engine and flags as fingerprints see them (read once: it may run ``--help``)."""
        if self._config is None:
            self._config = server_config(self.profile.server)
        return self._config

    def _fingerprint(self, server: RunningServer, workload: Workload) -> Fingerprint:
        spec = self.profile.server
        config = self.server_config()
        return fingerprint_for(
            # --perf-base-url attaches to a server started as the profile describes: same fingerprint.
            engine=config.engine,
            model=spec.model_path or server.model,
            server_args=config.args,
            flag_aliases=config.flag_aliases,
            workload=workload,
            **asdict(self.hardware()),
        )

    def _record(self, workload: Workload, result: WorkloadResult) -> None:
        if not result.valid:
            result.baseline_note = "not recorded: the run was invalid (" + "; ".join(result.invalid_reasons) + ")"
            return
        try:
            path = record_baseline(
                self.store,
                self.profile,
                workload.name,
                result.fingerprint,
                result.repeats,
                server_provenance=self.server().provenance(),
                rules=self._rules[workload.name],
                reason=self.options.accept_regression,
            )
        except BaselineError as e:
            result.baseline_note = f"not recorded: {e}"
            raise
        result.recorded = True
        result.baseline_path = str(path)
        result.baseline_note = "; ".join(["recorded", *self.store.take_notes()])
