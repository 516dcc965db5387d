"""A gate session: boot the server once, run each workload's repeats under telemetry,
judge them against the baseline store, and record baselines when asked.

The pytest plugin is a thin layer over this class; nothing here imports pytest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from perfgate.baseline import Baseline, BaselineStore, Fingerprint, fingerprint_for, others_note
from perfgate.errors import BaselineError, LoadError, PerfgateError, ProfileError, TelemetryError
from perfgate.gpu import Hardware, host_without_gpus
from perfgate.load import ClientLimits, LoadRun, Progress, check_dataset, dataset_identity, run_workload
from perfgate.metrics import SLO_METRICS, ServingMetrics, compute_metrics
from perfgate.profile import Profile, Sweep, Workload
from perfgate.server import RunningServer, ServerConfig, server_config, start_server
from perfgate.session._record import record_baseline
from perfgate.session._result import RepeatResult, SweepResult, WorkloadResult
from perfgate.session._summary import RunSummary, ServerSummary
from perfgate.session._sweep import SweepRun
from perfgate.telemetry import (
    SERVER_METRICS,
    GpuIdentity,
    Monitor,
    NotMeasured,
    ServerMonitor,
    open_monitor,
    open_server_monitor,
)
from perfgate.verdict import CAPACITY, MetricRule, MetricVerdict, WorkloadVerdict, capacity_rule, judge, rules_for

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


def _scraping_at_warmup_end(
    scraper: ServerMonitor | None, on_progress: Callable[[Progress], None] | None
) -> Callable[[Progress], None] | None:
    """``on_progress``, also scraping the server's counters when the warmup's last request is done:
    that reading holds the warmup and nothing of the measured phase."""
    if scraper is None:
        return on_progress

    def progress(p: Progress) -> None:
        if p.warmup and p.done == p.total:
            scraper.scrape_now()
        if on_progress is not None:
            on_progress(p)

    return progress


def _check_gate_applies(profile: Profile) -> None:
    """ValueError for a [gate] rule on a metric no workload of the profile can measure: it would
    gate nothing, and say nothing about it."""
    gate = profile.gate
    in_gate = {*gate.tolerance, *gate.floors, *gate.ceilings}
    if CAPACITY in in_gate and not profile.sweeps:
        raise ValueError(
            "[gate] sets capacity, which only sweeps measure (concurrency = [...] or request_rate = "
            "[...]); this profile has none"
        )
    slo_metrics = sorted(in_gate & SLO_METRICS)
    if slo_metrics and not any(w.slo is not None for w in profile.workloads):
        raise ValueError(
            f"[gate] sets {', '.join(slo_metrics)}, which only workloads with an slo measure; "
            "add slo = { ... } to a workload"
        )


# How long a repeat whose connections broke waits to see whether the server is exiting.
_EXIT_GRACE_S = 2.0
# Request errors that a server's exit causes (an HTTP error means it was alive to answer).
_CONNECTION_LOST = ("connection error", "truncated stream")


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
        self._server_monitor: ServerMonitor | None = None
        self.server_metrics_note = ""
        self.results: dict[str, WorkloadResult] = {}
        self.failures: dict[str, PerfgateError] = {}
        self.sweep_results: dict[str, SweepResult] = {}
        # Rules are validated up front so a misspelt metric stops the run before anything boots.
        self._rules: dict[str, list[MetricRule]] = {}
        try:
            for w in profile.workloads:
                self._rules[w.name] = rules_for(profile.gate, w, in_sweep=profile.sweep_of(w) is not None)
            self._sweep_rules = {sw.name: capacity_rule(profile.gate, sw.base) for sw in profile.sweeps}
            _check_gate_applies(profile)
        except ValueError as e:
            raise ProfileError(f"profile {profile.path}: {e}") from None
        self._gated_server_metrics = sorted(
            {r.metric for rules in self._rules.values() for r in rules} & SERVER_METRICS
        )
        if self._gated_server_metrics and not profile.telemetry.server_metrics_path:
            raise ProfileError(
                f'profile {profile.path}: [telemetry] server_metrics_path is "" but '
                f"{', '.join(self._gated_server_metrics)} "
                'is gated: the server\'s metrics are needed; set server_metrics_path = "/metrics"'
            )
        # A ShareGPT file that cannot give the prompts is found before a multi-minute boot.
        for w in profile.workloads:
            check_dataset(w)
        self.store_notes = (
            []
            if options.measure_only
            else self.store.check(profile.name, for_update=options.update_baselines, gated=self.gated_metrics())
        )

    def gated_metrics(self) -> dict[str, list[str]]:
        """Workload and sweep name -> the metrics its baseline is judged on."""
        gated = {name: [r.metric for r in rules] for name, rules in self._rules.items()}
        return gated | {name: [rule.metric] for name, rule in self._sweep_rules.items()}

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

    def _check_server(self, server: RunningServer, doing: str, failures: bool = False) -> None:
        """Raise (and remember) a ServerError when the launched server has died (``failures``: requests
        failed, so an exit may be under way: give it a moment to be seen)."""
        died = server.died(doing, _EXIT_GRACE_S if failures else 0.0)
        if died is not None:
            self._server_error = died
            raise died

    def _open_telemetry(self, server: RunningServer) -> None:
        self._open_server_metrics(server)
        spec = self.profile.telemetry
        monitor = open_monitor(spec, gpus=server.telemetry_gpus, base_url=server.base_url)
        if isinstance(monitor, NotMeasured):
            self.telemetry_note = monitor.reason
            if spec.require_power:
                raise TelemetryError(
                    f"profile {self.profile.path}: [telemetry] require_power = true but power cannot be measured: "
                    f"{monitor.reason}"
                )
            return
        monitor.start()
        self._stack.callback(monitor.stop)
        self._monitor = monitor

    def _open_server_metrics(self, server: RunningServer) -> None:
        spec = self.profile.telemetry
        if not spec.server_metrics_path:
            self.server_metrics_note = 'not read ([telemetry] server_metrics_path = "")'
            return
        try:
            monitor = open_server_monitor(
                server.base_url, spec.server_metrics_path, interval_s=spec.server_metrics_interval_s
            )
        except TelemetryError as e:
            if self._gated_server_metrics:
                raise TelemetryError(
                    f"profile {self.profile.path}: {', '.join(self._gated_server_metrics)} is gated but {e}"
                ) from None
            self.server_metrics_note = str(e)
            return
        self._stack.callback(monitor.stop)
        self._server_monitor = monitor

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
            server_metrics_url=self._server_monitor.url if self._server_monitor is not None else "",
            server_metrics_note=self.server_metrics_note,
            workloads=tuple(self.results.values()),
            sweeps=tuple(self.sweep_results.values()),
            rules={name: tuple(rules) for name, rules in self._rules.items()}
            | {name: (rule,) for name, rule in self._sweep_rules.items()},
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

    def run_sweep(self, sweep: Sweep, on_progress: Callable[[Progress], None] | None = None) -> SweepResult:
        """Run (once per session) every load of ``sweep`` and judge its capacity; later calls return
        the cached result. A point that stops raises its error (also on later calls)."""
        if sweep.name in self.failures:
            raise self.failures[sweep.name]
        if sweep.name not in self.sweep_results:
            run = SweepRun(self, sweep, self._sweep_rules[sweep.name], on_progress)
            try:
                run.run()
            except PerfgateError as e:
                run.result.error = str(e)
                self.failures[sweep.name] = e
                raise
            finally:
                self.sweep_results[sweep.name] = run.result
        return self.sweep_results[sweep.name]

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
        return self._once(
            workload, lambda repeats: self._run(workload, repeats, on_progress, repeat_runner or _call_n_times)
        )

    def measure(self, workload: Workload, on_progress: Callable[[Progress], None] | None = None) -> WorkloadResult:
        """Run ``workload``'s repeats and nothing more: no verdict, no baseline, no reruns
        (``perfgate ab`` judges pairs of sessions itself). Cached, and kept on errors, as :meth:`run`."""

        def measure_only(repeats: list[RepeatResult]) -> WorkloadResult:
            _, fingerprint = self._measure(workload, repeats, on_progress, _call_n_times)
            return WorkloadResult(
                workload=workload.name,
                repeats=repeats,
                invalid_reasons=self.invalid_reasons(workload, repeats),
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
                workload=workload.name,
                repeats=repeats,
                invalid_reasons=self.invalid_reasons(workload, repeats),
                error=str(e),
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
        n = self.repeats_for(workload)
        one_repeat = self.repeat_fn(workload, repeats, on_progress)
        repeat_runner(one_repeat, n)
        if len(repeats) != n:
            raise PerfgateError(
                f"workload {workload.name}: {len(repeats)} of {n} repeats ran; the repeat runner must run each once"
            )
        return one_repeat, self.fingerprint({**workload.spec(), **dataset_identity(workload)})

    def _run(
        self,
        workload: Workload,
        repeats: list[RepeatResult],
        on_progress: Callable[[Progress], None] | None,
        repeat_runner: RepeatRunner,
    ) -> WorkloadResult:
        one_repeat, fingerprint = self._measure(workload, repeats, on_progress, repeat_runner)
        n = self.repeats_for(workload)
        rules = self._rules[workload.name]
        baseline, note = self.baseline_for(workload.name, fingerprint)

        def verdict_now() -> WorkloadVerdict[MetricVerdict]:
            return self.judge(workload.name, rules, [r.flat_metrics() for r in repeats], baseline, note)

        verdict = self.decide(
            verdict_now, lambda: _call_n_times(one_repeat, 1), n, max(self.profile.max_repeats_for(workload), n)
        )
        result = WorkloadResult(
            workload=workload.name,
            repeats=repeats,
            invalid_reasons=self.invalid_reasons(workload, repeats),
            verdict=verdict,
            fingerprint=fingerprint,
            baseline_path=str(self.store.path_for(self.profile.name, workload.name, fingerprint)) if baseline else "",
            baseline_note=note,
            previous_values=baseline.medians() if baseline else {},
        )
        if self.options.update_baselines:
            if not result.valid:
                result.baseline_note = "not recorded: the run was invalid (" + "; ".join(result.invalid_reasons) + ")"
                return result
            try:
                path = record_baseline(
                    self.store,
                    self.profile,
                    workload.name,
                    fingerprint,
                    repeats,
                    server_provenance=self.server().provenance(),
                    rules=rules,
                    reason=self.options.accept_regression,
                )
            except BaselineError as e:
                result.baseline_note = f"not recorded: {e}"
                raise
            result.recorded, result.baseline_path = True, str(path)
            result.baseline_note = "; ".join(["recorded", *self.store.take_notes()])
            # The accepted numbers are now the baseline: the tests pass against them, and the
            # summary shows the previous baseline next to them (old -> new).
            result.verdict = judge(
                workload.name, rules, result.repeat_metrics(), result.repeat_metrics(), alpha=self.profile.gate.alpha
            )
        return result

    def baseline_for(self, name: str, fingerprint: Fingerprint) -> tuple[Baseline | None, str]:
        """The stored baseline of ``name`` for ``fingerprint``, or None and a note on the others that exist."""
        baseline = self.store.load(self.profile.name, name, fingerprint)
        if baseline is not None:
            return baseline, ""
        return None, others_note(fingerprint, self.store.others(self.profile.name, name, fingerprint))

    def judge(
        self,
        name: str,
        rules: Sequence[MetricRule],
        current: list[dict[str, float]],
        baseline: Baseline | None,
        note: str,
    ) -> WorkloadVerdict[MetricVerdict]:
        """``current`` repeats against ``baseline`` under the profile's [gate] policy."""
        gate = self.profile.gate
        return judge(
            name,
            rules,
            current,
            baseline.repeats if baseline else None,
            alpha=gate.alpha,
            require_baseline=gate.require_baseline and not self.options.update_baselines,
            no_baseline_note=note,
            inconclusive=gate.inconclusive,
        )

    def decide(
        self,
        verdict_now: Callable[[], WorkloadVerdict[MetricVerdict]],
        more: Callable[[], None],
        n: int,
        max_repeats: int,
    ) -> WorkloadVerdict[MetricVerdict]:
        """The verdict after the [gate] policy's extra repeats (``more()`` runs one): a failure is
        confirmed on twice the evidence with ``confirm_on_fail``, and a verdict past its limit but
        not yet told from noise gets repeats up to ``max_repeats``. None when recording."""
        verdict = verdict_now()
        if self.options.update_baselines:
            return verdict
        gate = self.profile.gate
        if gate.confirm_on_fail and verdict.failures and not verdict.inconclusive:
            # The same number of repeats again, judged together with the first ones.
            for _ in range(n):
                more()
            verdict = verdict_now()
        done = n * (2 if gate.confirm_on_fail and verdict.failures else 1)
        while verdict.inconclusive and done < max_repeats:
            more()
            done += 1
            verdict = verdict_now()
        return verdict

    def repeat_fn(
        self, workload: Workload, repeats: list[RepeatResult], on_progress: Callable[[Progress], None] | None
    ) -> Callable[[], None]:
        """A function that runs one more measured repeat of ``workload`` and appends it to ``repeats``
        (the server is booted first if need be; a server that died raises ServerError)."""
        server = self.server()
        self._check_server(server, f"before workload {workload.name}")

        def one_repeat() -> None:
            doing = f"during workload {workload.name} (repeat {len(repeats) + 1})"
            if self._monitor is not None:
                # Energy-counter reads bracket the run, so its windows' energy is exact at the edges.
                self._monitor.mark()
            scraper = self._server_monitor
            if scraper is not None:
                scraper.scrape_now()
            try:
                load = run_workload(
                    server.base_url,
                    workload,
                    model=server.model,
                    api_key_env=self.profile.server.api_key_env,
                    admin_api_key_env=self.profile.server.admin_api_key_env,
                    limits=ClientLimits(
                        self.profile.gate.client_max_lag_p99_ms, self.profile.gate.client_max_cpu_share
                    ),
                    on_progress=_scraping_at_warmup_end(scraper, on_progress),
                    repeat=len(repeats),
                    keep_alive=self.profile.server.keep_alive,
                )
            except LoadError as e:
                # Requests to a dead server fail as connection errors: say that the server died, and how.
                self._check_server(server, f"{doing}: {e}", failures=True)
                raise
            if self._monitor is not None:
                self._monitor.mark()
            lost = any(r.error.startswith(_CONNECTION_LOST) for r in load.records)
            self._check_server(server, f"{doing}: {_failed_summary(load)}", failures=lost)
            metrics = compute_metrics(
                load, target_concurrency=min(workload.concurrency, workload.num_prompts), slo=workload.slo
            )
            repeats.append(self._with_telemetry(load, metrics))

        return one_repeat

    def _with_telemetry(self, load: LoadRun, metrics: ServingMetrics) -> RepeatResult:
        """Line telemetry and the server's gauges up with the steady window, or the whole measured
        phase when there is none; the server's counters cover the whole measured phase."""
        steady = metrics.steady
        t0, t1 = (steady.start_s, steady.end_s) if steady is not None else (load.start_s, load.end_s)
        server, server_note = None, self.server_metrics_note
        if self._server_monitor is not None:
            self._server_monitor.scrape_now()
            try:
                server = self._server_monitor.summarize(load.start_s, load.end_s, t0, t1)
            except TelemetryError as e:
                server_note = str(e)
        if self._monitor is None:
            return RepeatResult(
                load, metrics, None, self.telemetry_note or "telemetry disabled", server=server, server_note=server_note
            )
        return RepeatResult(
            load,
            metrics,
            self._monitor.summarize(t0, t1),
            "steady window" if steady is not None else "whole measured phase",
            self._monitor.timeline(load.start_s, load.end_s),
            server=server,
            server_note=server_note,
        )

    def invalid_reasons(
        self, workload: Workload, repeats: list[RepeatResult], *, count_failures: bool = True
    ) -> list[str]:
        """Why these repeats of ``workload`` do not describe the server under this load alone;
        ``count_failures`` = False leaves failed requests out (a sweep counts them beyond the SLO)."""
        reasons = []
        for i, r in enumerate(repeats, start=1):
            total = len(r.load.records)
            failed = r.metrics.failed
            if count_failures and r.metrics.completed == 0:
                # Whatever max_error_rate allows: zeros measured nothing, and a baseline of them
                # would let every later run pass.
                first = next((rec.error for rec in r.load.records if rec.error), "")
                reasons.append(
                    f"repeat {i}: no request completed ({failed} of {total} failed"
                    + (f"; first: {first}" if first else "")
                    + "): nothing was measured"
                )
            elif count_failures and total and failed / total > workload.max_error_rate:
                kinds = ", ".join(f"{n} {k}" for k, n in sorted(r.metrics.errors.items()))
                first = next(rec.error for rec in r.load.records if rec.error)
                reasons.append(
                    f"repeat {i}: {failed} of {total} requests failed ({kinds}); first: {first}"
                    + (f" (allowed error rate {workload.max_error_rate:.1%})" if workload.max_error_rate else "")
                )
            steady = r.metrics.steady
            if steady is not None and steady.output_tokens == 0:
                reasons.append(
                    f"repeat {i}: its {steady.length_s:.1f} s steady window holds no output token: the steady "
                    "figures measured nothing (raise num_prompts or lower concurrency so that tokens arrive "
                    "while the load holds)"
                )
            client = r.load.client
            if not client.valid:
                reasons.append(
                    f"repeat {i}: the load client, not the server, set the pace ({client.reason}): {client.advice}"
                )
            gap = r.output_token_gap()
            bound = self.profile.gate.server_max_disagreement
            if gap is not None and abs(gap) > bound:
                reasons.append(
                    f"repeat {i}: the server's /metrics counted {gap:+.1%} output tokens against the client's "
                    f"(more than [gate] server_max_disagreement {bound:.0%}): another load shared the server during "
                    "the run, or the client or the server miscounts tokens; the numbers do not describe this "
                    "workload alone"
                )
            values = r.flat_metrics()
            # A NaN (e.g. a gauge the server reports as NaN) is not a measurement either.
            missing = [
                m
                for m in self._gated_server_metrics
                if m in self._rule_names(workload) and not math.isfinite(values.get(m, math.nan))
            ]
            if missing:
                why = r.server_note or "the server's /metrics does not report it"
                reasons.append(f"repeat {i}: gated {', '.join(missing)} not measured ({why})")
        return reasons

    def _rule_names(self, workload: Workload) -> set[str]:
        return {rule.metric for rule in self._rules.get(workload.name, ())}

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

    def fingerprint(self, spec: Mapping[str, object]) -> Fingerprint:
        """The fingerprint of what ``spec`` measures (a workload's or a sweep's) on this server and hardware."""
        server = self.server()
        config = self.server_config()
        return fingerprint_for(
            # --perf-base-url attaches to a server started as the profile describes: same fingerprint.
            engine=config.engine,
            model=self.profile.server.model_path or server.model,
            server_args=config.args,
            flag_aliases=config.flag_aliases,
            workload=spec,
            **asdict(self.hardware()),
        )

    def save_baseline(
        self, name: str, fingerprint: Fingerprint, repeats: list[dict[str, float]], rules: Sequence[MetricRule]
    ) -> tuple[Path, str]:
        """Store ``repeats`` (numbers that are not a workload's repeats: a sweep's capacity per
        repeat) as the baseline of ``name``; returns its path and the store's note. BaselineError
        when the store refuses (e.g. worse without --perf-accept-regression)."""
        path = record_baseline(
            self.store,
            self.profile,
            name,
            fingerprint,
            repeats,
            server_provenance=self.server().provenance(),
            rules=rules,
            reason=self.options.accept_regression,
        )
        return path, "; ".join(["recorded", *self.store.take_notes()])
