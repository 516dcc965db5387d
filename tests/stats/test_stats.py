"""The descriptive statistics every stage uses (perfgate._stats), against numpy's definitions."""

from __future__ import annotations

import math

import numpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate._stats import describe_ms, mean, median, percentile

finite = st.floats(min_value=-1e6, max_value=1e6)


@pytest.mark.parametrize(
    "values, q, expected",
    # Values numpy.percentile gives (default linear interpolation).
    [
        ([1, 2, 3, 4], 90, 3.7),
        ([10, 20], 99, 19.9),
        ([5], 37, 5.0),
        ([3, 1, 2], 50, 2.0),
        ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 99, 9.91),
    ],
)
def test_percentile_matches_numpy_cases(values, q, expected):
    assert percentile(sorted(values), q) == pytest.approx(expected)


@given(st.lists(finite, min_size=1, max_size=60), st.floats(min_value=0, max_value=100))
def test_percentile_is_numpys_linear_percentile(values, q):
    assert percentile(sorted(values), q) == pytest.approx(float(numpy.percentile(values, q)), rel=1e-9, abs=1e-6)


@given(
    st.lists(finite, min_size=1, max_size=200),
    st.floats(min_value=0, max_value=100),
    st.floats(min_value=0, max_value=100),
)
def test_percentile_never_leaves_min_max_or_goes_out_of_order(values, q1, q2):
    s = sorted(values)
    lo, hi = sorted((q1, q2))
    # Exact, not approximate: float rounding must not put p5 below the minimum (telemetry's
    # power percentiles are checked against the set powers).
    assert s[0] <= percentile(s, lo) <= percentile(s, hi) <= s[-1]
    assert percentile(s, 0) == s[0] and percentile(s, 100) == s[-1]


def test_percentile_of_nothing_is_nan():
    assert math.isnan(percentile([], 50))


@given(st.lists(finite, min_size=1, max_size=9))
def test_median(values):
    m = median(values)
    s = sorted(values)
    assert s[0] <= m <= s[-1]
    if len(s) % 2:
        assert m == s[len(s) // 2]
    assert sum(1 for v in values if v < m) <= len(values) // 2
    assert sum(1 for v in values if v > m) <= len(values) // 2
    assert m == pytest.approx(float(numpy.median(values)), rel=1e-12, abs=1e-9)


def test_median_and_mean_examples():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert mean([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError, match="median of no values"):
        median([])
    with pytest.raises(ValueError, match="mean of no values"):
        mean([])


@given(st.lists(st.floats(min_value=0, max_value=600), min_size=1, max_size=60))
def test_describe_ms_is_bench_servings_summary(values_s):
    got = describe_ms(values_s, "tpot")
    ms = numpy.array(values_s) * 1000.0
    expected = {
        "mean_tpot_ms": numpy.mean(ms),
        "median_tpot_ms": numpy.median(ms),
        # numpy.std's default: the population standard deviation, as bench_serving reports.
        "std_tpot_ms": numpy.std(ms),
        "p90_tpot_ms": numpy.percentile(ms, 90),
        "p95_tpot_ms": numpy.percentile(ms, 95),
        "p99_tpot_ms": numpy.percentile(ms, 99),
    }
    assert got == pytest.approx({k: float(v) for k, v in expected.items()}, rel=1e-9, abs=1e-6)


def test_describe_ms_of_nothing_is_nan_everywhere():
    got = describe_ms([], "ttft")
    assert sorted(got) == sorted(f"{s}_ttft_ms" for s in ("mean", "median", "std", "p90", "p95", "p99"))
    assert all(math.isnan(v) for v in got.values())
