"""What a perf test asserts: one category of a workload's verdict, the run's validity, or a sweep's capacity."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from perfgate.ab import AbWorkload
from perfgate.catalogue import GateTest, metric
from perfgate.correctness import CorrectnessResult
from perfgate.metrics import slo_metric_names
from perfgate.profile import Slo
from perfgate.session import SweepResult, WorkloadResult
from perfgate.verdict import RECORD_HINT, MetricVerdict, PairedMetricVerdict, fmt_value, unit_of


def _weakest(result: WorkloadResult, metric: str) -> str:
    """For power metrics: which GPU is the weakest, in which window (from the last repeat)."""
    window = result.repeats[-1].telemetry if result.repeats else None
    if window is None:
        return ""
    try:
        gpu = window.weakest_gpu(metric)
    except (KeyError, ValueError):
        return ""
    aligned = result.repeats[-1].telemetry_note
    power = f"{gpu.mean_power_w:.1f} W" if gpu.mean_power_w is not None else "no power reading"
    limit = f" of {gpu.power_limit_w:.0f} W limit" if gpu.power_limit_w else ""
    return f"\n    weakest: {gpu.label} {gpu.name}, {power}{limit}, over the {window.length_s:.1f} s {aligned}"


def suspects(changes: tuple[str, ...]) -> list[str]:
    """The lines a failure lists its suspects in: what changed since the baseline, most likely first."""
    if not changes:
        return []
    return ["suspects: changed since the baseline was recorded, most likely first:"] + [
        f"  {i}. {change}" for i, change in enumerate(changes, start=1)
    ]


@dataclass(frozen=True)
class GateChecks:
    """A workload's verdicts asserted one category at a time, so each test names what it guards:
    a gate run's (against the baseline, :meth:`of_gate`) or an A/B's (B against A, :meth:`of_ab`).

    ``problems``: why the workload's runs cannot be trusted (invalid, stopped); ``unrecorded``:
    why a candidate asked to be accepted was not (a failure of validity only: its verdicts still
    stand); ``where``: extra lines for a failing metric (the weakest GPU of a power metric).
    """

    workload: str
    problems: tuple[str, ...]
    verdicts: tuple[MetricVerdict | PairedMetricVerdict, ...]
    power_note: str
    baseline_note: str = ""
    where: Mapping[str, str] = field(default_factory=dict)
    unrecorded: tuple[str, ...] = ()
    # What the server's profile says about a failure (explain's top rows, or why it cannot say).
    explain: tuple[str, ...] = ()
    # What changed in the server's stack since the baseline, most suspect first.
    changes: tuple[str, ...] = ()

    @classmethod
    def of_gate(cls, result: WorkloadResult, power_note: str) -> GateChecks:
        verdicts = result.verdict.metrics if result.verdict else ()
        where = {v.metric: _weakest(result, v.metric) for v in verdicts if metric(v.metric).test == "power"}
        explain = tuple(result.explain.lines()) if result.explain is not None else ()
        return cls(
            result.workload,
            tuple(result.invalid_reasons),
            verdicts,
            power_note,
            result.baseline_note,
            where,
            explain=explain,
            changes=result.changes,
        )

    @classmethod
    def of_ab(cls, workload: AbWorkload, power_note: str, *, accept: bool = False) -> GateChecks:
        """``accept``: --perf-accept-candidate was asked, so B's runs not being recorded is a problem."""
        unrecorded = [f"baseline: {workload.baseline_note}"] if accept and not workload.recorded else []
        verdicts = workload.verdict.metrics if workload.verdict else ()
        explained = workload.explain()
        return cls(
            workload.name,
            tuple(workload.problems),
            verdicts,
            power_note,
            unrecorded=tuple(unrecorded),
            explain=tuple(explained.lines()) if explained is not None else (),
        )

    def assert_valid(self) -> None:
        problems = (*self.problems, *self.unrecorded)
        if problems:
            pytest.fail(f"{self.workload}: run invalid:\n  " + "\n  ".join(problems), pytrace=False)

    def assert_metrics(self, category: GateTest) -> None:
        """Fails an invalid run before anything else, whichever tests were selected: numbers that
        do not describe the server pass no gate, and skipping would read as green."""
        if self.problems:
            pytest.fail(
                f"{self.workload}: run invalid, so its {category} is not judged:\n  " + "\n  ".join(self.problems),
                pytrace=False,
            )
        verdicts = [v for v in self.verdicts if metric(v.metric).test == category]
        if not verdicts:
            pytest.skip(f"{self.workload}: no {category} metric is gated by this profile")
        failures = [v.message + self.where.get(v.metric, "") for v in verdicts if not v.ok]
        if failures:
            pytest.fail("\n".join([*failures, *suspects(self.changes), *self.explain]), pytrace=False)
        if all(v.status == "not-measured" for v in verdicts):
            if category == "power":
                pytest.skip(f"{self.workload}: GPU power not measured: {self.power_note}")
            pytest.skip(f"{self.workload}: none of its gated {category} metrics was measured; not gated")
        if all(v.status in ("no-baseline", "not-measured") for v in verdicts):
            measured = ", ".join(
                f"{v.metric} {fmt_value(v.measured, unit_of(v.metric))}"
                for v in verdicts
                if isinstance(v, MetricVerdict) and v.measured is not None
            )
            note = f" ({self.baseline_note})" if self.baseline_note else ""
            pytest.skip(
                f"{self.workload}: no baseline for this fingerprint{note}; measured {measured}; "
                f"not gated: {RECORD_HINT}"
            )


