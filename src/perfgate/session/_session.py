"""A gate session: boot the server once, run each workload's repeats under telemetry,
judge them against the baseline store, and record baselines when asked.

The pytest plugin is a thin layer over this class; nothing here imports pytest.
"""

from __future__ import annotations

from collections.abc import Callable

from perfgate.baseline import BaselineStore, Fingerprint
from perfgate.correctness import CorrectnessResult, check_records, off_reason, probe_spec
from perfgate.correctness import gate as correctness_gate
from perfgate.errors import BaselineError, PerfgateError
from perfgate.load import Progress, check_dataset, dataset_identity
from perfgate.profile import Profile, Sweep, Workload, validate
from perfgate.server import RunningServer
from perfgate.session._explain import explain_workload
from perfgate.session._options import SessionOptions
from perfgate.session._policy import GatePolicy
from perfgate.session._record import record_baseline
from perfgate.session._result import RepeatResult, SweepResult, WorkloadResult
from perfgate.session._stack import ServerStack
from perfgate.session._summary import RunSummary
from perfgate.session._sweep import SweepRun
from perfgate.telemetry import SERVER_METRICS
from perfgate.verdict import (
    MetricRule,
    MetricVerdict,
    WorkloadVerdict,
    capacity_rule,
    judge,
    rules_for,
)

RepeatRunner = Callable[[Callable[[], None], int], None]


def _call_n_times(fn: Callable[[], None], n: int) -> None:
    for _ in range(n):
        fn()


