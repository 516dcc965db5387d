"""Judging by boots: each boot's repeats collapse to their median, the boot medians are the samples."""

from __future__ import annotations

import pytest

from perfgate.verdict import MetricRule, judge

WL = "c8-in32-out16"
TPUT = MetricRule("output_throughput", "higher", tolerance=0.10)


def reps(*values: float) -> list[dict[str, float]]:
    return [{"output_throughput": v} for v in values]


# Three boots of three repeats: tight inside a boot, apart between them.
BASE = reps(1000, 1001, 999, 1040, 1041, 1039, 980, 981, 979)
BASE_BOOTS = [1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_boot_medians_are_the_samples_and_the_spreads_are_kept() -> None:
    (m,) = judge(WL, [TPUT], BASE, BASE, current_boots=BASE_BOOTS, baseline_boots=BASE_BOOTS).metrics
    assert (m.status, m.replicate, m.n_measured, m.n_baseline) == ("pass", "boot", 3, 3)
    assert m.measured == 1000.0
    assert m.between_boot_spread == pytest.approx(60 / 1000)
    assert m.baseline_between_boot_spread == pytest.approx(60 / 1000)
    assert m.within_boot_spread == pytest.approx(2 / 1000)
    assert "within-boot spread 0.2%, between-boot 6.0%, baseline between-boot 6.0%" in m.message


def test_a_slower_boot_set_fails_at_the_boot_count_p_value() -> None:
    slow = reps(*(v * 0.7 for v in (1000, 1001, 999, 1040, 1041, 1039, 980, 981, 979)))
    (m,) = judge(WL, [TPUT], slow, BASE, current_boots=BASE_BOOTS, baseline_boots=BASE_BOOTS).metrics
    assert m.status == "fail" and m.p_value == pytest.approx(0.05)
    assert "Mann-Whitney p=0.05 on 3 vs 3 boots" in m.message


def test_repeats_of_one_boot_are_one_sample_against_a_baseline_of_boots() -> None:
    # Unlabelled, these 9 repeats would be 9 samples for the test; from one boot they are one, so
    # the tolerance alone decides (as with one repeat) and says so.
    one_boot = reps(*(885 + i for i in range(9)))
    assert judge(WL, [TPUT], one_boot, BASE).metrics[0].noise_test == "mann-whitney"
    (m,) = judge(WL, [TPUT], one_boot, BASE, baseline_boots=BASE_BOOTS).metrics
    assert (m.status, m.noise_test, m.n_measured, m.n_baseline) == ("fail", "tolerance-only", 1, 3)
    assert "1 vs 3 boots: too few for a noise test at alpha 0.05, tolerance alone" in m.message


def test_a_baseline_spread_wider_than_the_tolerance_is_inconclusive_never_a_pass() -> None:
    wide = reps(900, 901, 899, 1000, 1001, 999, 1100, 1101, 1099)
    (m,) = judge(WL, [TPUT], wide, wide, current_boots=BASE_BOOTS, baseline_boots=BASE_BOOTS).metrics
    assert (m.status, m.ok) == ("inconclusive", False)
    assert "INCONCLUSIVE, the baseline's boots spread 20.0%" in m.message
    assert "wider than the tolerance 10%" in m.message
    assert "more boots ([gate] boots, --perf-boots), widen the tolerance, or gate a workload the GPU" in m.message
    assert 'failing unless [gate] inconclusive = "warn"' in m.message
    (warned,) = judge(
        WL, [TPUT], wide, wide, current_boots=BASE_BOOTS, baseline_boots=BASE_BOOTS, inconclusive="warn"
    ).metrics
    assert (warned.status, warned.ok) == ("inconclusive", True) and "a warning only" in warned.message


def test_a_clear_failure_stays_a_failure_whatever_the_spread() -> None:
    wide = reps(900, 901, 899, 1000, 1001, 999, 1100, 1101, 1099)
    half = reps(*(v / 2 for v in (900, 901, 899, 1000, 1001, 999, 1100, 1101, 1099)))
    (m,) = judge(WL, [TPUT], half, wide, current_boots=BASE_BOOTS, baseline_boots=BASE_BOOTS).metrics
    assert m.status == "fail"


def test_without_boot_labels_nothing_changes() -> None:
    plain = judge(WL, [TPUT], reps(1000, 1001, 999), reps(1000, 1002, 998)).metrics[0]
    labelled = judge(
        WL, [TPUT], reps(1000, 1001, 999), reps(1000, 1002, 998), current_boots=[1, 1, 1], baseline_boots=[1] * 3
    ).metrics[0]
    assert plain == labelled
    assert (plain.replicate, plain.between_boot_spread, plain.baseline_between_boot_spread) == ("repeat", None, None)


def test_boot_labels_must_match_the_repeats() -> None:
    with pytest.raises(ValueError, match="current_boots must label each of the current repeats"):
        judge(WL, [TPUT], reps(1000, 1001), reps(1000), current_boots=[1])
    with pytest.raises(ValueError, match="baseline_boots must label each of the baseline repeats"):
        judge(WL, [TPUT], reps(1000), None, baseline_boots=[1])
