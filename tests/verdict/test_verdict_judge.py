from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate._stats import median
from perfgate.verdict import RECORD_HINT, MetricRule, judge

WL = "c1024-in256-out128"
TPUT = MetricRule("output_throughput", "higher", tolerance=0.05)
TPOT = MetricRule("mean_tpot_ms", "lower", tolerance=0.05)


def reps(metric: str, *values: float) -> list[dict[str, float]]:
    return [{metric: v} for v in values]


def test_failure_message_names_everything() -> None:
    v = judge(
        WL, [TPUT], reps("output_throughput", 1121.4, 1100.0, 1130.0), reps("output_throughput", 1247.4, 1250.0, 1240.0)
    )
    (m,) = v.metrics
    assert not v.passed and v.failures == (m,)
    assert (m.status, m.ok, m.noise_test) == ("fail", False, "mann-whitney")
    assert m.measured == 1121.4 and m.baseline == 1247.4
    assert m.limit == pytest.approx(1247.4 * 0.95)
    assert m.change_pct == pytest.approx(-10.1, abs=0.01)
    assert m.p_value == pytest.approx(0.05)
    assert m.message == (
        "c1024-in256-out128: output_throughput 1,121.4 tok/s < limit 1,185.0 tok/s "
        "(baseline 1,247.4, -10.1%, tolerance 5%, Mann-Whitney p=0.05)"
    )


def test_latency_rise_fails_from_above() -> None:
    v = judge(WL, [TPOT], reps("mean_tpot_ms", 241.0, 240.0, 260.0), reps("mean_tpot_ms", 200.0, 201.0, 199.0))
    (m,) = v.metrics
    assert m.status == "fail"
    assert m.limit == pytest.approx(210.0)
    assert m.message.startswith("c1024-in256-out128: mean_tpot_ms 241.0 ms > limit 210.0 ms (baseline 200.0, +20.5%")


def test_improvement_passes() -> None:
    v = judge(
        WL,
        [TPUT, TPOT],
        [{"output_throughput": 2000.0, "mean_tpot_ms": 100.0}] * 3,
        [{"output_throughput": 1000.0, "mean_tpot_ms": 200.0}] * 3,
    )
    assert v.passed
    assert [m.status for m in v.metrics] == ["pass", "pass"]
    assert "within limit" in v.metrics[0].message


def test_past_the_limit_inside_the_noise_is_inconclusive_never_pass() -> None:
    # Median 6 % down, past the 5 % tolerance, but the repeats overlap the baseline's.
    now, base = reps("output_throughput", 940.0, 1010.0, 900.0), reps("output_throughput", 1000.0, 960.0, 1050.0)
    v = judge(WL, [TPUT], now, base)
    (m,) = v.metrics
    assert m.status == "inconclusive" and not m.ok and not v.passed
    assert v.inconclusive == (m,) and v.failures == (m,)
    assert m.p_value is not None and m.p_value > 0.05
    assert m.limit == pytest.approx(950.0) and m.measured == 940.0
    assert m.message.startswith(
        "c1024-in256-out128: output_throughput 940.0 tok/s < limit 950.0 tok/s (baseline 1,000.0, -6.0%"
    )
    assert "INCONCLUSIVE, the 3 vs 3 repeats cannot tell the change from noise" in m.message
    assert 'set [gate] inconclusive = "warn"' in m.message
    # As a warning the gate passes, and the message says it was only a warning.
    warned = judge(WL, [TPUT], now, base, inconclusive="warn")
    assert warned.passed and warned.metrics[0].status == "inconclusive"
    assert "a warning only" in warned.metrics[0].message


def test_within_the_limit_is_a_pass_whatever_the_noise() -> None:
    v = judge(
        WL, [TPUT], reps("output_throughput", 960.0, 1010.0, 990.0), reps("output_throughput", 1000.0, 960.0, 1050.0)
    )
    assert v.passed and v.metrics[0].status == "pass" and not v.inconclusive


