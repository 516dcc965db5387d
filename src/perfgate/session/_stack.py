"""A session's server stack: the server (booted once), its telemetry and server-metrics monitors,
one measured repeat under them, and the fingerprint of what it measures on this hardware."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict

from perfgate.baseline import Fingerprint, fingerprint_for
from perfgate.correctness import AnswerCheck, LoadAnswer, ProbeSpec, check_load_answers, probe_spec
from perfgate.errors import LoadError, PerfgateError, TelemetryError
from perfgate.gpu import Hardware, cpu_description, host_without_gpus
from perfgate.load import ClientLimits, LoadRun, Progress, run_workload
from perfgate.metrics import ServingMetrics, compute_metrics, longest_token_gap, token_gaps
from perfgate.profile import Profile, Workload
from perfgate.server import EXIT_GRACE_S, RunningServer, ServerConfig, server_config, start_server
from perfgate.session._options import SessionOptions
from perfgate.session._result import RepeatResult
from perfgate.session._summary import ServerSummary
from perfgate.telemetry import (
    GpuIdentity,
    HostCpuSampler,
    Monitor,
    NotMeasured,
    ServerMonitor,
    TreeReading,
    cpu_governors,
    host_bound_finding,
    open_host_sampler,
    open_monitor,
    open_server_monitor,
    process_affinity,
)


def _marking_warmup_end(
    at_end: Sequence[Callable[[], None]], on_progress: Callable[[Progress], None] | None
) -> Callable[[Progress], None] | None:
    """``on_progress``, also calling each of ``at_end`` when the warmup's last request is done
    (scraping the server's counters, reading its processes' CPU): those readings hold the warmup
    and nothing of the measured phase."""
    if not at_end:
        return on_progress

    def progress(p: Progress) -> None:
        if p.warmup and p.done == p.total:
            for mark in at_end:
                mark()
        if on_progress is not None:
            on_progress(p)

    return progress


# Request errors that a server's exit causes (an HTTP error means it was alive to answer).
_CONNECTION_LOST = ("connection error", "truncated stream")


def _failed_summary(load: LoadRun) -> str:
    failed = [r.error for r in load.records if r.error]
    if not failed:
        return "no request had failed yet"
    return f"{len(failed)} of {len(load.records)} requests failed; first: {failed[0]}"


class ServerStack:
    """The server and what watches it, for one session; torn down by :meth:`close`.

    ``gated_server_metrics``: the server metrics some rule gates (a /metrics that cannot be read
    is then an error, not a note).
    """

    def __init__(self, profile: Profile, options: SessionOptions, gated_server_metrics: Sequence[str]) -> None:
        self.profile = profile
        self.options = options
        self._gated_server_metrics = list(gated_server_metrics)
        self._stack = ExitStack()
        self._server: RunningServer | None = None
        self._server_error: PerfgateError | None = None
        self._config: ServerConfig | None = None
        self._monitor: Monitor | None = None
        self.telemetry_note = ""
        self._server_monitor: ServerMonitor | None = None
        self.server_metrics_note = ""
        # Notes of the servers that were stopped for a new boot ([gate] boots).
        self._earlier_notes: list[str] = []
        self._host: HostCpuSampler | None = None
        self.host_cpu_note = ""

    def server_summary(self) -> ServerSummary | None:
        """The booted server as plain data (None before a boot)."""
        s = self._server
        if s is None:
            return None
        return ServerSummary(s.kind, s.model, s.base_url, s.versions.get("server", ""), s.boot_s, s.provenance())

    @property
    def power_source(self) -> str:
        return self._monitor.source if self._monitor is not None else ""

    @property
    def server_metrics_url(self) -> str:
        return self._server_monitor.url if self._server_monitor is not None else ""

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
        died = server.died(doing, EXIT_GRACE_S if failures else 0.0)
        if died is not None:
            self._server_error = died
            raise died

    def _open_telemetry(self, server: RunningServer) -> None:
        self._open_server_metrics(server)
        self._open_host_cpu(server)
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

    def _open_host_cpu(self, server: RunningServer) -> None:
        """Start reading the server's processes' CPU, and record the host they run on."""
        server.host = {"cpu": cpu_description(), "cpu_governor": cpu_governors() or "not exposed (no cpufreq)"}
        if server.process is None:
            self.host_cpu_note = (
                "not checked: the server was not launched by perfgate (attached), its processes are not read"
            )
            return
        try:
            self._host = open_host_sampler(server.process.pid)
        except TelemetryError as e:
            self.host_cpu_note = f"not checked: {e}"
            return
        server.host["affinity"] = process_affinity(self._host)

    def _open_server_metrics(self, server: RunningServer) -> None:
        spec = self.profile.telemetry
        if not spec.server_metrics_path:
            self.server_metrics_note = 'not read ([telemetry] server_metrics_path = "")'
            return
        try:
            monitor = open_server_monitor(
                server.base_url,
                spec.server_metrics_path,
                interval_s=spec.server_metrics_interval_s,
                sglang=server.is_sglang,
            )
        except TelemetryError as e:
            if self._gated_server_metrics:
                raise TelemetryError(
                    f"profile {self.profile.path}: {', '.join(self._gated_server_metrics)} is gated but the"
                    f" server's metrics cannot be read: {e}"
                ) from None
            self.server_metrics_note = str(e)
            return
        self._stack.callback(monitor.stop)
        self._server_monitor = monitor

    def gpus(self) -> list[GpuIdentity]:
        return self._monitor.gpus() if self._monitor is not None else []

    def close(self) -> list[str]:
        self._stack.close()
        return self._earlier_notes + (self._server.notes if self._server else [])

    def reboot(self) -> RunningServer:
        """Stop the launched server and what watches it, and boot it again: the speed a GPU host's
        server gets is set at boot, so only a new boot is a new sample of it."""
        self._stack.close()
        if self._server is not None:
            self._earlier_notes += self._server.notes
        self._stack = ExitStack()
        self._server, self._monitor, self._server_monitor, self._host = None, None, None, None
        self.telemetry_note = self.server_metrics_note = self.host_cpu_note = ""
        return self.server()

    def repeat_fn(
        self,
        workload: Workload,
        repeats: list[RepeatResult],
        on_progress: Callable[[Progress], None] | None,
        per_boot: int | None = None,
    ) -> Callable[[], None]:
        """A function that runs one more measured repeat of ``workload`` and appends it to ``repeats``
        (the server is booted first if need be; a server that died raises ServerError). With
        ``per_boot``, every ``per_boot`` repeats the server is booted again ([gate] boots) and each
        repeat is labelled with its boot, counted from 1 for this workload."""
        self._check_server(self.server(), f"before workload {workload.name}")

        def one_repeat() -> None:
            boot = len(repeats) // per_boot + 1 if per_boot else 1
            if per_boot and repeats and boot > repeats[-1].boot:
                self.reboot()
            server = self.server()
            doing = f"during workload {workload.name} (repeat {len(repeats) + 1}" + (
                f", boot {boot})" if per_boot else ")"
            )
            if self._monitor is not None:
                # Energy-counter reads bracket the run, so its windows' energy is exact at the edges.
                self._monitor.mark()
            scraper = self._server_monitor
            if scraper is not None:
                scraper.scrape_now()
            at_warmup_end: list[Callable[[], None]] = [scraper.scrape_now] if scraper is not None else []
            host = self._host
            host_edges: list[TreeReading] = []
            probe, not_scored = self._answers_asked(workload)
            if host is not None:
                # A warmup's end replaces this reading: the measured phase starts there.
                host_edges.append(host.read())
                at_warmup_end.append(lambda: host_edges.append(host.read()))
            try:
                load = run_workload(
                    server.base_url,
                    workload,
                    model=server.model,
                    headers=server.headers(),
                    flush_headers=server.headers(admin=True),
                    limits=ClientLimits(
                        self.profile.gate.client_max_lag_p99_ms, self.profile.gate.client_max_cpu_share
                    ),
                    on_progress=_marking_warmup_end(at_warmup_end, on_progress),
                    repeat=len(repeats),
                    keep_alive=self.profile.server.keep_alive,
                    # Twice as many as are scored: some sampled requests may fail.
                    keep_answers=2 * self.profile.correctness.load_answers if probe else 0,
                )
            except LoadError as e:
                # Requests to a dead server fail as connection errors: say that the server died, and how.
                self._check_server(server, f"{doing}: {e}", failures=True)
                raise
            if self._monitor is not None:
                self._monitor.mark()
            if host is not None:
                host_edges.append(host.read())
            lost = any(r.error.startswith(_CONNECTION_LOST) for r in load.records)
            self._check_server(server, f"{doing}: {_failed_summary(load)}", failures=lost)
            metrics = compute_metrics(
                load, target_concurrency=min(workload.concurrency, workload.num_prompts), slo=workload.slo
            )
            rep = self._with_telemetry(load, metrics)
            rep.host_cpu_note = self.host_cpu_note
            if host is not None:
                rep.host_cpu = host.window(host_edges[-2], host_edges[-1])
                busy = rep.telemetry.metrics().get("util_gpu_mean_pct") if rep.telemetry is not None else None
                rep.host_bound = host_bound_finding(rep.host_cpu, busy, workload.host_bound_cpu_share)
            rep.max_token_gap_s = workload.max_token_gap_s
            rep.stalls = token_gaps(load, workload.max_token_gap_s) if workload.max_token_gap_s else []
            rep.longest_gap = longest_token_gap(load)
            rep.boot = boot
            rep.answers = self._check_answers(workload, server, load, probe) if probe else AnswerCheck(note=not_scored)
            repeats.append(rep)

        return one_repeat

    def _answers_asked(self, workload: Workload) -> tuple[ProbeSpec | None, str]:
        """The probe that scores the load's answers of ``workload``, or None and why none are scored."""
        spec = probe_spec(self.profile)
        if spec is None:
            return None, "the correctness probe is off"
        if spec.no_score_reason:
            return None, f"[correctness] score = false: {spec.no_score_reason}"
        if workload.backend != "sglang":
            return None, f"the {workload.backend} stream carries no token ids"
        if not self.profile.correctness.load_answers:
            return None, "[correctness] load_answers = 0"
        return spec, ""

    def _check_answers(self, workload: Workload, server: RunningServer, load: LoadRun, probe: ProbeSpec) -> AnswerCheck:
        """Up to ``[correctness] load_answers`` of the answers the load kept, scored teacher-forced
        against the server that gave them, held to ``probe``'s limits."""
        asked = self.profile.correctness.load_answers
        sampled = [r for r in load.records if r.ok and r.index in load.kept_for]
        kept = [LoadAnswer(r.index, k.prompt_ids, k.output_ids, k.text) for r in sampled if (k := r.kept) is not None]
        if not kept:
            if not sampled:
                return AnswerCheck(note="no sampled request completed")
            return AnswerCheck(
                problem=(
                    f"workload {workload.name}: none of the {len(sampled)} sampled answers carried its whole "
                    "output_ids in its last chunk, so none could be scored teacher-forced; a server run with "
                    "--incremental-streaming-output sends only the last delta: set [correctness] load_answers = 0 "
                    "for it"
                )
            )
        note = f"{len(kept)} of {asked} asked: the other sampled requests failed" if len(kept) < asked else ""
        return check_load_answers(
            server.base_url,
            workload.name,
            kept[:asked],
            model=server.model,
            headers=server.headers(),
            near_tie_nats=probe.near_tie_nats,
            limits=probe.limits,
            note=note,
        )

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
            # Said once, in the summary's header, beside the URL it was read from.
            self.server_metrics_note = self._server_monitor.dropped
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
            # Placement changes the host side's speed: pinned and unpinned runs are not compared.
            cpu_affinity=self.profile.server.cpu_affinity,
            **asdict(self.hardware()),
        )
