"""The one decision the gate and A/B share (``verdict._decide``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from perfgate.verdict import MetricRule, judge, judge_paired, sign_test_min_rounds
from perfgate.verdict._decide import decide, reaches

TPUT = MetricRule("output_throughput", "higher", tolerance=0.05, floor=50.0)


def test_at_the_limit_passes_past_it_fails_or_is_inconclusive() -> None:
    at = decide(TPUT, centre=95.0, reference=100.0, absolute=95.0, p_value=0.01, alpha=0.05, inconclusive="fail")
    assert (at.status, at.ok) == ("pass", True) and at.shown is at.limit and at.limit.value == 95.0
    past = decide(TPUT, centre=94.0, reference=100.0, absolute=94.0, p_value=0.01, alpha=0.05, inconclusive="fail")
    assert (past.status, past.ok) == ("fail", False) and past.violated == (past.limit,)
    # Too few samples for a test: the tolerance alone decides.
    alone = decide(TPUT, centre=94.0, reference=100.0, absolute=94.0, p_value=None, alpha=0.05, inconclusive="fail")
    assert alone.status == "fail"
    noisy = decide(TPUT, centre=94.0, reference=100.0, absolute=94.0, p_value=0.2, alpha=0.05, inconclusive="fail")
    assert (noisy.status, noisy.ok, noisy.violated) == ("inconclusive", False, ())
    warned = decide(TPUT, centre=94.0, reference=100.0, absolute=94.0, p_value=0.2, alpha=0.05, inconclusive="warn")
    assert (warned.status, warned.ok) == ("inconclusive", True)
    # A broken floor fails whatever the noise says; without a reference there is no limit.
    floor = decide(TPUT, centre=40.0, reference=None, absolute=40.0, p_value=None, alpha=0.05, inconclusive="warn")
    assert (floor.status, floor.limit, [b.kind for b in floor.violated]) == ("fail", None, ["floor"])


def test_slack_counts_an_integer_ratio_p_value_as_reaching_alpha() -> None:
    assert reaches(1 / 20, 0.05) and reaches(0.5**5, 1 / 32) and not reaches(0.0500001, 0.05)


@given(st.floats(0.001, 0.5))
def test_fewest_rounds_are_those_whose_p_value_reaches_alpha(alpha: float) -> None:
    n = sign_test_min_rounds(alpha)
    assert reaches(0.5**n, alpha) and (n == 1 or not reaches(0.5 ** (n - 1), alpha))


@given(st.floats(0.5, 1.5).filter(lambda r: abs(r - 0.95) > 1e-9), st.sampled_from(["fail", "warn"]))
def test_gate_and_ab_decide_alike_when_the_tolerance_alone_decides(ratio: float, policy: str) -> None:
    # One repeat against one baseline and two rounds: no noise test either way, the same limit.
    gate = judge("w", [TPUT], [{"output_throughput": 100.0 * ratio}], [{"output_throughput": 100.0}])
    ab = judge_paired(
        "w",
        [TPUT],
        [{"output_throughput": 100.0}] * 2,
        [{"output_throughput": 100.0 * ratio}] * 2,
        inconclusive=policy,  # type: ignore[arg-type]  # sampled from the two policies
    )
    assert gate.metrics[0].status == ab.metrics[0].status