@pytest.mark.parametrize(("n_now", "n_base"), [(1, 3), (3, 1), (1, 1), (2, 2)])
def test_tiny_samples_fall_back_to_tolerance_and_say_so(n_now: int, n_base: int) -> None:
    v = judge(WL, [TPUT], reps("output_throughput", *[900.0] * n_now), reps("output_throughput", *[1000.0] * n_base))
    (m,) = v.metrics
    assert m.status == "fail"
    assert m.noise_test == "tolerance-only" and m.p_value is None
    assert f"{n_now} vs {n_base} repeats: too few for a noise test at alpha 0.05, tolerance alone" in m.message


def test_two_repeats_use_the_test_when_alpha_allows() -> None:
    v = judge(WL, [TPUT], reps("output_throughput", 900.0, 901.0), reps("output_throughput", 1000.0, 1001.0), alpha=0.2)
    (m,) = v.metrics
    assert m.noise_test == "mann-whitney" and m.p_value == pytest.approx(1 / 6)
    assert m.status == "fail"


def test_ties_all_equal_pass_and_separated_ties_fail() -> None:
    same = judge(
        WL, [TPUT], reps("output_throughput", 1000.0, 1000.0, 1000.0), reps("output_throughput", 1000.0, 1000.0, 1000.0)
    )
    assert same.metrics[0].status == "pass" and same.metrics[0].p_value == 1.0
    # Deterministic simulator output: ties within each sample, none across.
    drop = judge(
        WL, [TPUT], reps("output_throughput", 900.0, 900.0, 900.0), reps("output_throughput", 1000.0, 1000.0, 1000.0)
    )
    assert drop.metrics[0].status == "fail" and drop.metrics[0].p_value == pytest.approx(0.05)


def test_no_baseline_passes_unless_required() -> None:
    note = "a baseline exists for another fingerprint (gpu_count 8 -> 4); not used"
    relaxed = judge(WL, [TPUT], reps("output_throughput", 1000.0), None, no_baseline_note=note)
    (m,) = relaxed.metrics
    assert relaxed.passed and m.status == "no-baseline" and m.ok
    assert m.baseline is None and m.change_pct is None
    assert note in m.message and RECORD_HINT in m.message and "pytest perf_tests --perf-update-baselines" in m.message
    strict = judge(WL, [TPUT], reps("output_throughput", 1000.0), None, require_baseline=True)
    assert not strict.passed and strict.metrics[0].status == "no-baseline"
    assert "failing because require_baseline is set" in strict.metrics[0].message


def test_baseline_without_the_metric_is_no_baseline_for_it() -> None:
    rule = MetricRule("gpu_power_min_w", "higher", tolerance=0.1)
    v = judge(WL, [rule], reps("gpu_power_min_w", 250.0), reps("output_throughput", 1000.0))
    assert v.metrics[0].status == "no-baseline"
    assert "recorded without it" in v.metrics[0].message


def test_floors_and_ceilings_apply_without_a_baseline() -> None:
    rules = [
        MetricRule("output_throughput", "higher", tolerance=0.05, floor=3500.0),
        MetricRule("p99_ttft_ms", "lower", ceiling=2000.0),
    ]
    v = judge(WL, rules, [{"output_throughput": 3400.0, "p99_ttft_ms": 2500.0}], None)
    tput, ttft = v.metrics
    assert tput.status == "fail" and tput.limit == 3500.0
    assert tput.message == "c1024-in256-out128: output_throughput 3,400.0 tok/s < floor 3,500.0 tok/s"
    assert ttft.status == "fail" and ttft.limit == 2000.0
    assert ttft.message == "c1024-in256-out128: p99_ttft_ms 2,500.0 ms > ceiling 2,000.0 ms"


def test_floor_only_metric_needs_no_baseline() -> None:
    v = judge(WL, [MetricRule("gpu_power_min_w", "higher", floor=200.0)], reps("gpu_power_min_w", 250.0), None)
    assert v.metrics[0].status == "pass" and v.metrics[0].limit == 200.0
    assert "within floor 200.0 W" in v.metrics[0].message


