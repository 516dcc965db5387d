"""What a perf test asserts: one category of a workload's verdict, or the run's validity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from perfgate.session import WorkloadResult
from perfgate.verdict import RECORD_HINT, direction_of, fmt_value, unit_of

Category = Literal["throughput", "latency", "power"]

_POWER_PREFIXES = ("gpu_", "tensor_", "sm_", "dram_", "util_", "energy_")


def category_of(metric: str) -> Category:
    if metric.startswith(_POWER_PREFIXES) or metric.endswith("_per_j"):
        return "power"
    return "throughput" if direction_of(metric) == "higher" else "latency"


@dataclass
class GateChecks:
    """A workload's result, asserted one category at a time so each test names what it guards."""

    result: WorkloadResult
    power_note: str

    def assert_valid(self) -> None:
        if not self.result.valid:
            pytest.fail(f"{self.result.workload}: run invalid:\n  " + "\n  ".join(self.result.invalid_reasons), pytrace=False)

    def _where(self, metric: str) -> str:
        """For power metrics: which GPU is the weakest, in which window (from the last repeat)."""
        window = self.result.repeats[-1].telemetry
        if window is None:
            return ""
        try:
            gpu = window.weakest_gpu(metric)
        except (KeyError, ValueError):
            return ""
        aligned = self.result.repeats[-1].telemetry_note
        power = f"{gpu.mean_power_w:.1f} W" if gpu.mean_power_w is not None else "no power reading"
        limit = f" of {gpu.power_limit_w:.0f} W limit" if gpu.power_limit_w else ""
        return f"\n    weakest: {gpu.label} {gpu.name}, {power}{limit}, over the {window.length_s:.1f} s {aligned}"

    def assert_metrics(self, category: Category) -> None:
        verdicts = [v for v in self.result.verdict.metrics if category_of(v.metric) == category]
        if not verdicts:
            pytest.skip(f"{self.result.workload}: no {category} metric is gated by this profile")
        if category == "power" and all(v.status == "not-measured" for v in verdicts):
            pytest.skip(f"{self.result.workload}: GPU power not measured: {self.power_note}")
        failures = [v.message + self._where(v.metric) for v in verdicts if not v.ok]
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        if all(v.status in ("no-baseline", "not-measured") for v in verdicts):
            measured = ", ".join(
                f"{v.metric} {fmt_value(v.measured, unit_of(v.metric))}" for v in verdicts if v.measured is not None
            )
            note = f" ({self.result.baseline_note})" if self.result.baseline_note else ""
            pytest.skip(
                f"{self.result.workload}: no baseline for this fingerprint{note}; measured {measured}; "
                f"not gated: {RECORD_HINT}"
            )