def curve_lines(result: SweepResult) -> list[str]:
    """One line per load: its latency statistics against the SLO, and in how many repeats it met it."""
    names = slo_metric_names(Slo(**result.slo), result.stat)
    axis = "c" if result.axis == "concurrency" else "rate "
    lines = []
    for j, point in enumerate(result.points):
        medians = point.medians()
        stats = ", ".join(
            f"{name} {fmt_value(medians[name], 'ms')} (SLO {fmt_value(result.slo[key], 'ms')})"
            for key, name in names.items()
            if name in medians
        )
        met = sum(row[j] for row in result.within)
        tag = " (bisected)" if point.bisected else ""
        lines.append(
            f"{axis}{point.load:g}{tag}: {stats or 'no latency measured'}; within the SLO in {met} of "
            f"{len(result.within)} repeats"
        )
    return lines


@dataclass
class CapacityChecks:
    """A sweep's capacity, asserted against its baseline."""

    result: SweepResult

    def assert_capacity(self) -> None:
        r = self.result
        curve = "\n    ".join(["", *curve_lines(r)])
        if r.invalid_reasons:
            pytest.fail(
                f"{r.sweep}: the capacity cannot be judged:\n  " + "\n  ".join(r.invalid_reasons) + curve, pytrace=False
            )
        assert r.verdict is not None
        (v,) = r.verdict.metrics
        notes = "".join(f"\n  note: {n}" for n in r.notes)
        if not v.ok:
            changed = "".join(f"\n{line}" for line in suspects(r.changes))
            pytest.fail(
                f"{v.message} ({r.axis}, {r.stat} latency within {_slo_text(r.slo)}){notes}{changed}{curve}",
                pytrace=False,
            )
        if v.status == "not-measured":
            # Every sweep measures its capacity; none means its points gave nothing to judge.
            pytest.fail(
                f"{r.sweep}: no capacity was measured (no repeat of its loads to judge){notes}{curve}", pytrace=False
            )
        if v.status == "no-baseline":
            note = f" ({r.baseline_note})" if r.baseline_note else ""
            pytest.skip(
                f"{r.sweep}: no baseline for this fingerprint{note}; measured capacity "
                f"{fmt_value(v.measured, '') if v.measured is not None else '-'} ({r.axis}); not gated: {RECORD_HINT}"
            )


def _slo_text(slo: dict[str, float]) -> str:
    return ", ".join(f"{k.removesuffix('_ms')} {fmt_value(v, 'ms')}" for k, v in slo.items())


@dataclass(frozen=True)
class CorrectnessChecks:
    """The correctness probe's verdict: the server still computes the model its reference did.

    ``require_reference``: ``[gate] require_baseline`` (a probe with no recorded reference fails).
    """

    result: CorrectnessResult
    require_reference: bool = False

    def assert_correct(self) -> None:
        r = self.result
        if not r.ran:
            pytest.skip(f"correctness probe {r.note}")
        if not r.passed:
            pytest.fail(r.failure_message(), pytrace=False)
        if r.recorded or r.baseline_path:
            return
        # Held to its own first pass only: degenerate answers and batch effects were checked, the
        # model itself was not.
        text = (
            f"correctness: no recorded reference for this fingerprint ({r.note}); the answers were checked for "
            f"degenerate output and against each other across concurrencies, not against a reference: {RECORD_HINT}"
        )
        if self.require_reference:
            pytest.fail(text + " ([gate] require_baseline = true)", pytrace=False)
        pytest.skip(text)
