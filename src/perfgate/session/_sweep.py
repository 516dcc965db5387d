"""A capacity sweep: run a workload at each of its loads, find the highest load within the SLO, judge it.

Every load of the profile is an ordinary point workload (run and gated like any other, with its
own baseline, so the curve is gated point by point); the capacity adds one number per repeat
index: in repeat i, the highest load such that it and every lower load met the SLO in their
repeat i. Those numbers are judged against the capacity's own baseline with the same noise test
as any metric. ``capacity_bisect_steps`` runs loads between the last load within the SLO and the
first beyond it (decided on medians over repeats), halving the gap each time. With [gate] boots,
every point (bisected ones too) runs its repeats on each boot, so repeat i of every point ran on
the same boot number: each capacity is labelled with it, and the noise test compares boots.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from perfgate.load import Progress, dataset_identity
from perfgate.metrics import bisect_between, capacity, within_slo
from perfgate.profile import Slo, Sweep, Workload
from perfgate.session._policy import GatePolicy
from perfgate.session._result import RepeatResult, SweepPoint, SweepResult, WorkloadResult
from perfgate.session._stack import ServerStack
from perfgate.verdict import MetricRule, MetricVerdict, WorkloadVerdict, judge

ProgressFn = Callable[[Progress], None] | None


def _meets(values: Mapping[str, float], slo: Slo, workload: Workload) -> bool:
    """Whether a run (or a point's medians) met the SLO; more failed requests than the workload
    allows is beyond it, and so is a run in which no latency was measured at all."""
    failed, completed = values.get("failed", 0.0), values.get("completed", 0.0)
    if failed and failed / (failed + completed) > workload.max_error_rate:
        return False
    return bool(within_slo(values, slo, workload.capacity_percentile))


class SweepRun:
    """One sweep inside a session: its points run through ``run_point`` (the session's cached,
    gated run of a point workload), its bisected loads and extra repeats on ``stack``, its
    capacity judged and recorded by ``policy``."""

    def __init__(
        self,
        sweep: Sweep,
        rule: MetricRule,
        on_progress: ProgressFn,
        *,
        stack: ServerStack,
        policy: GatePolicy,
        run_point: Callable[[Workload, ProgressFn], WorkloadResult],
    ) -> None:
        self.stack = stack
        self.policy = policy
        self.run_point = run_point
        self.sweep = sweep
        self.rule = rule
        self.on_progress = on_progress
        self.n = policy.repeats_for(sweep.base)
        self._bisected: list[str] = []
        assert sweep.base.slo is not None, "the profile loader refuses a sweep without an SLO"
        self.slo: Slo = sweep.base.slo
        self.result = SweepResult(sweep.name, sweep.axis, sweep.base.capacity_percentile, self.slo.targets(), points=[])

    def run(self) -> SweepResult:
        s, sweep, result = self.policy, self.sweep, self.result
        for name, load in zip(sweep.points, sweep.loads, strict=True):
            point = self.run_point(s.profile.workload(name), self.on_progress)
            result.points.append(SweepPoint(load, name, False, list(point.repeats), dict(point.previous_values)))
        self._bisect()
        self._update()
        fingerprint = self.stack.fingerprint({**sweep.spec(), **dataset_identity(sweep.base)})
        baseline, note = s.baseline_for(sweep.name, fingerprint)
        result.fingerprint, result.baseline_note = fingerprint, note
        if baseline is not None:
            result.baseline_path = str(s.store.path_for(s.profile.name, sweep.name, fingerprint))
            result.previous_values = baseline.medians()
            result.changes = s.changes_since(baseline)

        def verdict_now() -> WorkloadVerdict[MetricVerdict]:
            return s.judge(sweep.name, [self.rule], result.capacity_repeats(), baseline, note, result.capacity_boots())

        max_repeats = s.profile.max_repeats_for(sweep.base)
        result.verdict = s.decide(verdict_now, self._one_more, len(result.capacities), max(max_repeats, self.n))
        result.improved = s.improved(
            [self.rule], result.capacity_repeats(), result.capacity_boots(), baseline, result.verdict
        )
        if s.options.update_baselines:
            self._record()
        return result

    def _run_point(self, load: float) -> SweepPoint:
        """A bisected load, run as the profile's points are: its repeats on each of [gate] boots."""
        workload = self.sweep.point(load)
        repeats: list[RepeatResult] = []
        boots = self.policy.boots
        one = self.stack.repeat_fn(workload, repeats, self.on_progress, per_boot=self.n if boots > 1 else None)
        for _ in range(self.n * boots):
            one()
        return SweepPoint(load, workload.name, True, repeats)

    def _bisect(self) -> None:
        points = self.result.points
        for _ in range(self.sweep.base.capacity_bisect_steps):
            # Steered by the medians over each point's repeats.
            within = [_meets(p.medians(), self.slo, self.sweep.base) for p in points]
            first_out = next((j for j, ok in enumerate(within) if not ok), None)
            if not first_out:  # every load is within the SLO (None), or not even the first one (0)
                return
            mid = bisect_between(points[first_out - 1].load, points[first_out].load, self.sweep.axis == "concurrency")
            if mid is None:
                return
            points.insert(first_out, self._run_point(mid))
            self._bisected.append(
                f"bisected: ran {self.sweep.axis} {mid:g} between {points[first_out - 1].load:g} "
                f"and {points[first_out + 1].load:g}"
            )

    def _update(self) -> None:
        """Recompute ``within`` and the capacities from every point's repeats."""
        result, sweep = self.result, self.sweep
        k = min(len(p.repeats) for p in result.points)
        loads = [p.load for p in result.points]
        result.within = [
            [_meets(p.repeats[i].flat_metrics(), self.slo, sweep.base) for p in result.points] for i in range(k)
        ]
        result.capacities = [capacity(loads, row) for row in result.within]
        result.invalid_reasons = [
            f"{p.workload}: {reason}"
            for p in result.points
            for reason in self.policy.invalid_reasons(sweep.point(p.load), p.repeats, count_failures=False)
        ]
        notes = list(self._bisected)
        if result.capacities and all(c == loads[-1] for c in result.capacities):
            notes.append(f"every load met the SLO: the capacity is at least {loads[-1]:g}; add higher loads to find it")
        elif result.capacities and all(c == 0 for c in result.capacities):
            notes.append(f"no load met the SLO: the capacity is below {loads[0]:g}; add lower loads to find it")
        result.notes = notes

    def _one_more(self) -> None:
        """One more repeat of every load, for the capacity's noise test."""
        for p in self.result.points:
            self.stack.repeat_fn(self.sweep.point(p.load), p.repeats, self.on_progress)()
        self._update()

    def _record(self) -> None:
        result = self.result
        if not result.valid:
            result.baseline_note = "not recorded: " + "; ".join(result.invalid_reasons)
            return
        assert result.fingerprint is not None
        boots = result.capacity_boots()
        path, result.baseline_note = self.policy.save_baseline(
            self.sweep.name, result.fingerprint, result.capacity_repeats(), [self.rule], boots
        )
        result.recorded, result.baseline_path = True, str(path)
        result.verdict = judge(
            self.sweep.name,
            [self.rule],
            result.capacity_repeats(),
            result.capacity_repeats(),
            alpha=self.policy.profile.gate.alpha,
            current_boots=boots,
            baseline_boots=boots,
        )
