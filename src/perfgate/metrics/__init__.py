"""Metrics: bench_serving's definitions over a LoadRun, a steady-state window and a timeline."""

from perfgate.metrics._compute import METRIC_NAMES, ServingMetrics, SteadyWindow, Timeline, compute_metrics

__all__ = ["METRIC_NAMES", "ServingMetrics", "SteadyWindow", "Timeline", "compute_metrics"]