class Session:
    """One gate run over a profile: its :class:`ServerStack` (server, monitors, fingerprint) and
    its :class:`GatePolicy` (judge, decide, validity, record), and the results of each workload.

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
        self.results: dict[str, WorkloadResult] = {}
        self.failures: dict[str, PerfgateError] = {}
        self.sweep_results: dict[str, SweepResult] = {}
        # Validated up front so a misspelt metric stops the run before anything boots.
        validate(profile)
        self._rules: dict[str, list[MetricRule]] = {
            w.name: rules_for(profile.gate, w, in_sweep=profile.sweep_of(w) is not None) for w in profile.workloads
        }
        self._sweep_rules = {sw.name: capacity_rule(profile.gate, sw.base) for sw in profile.sweeps}
        self._gated_server_metrics = sorted(
            {r.metric for rules in self._rules.values() for r in rules} & SERVER_METRICS
        )
        self.stack = ServerStack(profile, options, self._gated_server_metrics)
        self.policy = GatePolicy(profile, options, self.store, self._rules, self._gated_server_metrics, self.stack)
        boots = self.policy.boots
        if boots > 1 and options.base_url:
            raise PerfgateError(
                f"[gate] boots = {boots} (or --perf-boots) boots the server {boots} times, but --perf-base-url "
                "attaches to a server perfgate cannot restart: let perfgate launch the server (drop --perf-base-url) "
                "or set --perf-boots 1"
            )
        # A ShareGPT file that cannot give the prompts is found before a multi-minute boot.
        for w in profile.workloads:
            check_dataset(w)
        self.store_notes = (
            []
            if options.measure_only
            else self.store.check(profile.name, for_update=options.update_baselines, gated=self.gated_metrics())
        )
        # The correctness probe's result once the server is up (None: not booted yet).
        self.correctness: CorrectnessResult | None = None
        self._probed = False
        if not options.measure_only:
            check_records(self.store, profile.name)

    def gated_metrics(self) -> dict[str, list[str]]:
        """Workload and sweep name -> the metrics its baseline is judged on."""
        gated = {name: [r.metric for r in rules] for name, rules in self._rules.items()}
        return gated | {name: [rule.metric] for name, rule in self._sweep_rules.items()}

    # -- server and telemetry -------------------------------------------------------------
    def server(self) -> RunningServer:
        """The server, booted on first use; a boot that failed is not retried (its error is raised again)."""
        server = self.stack.server()
        if not self._probed and not self.options.measure_only:
            self._probed = True
            # After boot, before any workload: what the workloads measure is only worth gating
            # if the server still computes the same model.
            self.correctness = self._probe(server)
        return server

    def _probe(self, server: RunningServer) -> CorrectnessResult:
        spec = probe_spec(self.profile)
        if spec is None:
            return CorrectnessResult(None, note=off_reason(self.profile))
        result = correctness_gate(
            spec,
            base_url=server.base_url,
            model=server.model,
            headers=server.headers(),
            store=self.store,
            profile=self.profile.name,
            fingerprint=lambda: self.stack.fingerprint(spec.identity()),
            update=self.options.update_baselines,
            accept_reason=self.options.accept_regression,
            server_provenance=server.provenance,
            repo_dir=self.profile.path.parent,
        )
        # A probe request that broke says little; the server's exit and its last error say why.
        if result.error:
            result.error = server.with_exit(result.error, "during the correctness probe")
        return result

    def summary(self, teardown_notes: tuple[str, ...] = ()) -> RunSummary:
        """The run so far as plain data for reports."""
        return RunSummary(
            profile_name=self.profile.name,
            profile_path=str(self.profile.path),
            server=self.stack.server_summary(),
            gpus=tuple(self.stack.gpus()),
            power_source=self.stack.power_source,
            telemetry_note=self.stack.telemetry_note,
            server_metrics_url=self.stack.server_metrics_url,
            server_metrics_note=self.stack.server_metrics_note,
            host_cpu_note=self.stack.host_cpu_note,
            workloads=tuple(self.results.values()),
            sweeps=tuple(self.sweep_results.values()),
            rules={name: tuple(rules) for name, rules in self._rules.items()}
            | {name: (rule,) for name, rule in self._sweep_rules.items()},
            error_rates={w.name: w.max_error_rate for w in self.profile.workloads},
            store_notes=tuple(self.store_notes),
            teardown_notes=teardown_notes,
            correctness=self.correctness,
        )

    # -- workloads ------------------------------------------------------------------------
    def run_sweep(self, sweep: Sweep, on_progress: Callable[[Progress], None] | None = None) -> SweepResult:
        """Run (once per session) every load of ``sweep`` and judge its capacity; later calls return
        the cached result. A point that stops raises its error (also on later calls)."""
        if sweep.name in self.failures:
            raise self.failures[sweep.name]
        if sweep.name not in self.sweep_results:
            run = SweepRun(
                sweep,
                self._sweep_rules[sweep.name],
                on_progress,
                stack=self.stack,
                policy=self.policy,
                run_point=self.run,
            )
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
            workload,
            lambda repeats: self._explained(
                workload, self._run(workload, repeats, on_progress, repeat_runner or _call_n_times)
            ),
        )

    def measure(self, workload: Workload, on_progress: Callable[[Progress], None] | None = None) -> WorkloadResult:
        """Run ``workload``'s repeats and nothing more: no verdict, no baseline, no reruns
        (``perfgate ab`` judges pairs of sessions itself). Cached, and kept on errors, as :meth:`run`."""

        def measure_only(repeats: list[RepeatResult]) -> WorkloadResult:
            _, fingerprint = self._measure(workload, repeats, on_progress, _call_n_times)
            return self._explained(
                workload,
                WorkloadResult(
                    workload=workload.name,
                    repeats=repeats,
                    invalid_reasons=self.policy.invalid_reasons(workload, repeats),
                    fingerprint=fingerprint,
                ),
            )

        return self._once(workload, measure_only)

    def _explained(self, workload: Workload, result: WorkloadResult) -> WorkloadResult:
        """``result`` with its explain slice, when [explain] or --perf-explain asks for one."""
        # perfgate ab decides itself which of its sessions profile (round 1 only).
        if self.options.explain or (self.profile.explain.enabled and not self.options.measure_only):
            result.explain = explain_workload(self.stack, self.policy, workload, result)
        return result

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
                invalid_reasons=self.policy.invalid_reasons(workload, repeats),
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
        """Run the workload's repeats into ``repeats`` (on each of [gate] boots); return the function
        that runs one more and the fingerprint the results belong to."""
        boots = self.policy.boots
        n = self.policy.repeats_for(workload) * boots
        one_repeat = self.stack.repeat_fn(
            workload, repeats, on_progress, per_boot=self.policy.repeats_for(workload) if boots > 1 else None
        )
        repeat_runner(one_repeat, n)
        if len(repeats) != n:
            raise PerfgateError(
                f"workload {workload.name}: {len(repeats)} of {n} repeats ran; the repeat runner must run each once"
            )
        return one_repeat, self.stack.fingerprint({**workload.spec(), **dataset_identity(workload)})

    def _run(
        self,
        workload: Workload,
        repeats: list[RepeatResult],
        on_progress: Callable[[Progress], None] | None,
        repeat_runner: RepeatRunner,
    ) -> WorkloadResult:
        one_repeat, fingerprint = self._measure(workload, repeats, on_progress, repeat_runner)
        n = self.policy.repeats_for(workload)
        rules = self._rules[workload.name]
        baseline, note = self.policy.baseline_for(workload.name, fingerprint)

        def verdict_now() -> WorkloadVerdict[MetricVerdict]:
            return self.policy.judge(
                workload.name, rules, [r.flat_metrics() for r in repeats], baseline, note, [r.boot for r in repeats]
            )

        verdict = self.policy.decide(
            verdict_now, lambda: _call_n_times(one_repeat, 1), n, max(self.profile.max_repeats_for(workload), n)
        )
        result = WorkloadResult(
            workload=workload.name,
            repeats=repeats,
            invalid_reasons=self.policy.invalid_reasons(workload, repeats),
            verdict=verdict,
            fingerprint=fingerprint,
            baseline_path=str(self.store.path_for(self.profile.name, workload.name, fingerprint)) if baseline else "",
            baseline_note=note,
            previous_values=baseline.medians() if baseline else {},
            changes=self.policy.changes_since(baseline),
        )
        result.improved = self.policy.improved(rules, result.repeat_metrics(), result.repeat_boots(), baseline, verdict)
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
                workload.name,
                rules,
                result.repeat_metrics(),
                result.repeat_metrics(),
                alpha=self.profile.gate.alpha,
                current_boots=result.repeat_boots(),
                baseline_boots=result.repeat_boots(),
            )
        return result
