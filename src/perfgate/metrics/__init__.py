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
from perfgate.metrics._gaps import TokenGap, longest_token_gap, token_gaps

__all__ = [
    "METRIC_NAMES",
    "SLO_METRICS",
    "ServingMetrics",
    "SteadyWindow",
    "Timeline",
    "TokenGap",
    "bisect_between",
    "capacity",
    "compute_metrics",
    "longest_token_gap",
    "slo_metric_names",
    "token_gaps",
    "within_slo",
]
