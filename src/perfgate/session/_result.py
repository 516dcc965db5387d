"""What one workload's repeats produced: per-repeat numbers, validity, verdict and baseline action."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from perfgate.baseline import Fingerprint
from perfgate.load import LoadRun
from perfgate.metrics import ServingMetrics
from perfgate.telemetry import TelemetryWindow
from perfgate.verdict import WorkloadVerdict


def _finite(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def window_json(window: TelemetryWindow) -> dict[str, Any]:
    """A telemetry window as JSON-able data (non-finite numbers become null)."""
    return _finite(asdict(window))


@dataclass
class RepeatResult:
    """One measured run of a workload with its telemetry window (or why power was not measured)."""

    load: LoadRun
    metrics: ServingMetrics
    # None when power was not measured; telemetry_note then says why.
    telemetry: TelemetryWindow | None
    telemetry_note: str = ""
    # Per-GPU samples over the whole measured phase, for plots.
    telemetry_timeline: dict[str, Any] | None = None

    def flat_metrics(self) -> dict[str, float]:
        """Every number of this repeat under its metric name: serving metrics, then telemetry."""
        values = dict(self.metrics.values)
        if self.telemetry is not None:
            values.update(self.telemetry.metrics())
            energy = values.get("energy_j")
            window_tokens = self._window_output_tokens()
            if energy and window_tokens:
                values["output_tokens_per_j"] = window_tokens / energy
        return values

    def _window_output_tokens(self) -> float:
        steady = self.metrics.steady
        if steady is not None:
            return float(steady.output_tokens)
        return self.metrics.values.get("total_output_tokens", 0.0)


@dataclass
class WorkloadResult:
    """Everything perfgate knows about one workload after its repeats."""

    workload: str
    repeats: list[RepeatResult]
    invalid_reasons: list[str]
    # None when the workload failed before it could be judged (see ``error``).
    verdict: WorkloadVerdict | None = None
    fingerprint: Fingerprint | None = None
    baseline_path: str = ""
    baseline_note: str = ""
    recorded: bool = False
    previous_values: dict[str, float] = field(default_factory=dict)
    # Why the workload stopped part-way; its completed repeats are still in ``repeats``.
    error: str = ""

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons and not self.error

    def repeat_metrics(self) -> list[dict[str, float]]:
        """:meth:`RepeatResult.flat_metrics` of every repeat, in order."""
        return [r.flat_metrics() for r in self.repeats]

    def verdict_medians(self) -> dict[str, float | None]:
        """Median over repeats of every gated metric (None where not measured)."""
        return {v.metric: v.measured for v in self.verdict.metrics} if self.verdict else {}
