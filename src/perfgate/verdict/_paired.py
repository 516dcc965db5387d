"""Paired A/B verdicts: is variant B worse than variant A by more than the tolerance?

Each round measures A and B back to back on one host; the evidence for a metric is the ratio
B/A of every round. Whatever the host does between rounds (thermals, clocks, a neighbour) moves
both runs of a round alike and cancels in the ratio; the ABBA order of the rounds (AB, BA, AB,
...) makes B the later run in one round and the earlier in the next, so a trend within a round
cancels over each pair of rounds.

The decision is the gate's (``_decide``): a metric passes when the median ratio is within
the tolerance; past it, it FAILS when the rounds show that B is really worse than A, and is
INCONCLUSIVE when they cannot tell the change from noise (never a pass). "Really worse" is the
one-sided sign test at ``alpha``: were A and B the same, each round's ratio would be as likely
above 1 as below, so the number of rounds in which B is worse would be Binomial(n, 1/2). The
interval around the median ratio is the same test inverted: the order statistics r_(k) and
r_(n+1-k) of the n ratios cover the true median ratio with probability exactly
1 - 2 P(Bin(n, 1/2) <= k - 1), whatever the ratios' distribution; k is the largest with each
tail at most ``alpha``, so the good-side bound is on the bad side of 1 exactly when the test is
significant.

Why the sign test, not a bootstrap or Wilcoxon's signed-rank test: it is a test and an interval
for the median ratio itself (the number reported), exact at the 5-12 rounds an A/B can afford,
and it assumes only independent rounds. No symmetry: a round disturbed by a neighbour is slow,
never fast, so ratio distributions are skewed (Wilcoxon assumes symmetry). One wild round
moves it by one rank. A percentile bootstrap of a median over 6 rounds has only a few distinct
values and covers less than it claims (tests/verdict/test_verdict_paired.py measures both).
The price is that n rounds cannot reach a p-value below 2^-n: at alpha 0.05 five rounds are
the least for a noise test; with fewer, the tolerance alone decides and the message says so,
as the gate does with too few repeats. Rounds in which B equals A exactly count as "not worse"
(against the alternative, as the gate's Mann-Whitney counts ties).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from perfgate._stats import median
from perfgate.catalogue import Direction, fmt_value, unit_of
from perfgate.profile import InconclusivePolicy
from perfgate.verdict._decide import check_policy, decide, decision_message, reaches
from perfgate.verdict._judge import WorkloadVerdict
from perfgate.verdict._rules import MetricRule

PairedStatus = Literal["pass", "fail", "inconclusive", "not-measured", "unpaired"]
PairedTest = Literal["sign-test", "tolerance-only", "none"]


@dataclass(frozen=True)
class PairedMetricVerdict:
    """The A/B judgement on one metric of one workload.

    ``a_values``, ``b_values`` and ``ratios`` (B/A) are per round, None where that round has no
    value (a run that stopped, a metric not measured, A's value not positive); medians are over
    the paired rounds. ``limit_ratio`` is the ratio the tolerance allows (0.97 for 3 % on a
    higher-is-better metric, 1.03 on a lower-is-better one); ``ci_low``/``ci_high`` the
    sign-test interval of the median ratio and ``ci_coverage`` its exact coverage;
    ``rounds_worse`` the paired rounds in which B was worse than A. Status "unpaired": measured
    in one variant's runs only, so nothing could be compared (never ok).
    """

    workload: str
    metric: str
    direction: Direction
    status: PairedStatus
    ok: bool
    a_values: tuple[float | None, ...]
    b_values: tuple[float | None, ...]
    ratios: tuple[float | None, ...]
    median_a: float | None
    median_b: float | None
    median_ratio: float | None
    ci_low: float | None
    ci_high: float | None
    ci_coverage: float | None
    tolerance: float | None
    limit_ratio: float | None
    p_value: float | None
    noise_test: PairedTest
    rounds_worse: int
    n_pairs: int
    message: str

    @property
    def change_pct(self) -> float | None:
        """(median ratio - 1) x 100: the change from A to B in percent."""
        return (self.median_ratio - 1.0) * 100.0 if self.median_ratio is not None else None


def binomial_half_cdf(k: int, n: int) -> float:
    """P(Binomial(n, 1/2) <= k), exactly (as a float of an integer ratio)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / (1 << n)


def sign_test_p(worse: int, n: int) -> float:
    """One-sided sign test: P(at least ``worse`` of ``n`` rounds worse) when worse and better are equally likely."""
    return binomial_half_cdf(n - worse, n) if n else 1.0


def median_interval(values: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """(low, high, coverage): the order-statistic interval of the median of ``values``.

    Each bound is a one-sided bound at confidence >= 1 - ``alpha`` where the count allows it
    (``2^-n <= alpha``); below that the interval is [min, max] and ``coverage`` says how little
    it covers. ``coverage`` is exact for independent draws of any continuous distribution.
    """
    s = sorted(values)
    n = len(s)
    if not n:
        raise ValueError("median interval of no values")
    k = 1
    while 2 * (k + 1) <= n + 1 and reaches(binomial_half_cdf(k, n), alpha):
        k += 1
    return s[k - 1], s[n - k], 1.0 - 2.0 * binomial_half_cdf(k - 1, n)


def judge_paired(
    workload: str,
    rules: Sequence[MetricRule],
    a_runs: Sequence[Mapping[str, float] | None],
    b_runs: Sequence[Mapping[str, float] | None],
    *,
    alpha: float = 0.05,
    inconclusive: InconclusivePolicy = "fail",
) -> WorkloadVerdict[PairedMetricVerdict]:
    """Judge B against A, round by round.

    ``a_runs[i]`` and ``b_runs[i]`` are round i's metrics of each variant (flat dicts; None for
    a run that produced none). Tolerances are held to the median ratio; floors and ceilings to
    B's median, as the gate would hold B.
    """
    check_policy(alpha, inconclusive)
    if len(a_runs) != len(b_runs):
        raise ValueError(f"{len(a_runs)} runs of A but {len(b_runs)} of B: rounds pair one run of each")
    metrics = tuple(_judge_metric(workload, rule, a_runs, b_runs, alpha, inconclusive) for rule in rules)
    return WorkloadVerdict(workload=workload, metrics=metrics)


def _value(run: Mapping[str, float] | None, metric: str) -> float | None:
    v = run.get(metric) if run is not None else None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    # A ratio needs a positive A: a zero (e.g. no power reading) says nothing about B's change.
    return b / a if a is not None and b is not None and a > 0 else None


def _judge_metric(
    workload: str,
    rule: MetricRule,
    a_runs: Sequence[Mapping[str, float] | None],
    b_runs: Sequence[Mapping[str, float] | None],
    alpha: float,
    inconclusive: InconclusivePolicy,
) -> PairedMetricVerdict:
    metric, unit = rule.metric, unit_of(rule.metric)
    higher = rule.direction == "higher"
    a_vals = tuple(_value(r, metric) for r in a_runs)
    b_vals = tuple(_value(r, metric) for r in b_runs)
    ratios = tuple(_ratio(a, b) for a, b in zip(a_vals, b_vals))
    paired = [(a, b, r) for a, b, r in zip(a_vals, b_vals, ratios) if a is not None and b is not None and r is not None]
    n = len(paired)
    common: dict[str, Any] = {
        "workload": workload,
        "metric": metric,
        "direction": rule.direction,
        "a_values": a_vals,
        "b_values": b_vals,
        "ratios": ratios,
        "tolerance": rule.tolerance,
        "n_pairs": n,
    }
    empty: dict[str, Any] = {
        "median_a": None,
        "median_b": None,
        "median_ratio": None,
        "ci_low": None,
        "ci_high": None,
        "ci_coverage": None,
        "limit_ratio": None,
        "p_value": None,
        "noise_test": "none",
        "rounds_worse": 0,
    }
    in_a, in_b = any(v is not None for v in a_vals), any(v is not None for v in b_vals)
    if not paired:
        if not in_a and not in_b:
            return PairedMetricVerdict(
                **common,
                **empty,
                status="not-measured",
                ok=True,
                message=f"{workload}: {metric} was measured in neither variant's runs; not gated",
            )
        where = (
            "in A's runs but not in B's"
            if in_a and not in_b
            else "in B's runs but not in A's"
            if in_b and not in_a
            else "in both variants but never in the same round with a positive value in A"
        )
        return PairedMetricVerdict(
            **common,
            **empty,
            status="unpaired",
            ok=False,
            message=f"{workload}: {metric} was measured {where}; nothing to compare, so it cannot pass",
        )

    med_a = median([a for a, _, _ in paired])
    med_b = median([b for _, b, _ in paired])
    values = [r for _, _, r in paired]
    med_r = median(values)
    low, high, coverage = median_interval(values, alpha)
    worse = sum(1 for r in values if (r < 1.0 if higher else r > 1.0))
    has_test = reaches(0.5**n, alpha)
    p_value = sign_test_p(worse, n) if has_test else None
    decision = decide(
        rule, centre=med_r, reference=1.0, absolute=med_b, p_value=p_value, alpha=alpha, inconclusive=inconclusive
    )

    head = (
        f"{workload}: {metric} B/A {med_r:.3f} ({(med_r - 1) * 100:+.1f}%: B {fmt_value(med_b, unit)} "
        f"vs A {fmt_value(med_a, unit)})"
    )
    evidence = [f"B worse in {worse} of {n} round{'s' if n != 1 else ''}"]
    if has_test:
        evidence.append(f"sign test p={p_value:.2g}")
    else:
        evidence.append(
            f"too few rounds for a noise test at alpha {alpha:g} (need {sign_test_min_rounds(alpha)}), tolerance alone"
        )
    evidence.append(f"{coverage * 100:.1f}% CI [{low:.3f}, {high:.3f}]")
    if rule.tolerance is not None:
        evidence.insert(0, f"tolerance {rule.tolerance * 100:g}%")
    message = decision_message(
        decision,
        head,
        f" ({'; '.join(evidence)})",
        # The ratio's limit is a bare ratio; floors and ceilings hold B's median in the metric's unit.
        value_text=lambda b: f"{b.value:.3f}" if b.kind == "limit" else fmt_value(b.value, unit),
        subject=lambda b: "" if b.kind == "limit" else f"B's median {fmt_value(med_b, unit)} ",
        samples=f"{n} rounds",
        advice="run more rounds (--rounds) on a quieter host",
        alpha=alpha,
    )
    limit = decision.limit

    return PairedMetricVerdict(
        **common,
        status=decision.status,
        ok=decision.ok,
        median_a=med_a,
        median_b=med_b,
        median_ratio=med_r,
        ci_low=low,
        ci_high=high,
        ci_coverage=coverage,
        limit_ratio=limit.value if limit is not None else None,
        p_value=p_value,
        noise_test="sign-test" if has_test else "tolerance-only",
        rounds_worse=worse,
        message=message,
    )


def sign_test_min_rounds(alpha: float) -> int:
    """The fewest rounds whose sign test can reach ``alpha`` (5 at 0.05: 2^-5 <= 0.05 < 2^-4)."""
    n = 1
    while not reaches(0.5**n, alpha):
        n += 1
    return n
