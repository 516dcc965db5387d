"""Metrics: bench_serving's definitions over a LoadRun, a steady-state window and a timeline."""

from perfgate.metrics._compute import METRIC_NAMES, ServingMetrics, SteadyWindow, Timeline, compute_metrics
from perfgate.metrics._stats import describe_ms, percentile

__all__ = ["METRIC_NAMES", "ServingMetrics", "SteadyWindow", "Timeline", "compute_metrics", "describe_ms", "percentile"]
