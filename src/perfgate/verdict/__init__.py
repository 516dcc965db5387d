"""Verdicts: hold a workload's repeats to its rules and its baseline, noise-aware.

``rules_for(gate, workload)`` lists what is gated and which way is worse;
``judge(workload, rules, current, baseline, alpha=..., require_baseline=...)`` returns a
:class:`WorkloadVerdict` with one :class:`MetricVerdict` per rule. Pure Python, no I/O.
"""

from perfgate.verdict._direction import Direction, direction_of, unit_of
from perfgate.verdict._judge import (
    RECORD_HINT,
    MetricVerdict,
    NoiseTest,
    Status,
    WorkloadVerdict,
    fmt_value,
    judge,
)
from perfgate.verdict._names import KNOWN_METRICS, check_metric_name
from perfgate.verdict._rules import MetricRule, rules_for
from perfgate.verdict._mannwhitney import mann_whitney_less, min_p_value

__all__ = [
    "KNOWN_METRICS",
    "RECORD_HINT",
    "Direction",
    "MetricRule",
    "MetricVerdict",
    "NoiseTest",
    "Status",
    "WorkloadVerdict",
    "check_metric_name",
    "direction_of",
    "fmt_value",
    "judge",
    "mann_whitney_less",
    "min_p_value",
    "rules_for",
    "unit_of",
]
