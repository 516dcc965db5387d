"""Verdicts: hold a workload's repeats to its rules and its baseline, noise-aware.

``rules_for(gate, workload)`` lists what is gated and which way is worse;
``judge(workload, rules, current, baseline, alpha=..., require_baseline=...)`` returns a
:class:`WorkloadVerdict` with one :class:`MetricVerdict` per rule; ``judge_paired(workload,
rules, a_runs, b_runs, ...)`` judges variant B against variant A round by round (A/B), one
:class:`PairedMetricVerdict` per rule. Pure Python, no I/O.
"""

from perfgate.catalogue import CAPACITY, Direction, direction_of, fmt_value, unit_of
from perfgate.verdict._check import ToleranceCheck
from perfgate.verdict._judge import (
    RECORD_HINT,
    MetricVerdict,
    NoiseTest,
    Status,
    WorkloadVerdict,
    improvements,
    judge,
)
from perfgate.verdict._mannwhitney import mann_whitney_less, min_p_value
from perfgate.verdict._names import check_metric_name
from perfgate.verdict._paired import (
    PairedMetricVerdict,
    binomial_half_cdf,
    judge_paired,
    median_interval,
    sign_test_min_rounds,
    sign_test_p,
)
from perfgate.verdict._rules import DEFAULT_CAPACITY_TOLERANCE, MetricRule, capacity_rule, rules_for

__all__ = [
    "CAPACITY",
    "DEFAULT_CAPACITY_TOLERANCE",
    "RECORD_HINT",
    "Direction",
    "MetricRule",
    "MetricVerdict",
    "NoiseTest",
    "PairedMetricVerdict",
    "Status",
    "ToleranceCheck",
    "WorkloadVerdict",
    "binomial_half_cdf",
    "capacity_rule",
    "check_metric_name",
    "direction_of",
    "fmt_value",
    "improvements",
    "judge",
    "judge_paired",
    "mann_whitney_less",
    "median_interval",
    "min_p_value",
    "rules_for",
    "sign_test_min_rounds",
    "sign_test_p",
    "unit_of",
]
