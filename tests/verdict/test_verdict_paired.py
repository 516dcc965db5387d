"""Paired A/B verdicts: messages, the sign test and its interval, and what they guarantee."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate._stats import median
from perfgate.verdict import (
    MetricRule,
    binomial_half_cdf,
    judge_paired,
    median_interval,
    sign_test_min_rounds,
    sign_test_p,
)

WL = "c64-in256-out128"
TPUT = MetricRule("output_throughput", "higher", tolerance=0.03)
TPOT = MetricRule("mean_tpot_ms", "lower", tolerance=0.03)


def runs(metric: str, *values: float | None) -> list[dict[str, float] | None]:
    return [None if v is None else {metric: v} for v in values]


def test_regression_fails_naming_ratio_rounds_test_and_interval() -> None:
    a = runs("output_throughput", 100.0, 101.0, 99.0, 100.5, 100.0, 99.5)
    b = runs("output_throughput", 95.0, 96.0, 94.0, 95.5, 95.2, 94.8)
    v = judge_paired(WL, [TPUT], a, b)
    (m,) = v.metrics
    assert (m.status, m.ok, m.noise_test, m.n_pairs, m.rounds_worse) == ("fail", False, "sign-test", 6, 6)
    assert not v.passed and v.failures == (m,)
    assert m.median_ratio == pytest.approx(
        median([bv / av for av, bv in zip([100, 101, 99, 100.5, 100, 99.5], [95, 96, 94, 95.5, 95.2, 94.8])])
    )
    assert m.limit_ratio == pytest.approx(0.97)
    assert m.p_value == pytest.approx(1 / 64)
    assert m.ci_coverage == pytest.approx(1 - 2 / 64)
    assert m.change_pct == pytest.approx((m.median_ratio - 1) * 100)
    assert m.message == (
        "c64-in256-out128: output_throughput B/A 0.950 (-5.0%: B 95.10 tok/s vs A 100.0 tok/s) < limit 0.970 "
        "(tolerance 3%; B worse in 6 of 6 rounds; sign test p=0.016; 96.9% CI [0.949, 0.953])"
    )


def test_latency_rise_fails_from_above() -> None:
    a = runs("mean_tpot_ms", *[20.0] * 6)
    b = runs("mean_tpot_ms", 21.0, 21.1, 20.9, 21.2, 21.0, 21.05)
    (m,) = judge_paired(WL, [TPOT], a, b).metrics
    assert m.status == "fail" and m.limit_ratio == pytest.approx(1.03)
    assert m.message.startswith(
        "c64-in256-out128: mean_tpot_ms B/A 1.051 (+5.1%: B 21.02 ms vs A 20.00 ms) > limit 1.030"
    )


def test_improvement_and_no_change_pass() -> None:
    a = runs("output_throughput", *[100.0] * 6)
    for b in (
        runs("output_throughput", *[120.0] * 6),
        runs("output_throughput", 99.0, 101.0, 100.0, 99.5, 100.5, 100.0),
    ):
        (m,) = judge_paired(WL, [TPUT], a, b).metrics
        assert (m.status, m.ok) == ("pass", True)
        assert "within limit 0.970" in m.message


def test_past_the_limit_inside_the_noise_is_inconclusive_never_pass() -> None:
    # Median 4 % down, but B was better than A in two of six rounds: the sign test cannot tell.
    a = runs("output_throughput", *[100.0] * 6)
    b = runs("output_throughput", 90.0, 95.0, 101.0, 96.0, 102.0, 96.0)
    v = judge_paired(WL, [TPUT], a, b)
    (m,) = v.metrics
    assert (m.status, m.ok, m.rounds_worse) == ("inconclusive", False, 4)
    assert v.inconclusive == (m,) and not v.passed
    assert m.p_value == pytest.approx(sign_test_p(4, 6)) and m.p_value > 0.05
    assert (
        "INCONCLUSIVE, the 6 rounds cannot tell the change from noise (p > alpha 0.05); failing: run more rounds"
        in m.message
    )
    (w,) = judge_paired(WL, [TPUT], a, b, inconclusive="warn").metrics
    assert (w.status, w.ok) == ("inconclusive", True)
    assert 'a warning only ([gate] inconclusive = "warn")' in w.message


def test_too_few_rounds_fall_back_to_the_tolerance_alone() -> None:
    a, b = runs("output_throughput", 100.0, 100.0, 100.0), runs("output_throughput", 95.0, 101.0, 95.0)
    (m,) = judge_paired(WL, [TPUT], a, b).metrics
    assert (m.status, m.noise_test, m.p_value) == ("fail", "tolerance-only", None)
    assert "too few rounds for a noise test at alpha 0.05 (need 5), tolerance alone" in m.message
    assert "75.0% CI [0.950, 1.010]" in m.message


def test_floor_and_ceiling_hold_b_whatever_a_did() -> None:
    rules = [
        MetricRule("gpu_power_min_w", "higher", tolerance=0.10, floor=150.0),
        MetricRule("p99_tpot_ms", "lower", ceiling=30.0),
    ]
    a = [{"gpu_power_min_w": 140.0, "p99_tpot_ms": 31.0}] * 6
    (power, p99) = judge_paired(WL, rules, a, a).metrics
    assert (power.status, p99.status) == ("fail", "fail")
    assert power.message.startswith(
        "c64-in256-out128: gpu_power_min_w B/A 1.000 (+0.0%: B 140.0 W vs A 140.0 W) B's median 140.0 W < floor 150.0 W"
    )
    assert "B's median 31.00 ms > ceiling 30.00 ms" in p99.message
    assert p99.limit_ratio is None and "tolerance" not in p99.message


def test_rounds_without_a_pair_are_left_out_and_one_sided_metrics_never_pass() -> None:
    a = runs("output_throughput", 100.0, None, 100.0, 0.0, 100.0, 100.0, 100.0, 100.0)
    b = runs("output_throughput", 100.0, 100.0, None, 50.0, 100.0, 100.0, 100.0, 100.0)
    (m,) = judge_paired(WL, [TPUT], a, b).metrics
    assert m.n_pairs == 5 and m.ratios == (1.0, None, None, None, 1.0, 1.0, 1.0, 1.0)
    (m,) = judge_paired(WL, [TPUT], runs("output_throughput", 1.0, 1.0), [{}, {}]).metrics
    assert (m.status, m.ok) == ("unpaired", False)
    assert (
        m.message
        == "c64-in256-out128: output_throughput was measured in A's runs but not in B's; nothing to compare, so it "
        "cannot pass"
    )
    (m,) = judge_paired(WL, [TPUT], [{}, None], [None, {}]).metrics
    assert (m.status, m.ok) == ("not-measured", True)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="3 runs of A but 2 of B"):
        judge_paired(WL, [TPUT], [{}] * 3, [{}] * 2)
    with pytest.raises(ValueError, match="alpha"):
        judge_paired(WL, [TPUT], [], [], alpha=1.0)
    with pytest.raises(ValueError, match="inconclusive"):
        judge_paired(WL, [TPUT], [], [], inconclusive="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no values"):
        median_interval([], 0.05)


# -- the statistics ----------------------------------------------------------------------


@given(st.integers(0, 14), st.data())
def test_sign_test_p_is_the_binomial_tail(n: int, data: st.DataObject) -> None:
    worse = data.draw(st.integers(0, n))
    tail = sum(1 for signs in itertools.product((0, 1), repeat=n) if sum(signs) >= worse) / 2**n
    assert sign_test_p(worse, n) == pytest.approx(tail)
    assert binomial_half_cdf(n, n) == 1.0 and binomial_half_cdf(-1, n) == 0.0


@given(st.lists(st.floats(0.5, 2.0), min_size=1, max_size=20, unique=True), st.sampled_from([0.01, 0.05, 0.1, 0.2]))
def test_interval_holds_the_median_and_its_coverage_is_exact(values: list[float], alpha: float) -> None:
    low, high, coverage = median_interval(values, alpha)
    assert low <= median(values) <= high
    n = len(values)
    s = sorted(values)
    k = s.index(low) + 1
    assert s[n - k] == high
    # P(order statistic k <= true median <= order statistic n+1-k) = P(k <= #below <= n-k).
    assert coverage == pytest.approx(sum(math.comb(n, j) for j in range(k, n - k + 1)) / 2**n)
    if 0.5**n <= alpha:
        # Each bound is a one-sided (1 - alpha) bound, and the widest such: one rank in is not.
        assert binomial_half_cdf(k - 1, n) <= alpha + 1e-12
        assert 2 * (k + 1) > n + 1 or binomial_half_cdf(k, n) > alpha


@given(st.lists(st.floats(0.8, 1.2), min_size=1, max_size=14), st.sampled_from(["higher", "lower"]))
def test_significant_exactly_when_the_good_side_bound_is_on_the_bad_side_of_one(
    ratios: list[float], direction: str
) -> None:
    rule = MetricRule("output_throughput" if direction == "higher" else "mean_tpot_ms", direction, tolerance=0.0)  # type: ignore[arg-type]
    (m,) = judge_paired(WL, [rule], [{rule.metric: 1.0}] * len(ratios), [{rule.metric: r} for r in ratios]).metrics
    if m.noise_test != "sign-test":
        return
    significant = m.p_value <= 0.05 * (1 + 1e-9)
    assert significant == (m.ci_high < 1.0 if direction == "higher" else m.ci_low > 1.0)


_STATUS_RANK = {"pass": 0, "inconclusive": 1, "fail": 2}


@given(
    st.lists(st.tuples(st.floats(50.0, 150.0), st.floats(50.0, 150.0)), min_size=1, max_size=12),
    st.floats(0.0, 0.2),
    st.sampled_from(["higher", "lower"]),
    st.data(),
)
def test_never_pass_past_the_limit_and_worse_b_never_judges_better(
    pairs: list[tuple[float, float]], tolerance: float, direction: str, data: st.DataObject
) -> None:
    rule = MetricRule("output_throughput" if direction == "higher" else "mean_tpot_ms", direction, tolerance=tolerance)  # type: ignore[arg-type]
    a = [{rule.metric: x} for x, _ in pairs]
    b = [{rule.metric: y} for _, y in pairs]
    (m,) = judge_paired(WL, [rule], a, b).metrics
    past = m.median_ratio < 1 - tolerance if direction == "higher" else m.median_ratio > 1 + tolerance
    assert m.status != "pass" if past else m.status == "pass"
    assert m.ok == (m.status == "pass")
    # Make B worse in one round: the verdict can only get more severe.
    i = data.draw(st.integers(0, len(pairs) - 1))
    factor = data.draw(st.floats(1.0, 1.5))
    worse = list(b)
    worse[i] = {rule.metric: b[i][rule.metric] / factor if direction == "higher" else b[i][rule.metric] * factor}
    (w,) = judge_paired(WL, [rule], a, worse).metrics
    assert _STATUS_RANK[w.status] >= _STATUS_RANK[m.status]


# -- coverage and false alarms, by seeded simulation ---------------------------------------


def _disturbed(rng: np.random.Generator, shape: int | tuple[int, ...]) -> np.ndarray:
    """Run-to-run factors: 1 % lognormal noise times, in one run of five, a slowdown of
    exponential size (mean 3 %), never a speed-up: the skewed shape a busy neighbour gives."""
    return rng.lognormal(0.0, 0.01, shape) * np.where(rng.random(shape) < 0.2, 1 - rng.exponential(0.03, shape), 1.0)


def test_interval_coverage_on_skewed_rounds_and_bootstrap_undercoverage() -> None:
    """The sign-test interval covers the true median ratio as often as it says, on skewed,
    heavy-tailed ratios; a percentile bootstrap at the same n covers less than its 95 %."""
    rng = np.random.default_rng(12)
    trials, n = 3000, 6
    # The ratios' true median, from a large sample of the same process.
    truth = float(np.median(_disturbed(rng, 400_000)))
    samples = _disturbed(rng, (trials, n))
    covered = 0
    for row in samples:
        low, high, coverage = median_interval(list(row), 0.05)
        covered += low <= truth <= high
    sd = math.sqrt(coverage * (1 - coverage) / trials)
    assert covered / trials >= coverage - 3 * sd, (covered / trials, coverage)
    boot = 0
    for row in samples:
        meds = np.median(row[rng.integers(0, n, (500, n))], axis=1)
        low, high = np.percentile(meds, [2.5, 97.5])
        boot += low <= truth <= high
    assert boot / trials < 0.95 - 3 * math.sqrt(0.95 * 0.05 / trials), boot / trials


def test_false_alarms_stay_below_alpha_without_a_change() -> None:
    """A and B identical (1 % run-to-run noise, skewed disturbances): over 4000 seeded A/Bs of
    6 and of 10 rounds, the share that FAIL is at most alpha, at any tolerance (0 included)."""
    rng = np.random.default_rng(7)
    for n in (6, 10):
        for tolerance in (0.0, 0.01, 0.03):
            rule = MetricRule("output_throughput", "higher", tolerance=tolerance)
            fails = 0
            for _ in range(4000):
                a, b = 100 * _disturbed(rng, n), 100 * _disturbed(rng, n)
                (m,) = judge_paired(WL, [rule], [{rule.metric: x} for x in a], [{rule.metric: y} for y in b]).metrics
                fails += m.status == "fail"
            assert fails / 4000 <= 0.05, (n, tolerance, fails)


@pytest.mark.parametrize(("alpha", "rounds"), [(0.05, 5), (1 / 32, 5), (0.01, 7), (0.1, 4), (0.5, 1)])
def test_fewest_rounds_for_the_sign_test(alpha: float, rounds: int) -> None:
    assert sign_test_min_rounds(alpha) == rounds
    assert 0.5**rounds <= alpha * (1 + 1e-9) and (rounds == 1 or 0.5 ** (rounds - 1) > alpha)
