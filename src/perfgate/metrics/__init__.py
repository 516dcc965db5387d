"""Metrics: bench_serving's definitions over a LoadRun, a steady-state window, a timeline, goodput,
and a sweep's capacity."""

from perfgate.metrics._capacity import bisect_between, capacity, slo_metric_names, within_slo
from perfgate.metrics._compute import (
    METRIC_NAMES,
    SLO_METRICS,
    ServingMetrics,
    SteadyWindow,
    Timeline,
    compute_metrics,
)

__all__ = [
    "METRIC_NAMES",
    "SLO_METRICS",
    "ServingMetrics",
    "SteadyWindow",
    "Timeline",
    "bisect_between",
    "capacity",
    "compute_metrics",
    "slo_metric_names",
    "within_slo",
]
