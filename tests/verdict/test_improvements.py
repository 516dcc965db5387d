"""The ratchet: a passing run that beats its baseline beyond tolerance, told from noise, says so."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from perfgate.verdict import MetricRule, improvements

TPUT = MetricRule("output_throughput", "higher", tolerance=0.03)
TPOT = MetricRule("mean_tpot_ms", "lower", tolerance=0.05)
BASE = [{"output_throughput": v, "mean_tpot_ms": 1000 / v} for v in (1000.0, 1010.0, 990.0)]


def scaled(factor: float) -> list[dict[str, float]]:
    return [{k: v * factor if k == "output_throughput" else v / factor for k, v in r.items()} for r in BASE]


@given(st.floats(min_value=0.5, max_value=3.0))
def test_only_a_gain_beyond_the_tolerance_is_named(factor: float) -> None:
    lines = improvements([TPUT, TPOT], scaled(factor), BASE)
    names = [line.split()[0] for line in lines]
    # The repeats do not overlap once the factor passes 1,010/990: every new one beats every old one.
    assert ("output_throughput" in names) == (factor - 1 > 0.03)
    assert ("mean_tpot_ms" in names) == (1 - 1 / factor > 0.05)


def test_the_line_says_by_how_much_against_which_tolerance_and_test() -> None:
    (line,) = improvements([TPUT], scaled(1.5), BASE)
    assert line == (
        "output_throughput +50.0% better than the baseline (1,000.0 -> 1,500.0 tok/s; beyond its 3% tolerance, "
        "Mann-Whitney p=0.05)"
    )


def test_a_gain_the_noise_test_cannot_tell_from_noise_is_not_named() -> None:
    # The median is 20 % up, but one new repeat is below the old ones: p > 0.05 with 3 vs 3.
    mixed = [{"output_throughput": v} for v in (1200.0, 1250.0, 900.0)]
    assert improvements([TPUT], mixed, BASE) == []


def test_one_repeat_a_side_is_the_tolerance_alone_and_says_so() -> None:
    (line,) = improvements([TPUT], [{"output_throughput": 1200.0}], [{"output_throughput": 1000.0}])
    assert "too few repeats for a noise test" in line


def test_what_was_not_measured_or_has_no_tolerance_names_nothing() -> None:
    floor_only = MetricRule("output_throughput", "higher", tolerance=None, floor=1.0)
    assert improvements([floor_only], scaled(2.0), BASE) == []
    nan = [{"output_throughput": math.nan}] * 3
    assert improvements([TPUT], nan, BASE) == []
    assert improvements([TPUT], scaled(2.0), [{"output_throughput": 0.0}] * 3) == []


def test_boots_are_compared_by_their_medians() -> None:
    now = [{"output_throughput": v} for v in (1500.0, 1510.0, 1490.0, 1600.0, 1590.0, 1610.0)]
    before = [{"output_throughput": v} for v in (1000.0, 1010.0, 990.0, 1020.0, 1000.0, 1010.0)]
    # Two boots a side: too few for the test at alpha 0.05, so the tolerance decides.
    (line,) = improvements([TPUT], now, before, current_boots=[1, 1, 1, 2, 2, 2], baseline_boots=[1, 1, 1, 2, 2, 2])
    assert "too few repeats for a noise test" in line and "+54.2%" in line
    # The same numbers as one boot each are 6 vs 6 repeats: the test runs.
    (line,) = improvements([TPUT], now, before)
    assert "Mann-Whitney" in line