def test_floor_and_tolerance_both_reported_when_both_fail() -> None:
    rule = MetricRule("output_throughput", "higher", tolerance=0.05, floor=950.0)
    v = judge(
        WL, [rule], reps("output_throughput", 900.0, 901.0, 902.0), reps("output_throughput", 1000.0, 1001.0, 1002.0)
    )
    assert "< limit 951.0 tok/s; < floor 950.0 tok/s" in v.metrics[0].message


def test_not_measured_metric_is_reported_not_failed() -> None:
    rule = MetricRule("gpu_power_min_w", "higher", tolerance=0.1, floor=100.0)
    v = judge(WL, [rule], reps("output_throughput", 1000.0), reps("gpu_power_min_w", 250.0))
    (m,) = v.metrics
    assert m.status == "not-measured" and m.ok and m.measured is None
    assert "gpu_power_min_w was not measured in this run" in m.message


def test_partially_measured_metric_uses_the_repeats_that_have_it() -> None:
    current = [{"output_throughput": 1000.0}, {}, {"output_throughput": 1002.0}, {"output_throughput": float("nan")}]
    v = judge(WL, [TPUT], current, reps("output_throughput", 1001.0))
    assert v.metrics[0].measured == 1001.0 and v.metrics[0].n_measured == 2


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 2.0])
def test_bad_alpha_is_refused(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        judge(WL, [TPUT], reps("output_throughput", 1.0), None, alpha=alpha)


# Integer-valued samples keep every sum exact, so mirroring cannot be blurred by rounding.
samples = st.lists(st.integers(100, 1000).map(float), min_size=1, max_size=6)
tolerances = st.sampled_from([0.0, 0.01, 0.03, 0.05, 0.1])
alphas = st.sampled_from([0.01, 0.05, 0.1, 0.2])


@given(
    samples,
    st.lists(st.integers(500, 1000).map(float), min_size=1, max_size=6),
    tolerances,
    alphas,
    st.none() | st.integers(100, 1000).map(float),
)
def test_direction_symmetry(now: list[float], base: list[float], tol: float, alpha: float, floor: float | None) -> None:
    """A throughput drop fails exactly when the mirrored latency rise fails."""
    center = median(base)

    def mirror(xs: list[float]) -> list[float]:
        return [2 * center - x for x in xs]

    up = judge(
        WL,
        [MetricRule("output_throughput", "higher", tol, floor=floor)],
        reps("output_throughput", *now),
        reps("output_throughput", *base),
        alpha=alpha,
    )
    ceiling = None if floor is None else 2 * center - floor
    down = judge(
        WL,
        [MetricRule("mean_tpot_ms", "lower", tol, ceiling=ceiling)],
        reps("mean_tpot_ms", *mirror(now)),
        reps("mean_tpot_ms", *mirror(base)),
        alpha=alpha,
    )
    a, b = up.metrics[0], down.metrics[0]
    assert a.status == b.status
    assert a.p_value == b.p_value
    assert a.noise_test == b.noise_test
    assert b.baseline == center


@given(samples, samples, tolerances, alphas, st.data())
def test_worse_measurement_never_turns_fail_into_pass(
    now: list[float], base: list[float], tol: float, alpha: float, data: st.DataObject
) -> None:
    for rule, sign in (
        (MetricRule("output_throughput", "higher", tol, floor=300.0), -1),
        (MetricRule("p99_tpot_ms", "lower", tol, ceiling=900.0), 1),
    ):
        before = judge(WL, [rule], reps(rule.metric, *now), reps(rule.metric, *base), alpha=alpha).metrics[0]
        worse = list(now)
        for i in data.draw(st.sets(st.integers(0, len(now) - 1), min_size=1)):
            worse[i] += sign * data.draw(st.integers(1, 200))
        after = judge(WL, [rule], reps(rule.metric, *worse), reps(rule.metric, *base), alpha=alpha).metrics[0]
        if before.status == "fail":
            assert after.status == "fail"


@given(samples, tolerances)
def test_identical_runs_always_pass(values: list[float], tol: float) -> None:
    v = judge(
        WL,
        [TPUT, replace(TPOT, tolerance=tol)],
        [{"output_throughput": x, "mean_tpot_ms": x} for x in values],
        [{"output_throughput": x, "mean_tpot_ms": x} for x in values],
    )
    assert v.passed
