"""The comparison statistics and the degenerate checks, on hand-built answers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.correctness import Finding, Position, PromptRecord
from perfgate.correctness._compare import agreement, degenerate, duplicates_disagree, first_divergence, pass_metrics

LIMIT = 1.0
TIE = 0.05


def _answer(tokens: list[int], logprobs: list[float], runner_up: float = 1.0) -> list[Position]:
    """Greedy positions whose runner-up (token + 1) trails by ``runner_up`` nats."""
    return [Position(t, lp, ((t, lp), (t + 1, lp - runner_up))) for t, lp in zip(tokens, logprobs, strict=True)]


def _record(answer: list[Position], index: int = 0) -> PromptRecord:
    return PromptRecord.of(index, answer)


def _agree(ref: PromptRecord, generated: list[Position], scored: list[Position] | None) -> dict[str, float]:
    a = agreement(ref, generated, scored, 8, delta_limit=LIMIT, near_tie_nats=TIE)
    return pass_metrics([a], list(a.findings))


tokens_st = st.lists(st.integers(0, 1000), min_size=1, max_size=40)


@given(tokens_st, st.data())
def test_the_same_answers_agree_exactly(tokens: list[int], data: st.DataObject) -> None:
    logprobs = data.draw(st.lists(st.floats(-20, 0), min_size=len(tokens), max_size=len(tokens)))
    answer = _answer(tokens, logprobs)
    m = _agree(_record(answer), answer, answer)
    assert m["correctness_logprob_delta_mean"] == 0
    assert m["correctness_logprob_delta_max"] == 0
    assert m["correctness_argmax_mismatch"] == 0
    assert m["correctness_greedy_match"] == 1


@given(tokens_st, st.data())
def test_the_mean_and_max_are_those_of_the_differences(tokens: list[int], data: st.DataObject) -> None:
    n = len(tokens)
    ref_lp = data.draw(st.lists(st.floats(-20, 0), min_size=n, max_size=n))
    shift = data.draw(st.lists(st.floats(-0.5, 0.5), min_size=n, max_size=n))
    ref = _record(_answer(tokens, ref_lp))
    scored = _answer(tokens, [a + d for a, d in zip(ref_lp, shift, strict=True)])
    m = _agree(ref, _answer(tokens, ref_lp), scored)
    deltas = [abs((a + d) - a) for a, d in zip(ref_lp, shift, strict=True)]
    # The worse of the two views: teacher-forced (these deltas) and greedy (identical: 0).
    assert m["correctness_logprob_delta_mean"] == pytest.approx(math.fsum(deltas) / n, abs=1e-12)
    assert m["correctness_logprob_delta_max"] == pytest.approx(max(deltas), abs=1e-12)


def test_a_changed_argmax_is_a_mismatch_and_its_finding_names_everything() -> None:
    ref = _record(_answer([5, 6, 7, 8], [-0.1, -0.2, -0.3, -0.4]))
    scored = _answer([5, 6, 7, 8], [-0.1, -0.2, -9.0, -0.4])
    scored[2] = Position(7, -9.0, ((99, -0.01), (7, -9.0)))
    a = agreement(ref, _answer([5, 6, 7, 8], [-0.1, -0.2, -0.3, -0.4]), scored, 8, delta_limit=LIMIT, near_tie_nats=TIE)
    m = pass_metrics([a], list(a.findings))
    assert m["correctness_argmax_mismatch"] == pytest.approx(1 / 4)
    assert m["correctness_logprob_delta_max"] == pytest.approx(8.7)
    messages = [f.message() for f in a.findings]
    assert any(
        "prompt 0, position 2" in t and "expected token 7 (logprob -0.3000)" in t and "got token 99" in t
        for t in messages
    ), messages


def test_a_flip_at_a_near_tie_is_not_a_mismatch() -> None:
    ref = _record(_answer([5, 6], [-0.69, -0.2], runner_up=0.01))
    scored = [Position(5, -0.70, ((42, -0.69), (5, -0.70))), Position(6, -0.2, ((6, -0.2),))]
    assert _agree(ref, _answer([5, 6], [-0.69, -0.2]), scored)["correctness_argmax_mismatch"] == 0


def test_near_ties_are_counted_apart_from_mismatches() -> None:
    ref = _record(_answer([5, 6, 7], [-0.69, -0.2, -0.3], runner_up=0.01))
    # Position 0: another token leads by 0.01 nats (a tie); position 2: by 2 nats (a mismatch).
    scored = [
        Position(5, -0.70, ((42, -0.69), (5, -0.70))),
        Position(6, -0.2, ((6, -0.2),)),
        Position(7, -2.3, ((43, -0.3), (7, -2.3))),
    ]
    a = agreement(ref, _answer([5, 6, 7], [-0.69, -0.2, -0.3]), scored, 8, delta_limit=LIMIT, near_tie_nats=TIE)
    tf = a.views["teacher-forced"]
    assert (tf.mismatches, tf.near_ties) == (1, 1)
    assert (a.views["greedy"].mismatches, a.views["greedy"].near_ties) == (0, 0)


def test_greedy_view_catches_a_decode_only_fault_that_teacher_forcing_misses() -> None:
    ref_answer = _answer([1, 2, 3, 4, 5, 6, 7, 8], [-0.1] * 8)
    # Decode parts from the reference at position 2 with a clear lead lost; prefill agrees.
    generated = [*ref_answer[:2], Position(77, -0.1, ((77, -0.1), (78, -1.1))), *ref_answer[3:]]
    m = _agree(_record(ref_answer), generated, ref_answer)
    assert m["correctness_greedy_match"] == 0
    assert m["correctness_argmax_mismatch"] == pytest.approx(1 / 3)  # greedy view: 3 positions, 1 lost


def test_chat_without_scores_compares_the_common_prefix() -> None:
    ref_answer = _answer([1, 2, 3], [-0.1, -0.2, -0.3])
    generated = _answer([1, 2, 3], [-0.1, -0.25, -0.3])
    m = _agree(_record(ref_answer), generated, None)
    assert m["correctness_logprob_delta_max"] == pytest.approx(0.05)


def test_nothing_measurable_is_nan_not_zero() -> None:
    ref = _record(_answer([1, 2], [-0.1, -0.2]))
    nan = [Position(1, math.nan), Position(2, math.nan)]
    a = agreement(ref, nan, nan, 8, delta_limit=LIMIT, near_tie_nats=TIE)
    m = pass_metrics([a], [*a.findings, *degenerate(0, nan, ref, 8)])
    assert math.isnan(m["correctness_logprob_delta_mean"])
    assert math.isnan(m["correctness_argmax_mismatch"])
    assert m["correctness_nonfinite"] == 4  # 2 greedy (degenerate) + 2 teacher-forced (agreement)


@pytest.mark.parametrize(
    ("answer", "metric"),
    [
        ([Position(3, -0.1)] * 3 + [Position(4, math.inf)], "correctness_nonfinite"),
        ([Position(3, -0.1)] * 8, "correctness_repeated"),
        ([Position(t, 0.0) for t in range(8)], "correctness_zero_logprobs"),
    ],
)
def test_each_degenerate_answer_fails_on_its_own(answer: list[Position], metric: str) -> None:
    found = degenerate(5, answer, None, 16)
    assert [f.metric for f in found] == [metric]
    assert "concurrency 16, prompt 5" in found[0].message()


def test_a_repeated_output_the_reference_shows_too_is_the_model() -> None:
    answer = [Position(3, -0.1)] * 8
    assert degenerate(0, answer, _record(answer), 8) == []


def test_duplicates_that_part_fail_unless_at_a_near_tie() -> None:
    a = _answer([1, 2, 3], [-0.1] * 3)
    b = _answer([1, 9, 3], [-0.1] * 3)
    found = duplicates_disagree(2, a, b, 32, TIE)
    assert isinstance(found, Finding)
    assert found.position == 1 and found.expected_token == 2 and found.got_token == 9
    tie_a = _answer([1, 2, 3], [-0.1] * 3, runner_up=0.01)
    tie_b = _answer([1, 9, 3], [-0.1] * 3, runner_up=0.01)
    assert duplicates_disagree(2, tie_a, tie_b, 32, TIE) is None
    assert duplicates_disagree(2, a, a, 32, TIE) is None


@given(st.lists(st.integers(0, 5), max_size=20), st.lists(st.integers(0, 5), max_size=20))
def test_first_divergence_is_the_first_differing_position(a: list[int], b: list[int]) -> None:
    d = first_divergence(a, b)
    if d is None:
        assert a == b
    else:
        assert a[:d] == b[:d]
        assert d == min(len(a), len(b)) or a[d] != b[d]
