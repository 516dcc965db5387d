"""Goodput and SLO attainment as bench_serving defines them; a sweep's capacity from its curve."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.metrics import SLO_METRICS, bisect_between, capacity, compute_metrics, slo_metric_names, within_slo
from perfgate.profile import Slo
from tests.metrics.test_metrics import rec, run


def test_goodput_counts_successful_requests_meeting_every_target_per_second():
    records = [
        rec(0, 100.0, [0.1, 0.2, 0.3], [1, 1, 1]),  # TTFT 100 ms, TPOT 100 ms, E2E 300 ms: good
        rec(1, 100.0, [0.5, 0.6, 0.7], [1, 1, 1]),  # TTFT 500 ms: misses ttft
        rec(2, 100.0, [0.1, 0.9], [1, 2]),  # TPOT 400 ms: misses tpot
        rec(3, 100.0, [0.2], [1]),  # one token: TPOT counts as 0, good
        rec(4, 100.0, [0.1], [1], error="HTTP 500 from /generate: boom"),  # failed: meets nothing
    ]
    m = compute_metrics(run(records, end=104.0), target_concurrency=5, slo=Slo(ttft_ms=300, tpot_ms=200)).values
    assert m["goodput"] == pytest.approx(2 / 4)
    assert m["slo_attainment_pct"] == pytest.approx(100 * 2 / 5)
    assert m["slo_ttft_attainment_pct"] == pytest.approx(100 * 3 / 5)
    assert m["slo_tpot_attainment_pct"] == pytest.approx(100 * 3 / 5)
    assert "slo_e2e_attainment_pct" not in m


def test_targets_are_inclusive_and_no_slo_means_no_goodput():
    records = [rec(0, 100.0, [0.25, 0.5], [1, 1])]
    m = compute_metrics(run(records), target_concurrency=1, slo=Slo(ttft_ms=250, e2e_ms=500)).values
    assert m["slo_attainment_pct"] == 100.0
    assert not SLO_METRICS & set(compute_metrics(run(records), target_concurrency=1).values)


def test_within_slo_reads_the_chosen_statistic_of_each_target():
    slo = Slo(ttft_ms=100, tpot_ms=20, e2e_ms=900)
    assert slo_metric_names(slo, "p90") == {
        "ttft_ms": "p90_ttft_ms",
        "tpot_ms": "p90_tpot_ms",
        "e2e_ms": "p90_e2e_latency_ms",
    }
    values = {"p90_ttft_ms": 100.0, "p90_tpot_ms": 19.0, "p90_e2e_latency_ms": 850.0, "p99_ttft_ms": 140.0}
    assert within_slo(values, slo, "p90") is True
    assert within_slo({**values, "p90_tpot_ms": 20.5}, slo, "p90") is False
    assert within_slo(values, slo, "p99") is None  # p99 of TPOT and E2E were not measured


def test_capacity_is_read_from_the_bottom_of_the_curve():
    loads = [16, 32, 64, 128]
    assert capacity(loads, [True, True, False, False]) == 32
    assert capacity(loads, [True, True, True, True]) == 128
    assert capacity(loads, [False, True, True, True]) == 0
    # A load beyond the SLO caps the capacity even when a higher one happens to meet it.
    assert capacity(loads, [True, False, True, False]) == 16


@given(st.lists(st.booleans(), min_size=1, max_size=12))
def test_capacity_is_a_load_whose_prefix_all_met_the_slo(within):
    loads = [float(2**i) for i in range(len(within))]
    c = capacity(loads, within)
    assert c == 0 or all(ok for load, ok in zip(loads, within) if load <= c)
    assert c == loads[-1] or not within[loads.index(c) + 1 if c else 0]


def test_bisection_halves_the_gap_until_no_load_lies_between():
    assert bisect_between(32, 64, integer=True) == 48
    assert bisect_between(32, 33, integer=True) is None
    assert bisect_between(32, 34, integer=True) == 33
    assert bisect_between(2.0, 3.0, integer=False) == 2.5


def _capacity_failure(capacities, baseline):
    """What test_capacity says (None when it passes) for a sweep with these capacities per repeat."""
    from perfgate.plugin._gate import CapacityChecks
    from perfgate.session import SweepResult
    from perfgate.verdict import MetricRule, judge

    rule = MetricRule("capacity", "higher", tolerance=0.05)
    result = SweepResult("cap", "concurrency", "p90", {"ttft_ms": 100.0}, points=[], capacities=capacities)
    result.verdict = judge("cap", [rule], result.capacity_repeats(), baseline, alpha=0.05)
    try:
        CapacityChecks(result).assert_capacity()
    except pytest.fail.Exception as e:
        return str(e)
    except pytest.skip.Exception as e:
        return "skipped: " + str(e)
    return None


def test_the_capacity_check_fails_on_a_drop_on_nothing_measured_and_skips_without_a_baseline():
    base = [{"capacity": 32.0}] * 3
    assert _capacity_failure([32.0, 32.0, 32.0], base) is None
    assert _capacity_failure([16.0, 16.0, 16.0], base).startswith(
        "cap: capacity 16.00 < limit 30.40 (baseline 32.00, -50.0%"
    )
    # A compare of nothing never passes: no capacity measured fails, no baseline skips and says so.
    assert _capacity_failure([], base).startswith("cap: no capacity was measured")
    assert _capacity_failure([32.0] * 3, None).startswith("skipped: cap: no baseline for this fingerprint")
