"""A gate session: boot the server once, run each workload's repeats under telemetry,
judge them against the baseline store, and record baselines when asked.

The pytest plugin is a thin layer over this class; nothing here imports pytest.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from perfgate.baseline import Baseline, BaselineStore, Fingerprint, fingerprint_for, others_note, provenance
from perfgate.errors import BaselineError, PerfgateError, ProfileError, TelemetryError
from perfgate.load import ClientLimits, Progress, run_workload
from perfgate.metrics import compute_metrics
from perfgate.profile import Profile, Workload
from perfgate.server import RunningServer, start_server
from perfgate.session._result import RepeatResult, WorkloadResult, window_json
from perfgate.telemetry import NotMeasured, open_monitor
from perfgate.verdict import MetricRule, judge, rules_for


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


class GateSession:
    def __init__(self, profile: Profile, options: SessionOptions) -> None:
        self.profile = profile
        self.options = options
        self.store = BaselineStore(options.baselines_dir)
        self._stack = ExitStack()
        self._server: RunningServer | None = None
        self._monitor: Any = None
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

    # -- server and telemetry -------------------------------------------------------------
    def server(self) -> RunningServer:
        if self._server is None:
            self._server = start_server(
                self.profile.server,
                log_dir=self.options.log_dir,
                stack=self._stack,
                base_url=self.options.base_url,
                lock_wait_s=self.options.lock_wait_s,
            )
            self._open_telemetry(self._server)
        return self._server

    def _open_telemetry(self, server: RunningServer) -> None:
        spec = self.profile.telemetry
        monitor = open_monitor(spec, gpus=self._telemetry_gpus(server), base_url=server.base_url)
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

    def _telemetry_gpus(self, server: RunningServer) -> tuple[int | str, ...]:
        if server.kind == "simulator":
            return ()
        return self.profile.server.gpus

    def gpu_source(self) -> str:
        return f"telemetry from {self._monitor.source}" if self._monitor is not None else "no telemetry"

    def gpus(self) -> list[Any]:
        return self._monitor.gpus() if self._monitor is not None else []

    def close(self) -> list[str]:
        self._stack.close()
        return self._server.notes if self._server else []

    def rules(self, workload: str) -> list[MetricRule]:
        return self._rules[workload]

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
        pytest-benchmark's pedantic mode so each repeat is also a timed benchmark round.
        """
        if workload.name in self.failures:
            raise self.failures[workload.name]
        if workload.name in self.results:
            return self.results[workload.name]
        try:
            result = self._run(workload, on_progress, repeat_runner or _call_n_times)
        except PerfgateError as e:
            self.failures[workload.name] = e
            raise
        self.results[workload.name] = result
        return result

    def _run(
        self, workload: Workload, on_progress: Callable[[Progress], None] | None, repeat_runner: RepeatRunner
    ) -> WorkloadResult:
        server = self.server()
        repeats: list[RepeatResult] = []

        def one_repeat() -> None:
            load = run_workload(
                server.base_url,
                workload,
                model=server.model,
                api_key_env=self.profile.server.api_key_env,
                admin_api_key_env=self.profile.server.admin_api_key_env,
                limits=ClientLimits(self.profile.gate.client_max_lag_p99_ms, self.profile.gate.client_max_cpu_share),
                on_progress=on_progress,
                repeat=len(repeats),
            )
            metrics = compute_metrics(load, target_concurrency=min(workload.concurrency, workload.num_prompts))
            repeats.append(self._with_telemetry(load, metrics))

        n = self.repeats_for(workload)
        repeat_runner(one_repeat, n)
        if len(repeats) != n:
            raise PerfgateError(f"workload {workload.name}: {len(repeats)} of {n} repeats ran; the repeat runner must run each once")
        invalid = self._invalid_reasons(workload, repeats)
        fingerprint = self._fingerprint(server, workload)
        baseline = self.store.load(self.profile.name, workload.name, fingerprint)
        note = ""
        if baseline is None:
            note = others_note(fingerprint, self.store.others(self.profile.name, workload.name, fingerprint))
        def verdict_now() -> Any:
            return judge(
                workload.name,
                self._rules[workload.name],
                [r.values() for r in repeats],
                baseline.repeats if baseline else None,
                alpha=self.profile.gate.alpha,
                require_baseline=self.profile.gate.require_baseline and not self.options.update_baselines,
                no_baseline_note=note,
            )

        verdict = verdict_now()
        if self.profile.gate.confirm_on_fail and not verdict.passed and not self.options.update_baselines:
            # A failure is confirmed on twice the evidence: the same number of repeats again,
            # judged together with the first ones, before it is reported.
            _call_n_times(one_repeat, n)
            invalid = self._invalid_reasons(workload, repeats)
            verdict = verdict_now()
        result = WorkloadResult(
            workload=workload.name,
            repeats=repeats,
            invalid_reasons=invalid,
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
                    result.values(),
                    result.values(),
                    alpha=self.profile.gate.alpha,
                )
        return result

    def _with_telemetry(self, load: Any, metrics: Any) -> RepeatResult:
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
            if r.load.client.saturated:
                reasons.append(
                    f"repeat {i}: the load client, not the server, was the limit ({r.load.client.reason}); "
                    "shard the workload over more client processes or lower the rate"
                )
        return reasons

    def hardware(self) -> dict[str, Any]:
        """GPU model, count, enforced limit and driver: from telemetry, else what the simulator reports."""
        gpus = self.gpus()
        if gpus:
            return {
                "gpu_model": gpus[0].name,
                "gpu_count": len(gpus),
                "power_limit_w": gpus[0].power_limit_w,
                "driver_version": gpus[0].driver_version,
            }
        sim = (self._server.info.get("perfgate_sim") if self._server else None) or {}
        sim_gpus = sim.get("gpus") or []
        if sim_gpus:
            return {
                "gpu_model": "simulated " + str(sim_gpus[0].get("name", "GPU")),
                "gpu_count": len(sim_gpus),
                "power_limit_w": sim_gpus[0].get("power_limit_w"),
                "driver_version": "",
            }
        return {"gpu_model": "unknown", "gpu_count": len(self.profile.server.gpus), "power_limit_w": None, "driver_version": ""}

    def _fingerprint(self, server: RunningServer, workload: Workload) -> Fingerprint:
        spec = self.profile.server
        args = list(spec.args) + [f"--{k.replace('_', '-')}={v}" for k, v in sorted(spec.sim.items())]
        return fingerprint_for(
            # --perf-base-url attaches to a server started as the profile describes: same fingerprint.
            engine=spec.kind,
            model=spec.model_path or server.model,
            server_args=args,
            workload=workload,
            **self.hardware(),
        )

    def _record(self, workload: Workload, result: WorkloadResult) -> None:
        if not result.valid:
            result.baseline_note = "not recorded: the run was invalid (" + "; ".join(result.invalid_reasons) + ")"
            return
        server = self.server()
        prov = provenance(server.versions, reason=self.options.accept_regression, repo_dir=self.profile.path.parent)
        prov["server"] = server.provenance()
        telemetry = {
            f"repeat_{i}": window_json(r.telemetry) for i, r in enumerate(result.repeats, start=1) if r.telemetry is not None
        }
        baseline = Baseline(
            profile=self.profile.name,
            workload=workload.name,
            fingerprint=result.fingerprint,
            repeats=result.values(),
            telemetry=telemetry,
            provenance=prov,
        )
        try:
            path = self.store.save(
                baseline,
                rules=self._rules[workload.name],
                accept_regression=self.options.accept_regression,
                alpha=self.profile.gate.alpha,
            )
        except BaselineError as e:
            result.baseline_note = f"not recorded: {e}"
            raise
        result.recorded = True
        result.baseline_path = str(path)
        result.baseline_note = "recorded"
