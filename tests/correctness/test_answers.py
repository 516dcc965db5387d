"""The load's sampled answers scored teacher-forced: each greedy token must be the server's argmax,
near-ties aside; a server that cannot score them fails the check rather than passing it."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.catalogue import DEFAULT_LIMITS
from perfgate.correctness import AnswerCheck, LoadAnswer, Position, Prompt, score_answers
from perfgate.errors import CorrectnessError


class _Scorer:
    """A probe client whose argmax at each position is ``truth(prompt, position)``; ``logprob``:
    what it gives the answered token when that is not the argmax."""

    api = "sglang"
    can_score = True

    def __init__(
        self, truth: dict[int, list[int]], logprob: float = -3.0, lead: float = -0.1, spell: bool = True
    ) -> None:
        self.truth, self.logprob, self.lead, self.spell = truth, logprob, lead, spell

    async def score(self, prompt: Prompt, tokens: Sequence[int]) -> list[Position]:
        if prompt.index not in self.truth:
            raise CorrectnessError(f"correctness probe: /generate answered HTTP 500 for prompt {prompt.index}")
        out = []
        for token, best in zip(tokens, self.truth[prompt.index], strict=True):
            lp = self.lead if token == best else self.logprob
            out.append(Position(token, lp, ((best, self.lead),), _word(token) if self.spell else None))
        return out


def _word(token: int) -> str:
    """How the fake tokenizer spells a token: a space and a word (a byte-level BPE's " the")."""
    return f" w{token}"


def _check(scorer: _Scorer, answers: list[LoadAnswer], near_tie_nats: float = 0.05) -> AnswerCheck:
    return asyncio.run(
        score_answers(scorer, "w", answers, near_tie_nats=near_tie_nats, limits=DEFAULT_LIMITS)  # type: ignore[arg-type]
    )


def _answers(outputs: dict[int, list[int]], text: dict[int, str] | None = None) -> list[LoadAnswer]:
    """Each answer with the text its ids spell, unless ``text`` says otherwise."""
    spelled = {i: "".join(map(_word, out)) for i, out in outputs.items()}
    return [LoadAnswer(i, [1, 2, 3], out, {**spelled, **(text or {})}[i]) for i, out in outputs.items()]


def test_answers_that_are_the_servers_argmax_pass() -> None:
    truth = {3: [5, 6, 7, 8], 9: [1, 1, 2, 2]}
    check = _check(_Scorer(truth), _answers(truth))
    assert check == AnswerCheck(requests=2, positions=8, mismatches=0, nonfinite=0, text_checked=2)
    assert check.line() == (
        "2 answer(s) scored teacher-forced, 8 positions: 0 not the model's argmax, 0 non-finite; text spells the "
        "ids in 2 of 2 checked; 0.0 s"
    )


def test_a_wrong_token_fails_naming_the_workload_request_and_position() -> None:
    truth = {3: [5, 6, 7, 8], 9: [1, 1, 2, 2]}
    check = _check(_Scorer(truth), _answers({3: [5, 6, 7, 8], 9: [1, 1, 4, 2]}))
    assert (check.requests, check.positions, check.mismatches) == (2, 8, 1)
    assert check.problem.startswith(
        "workload w: the load's answers are not the model's greedy tokens: request 9, output position 2: it "
        "answered token 4 (logprob -3.0000), the server's most likely there is token 2 (logprob -0.1000); "
        "scored teacher-forced after the measured phase, of 8 positions in 2 answers 1 are not the argmax "
        "(limit 2.0%: [correctness] limits.correctness_argmax_mismatch) and 0 are NaN or infinite"
    )


def test_a_near_tie_is_not_a_mismatch_and_the_limit_is_a_share() -> None:
    truth = {0: list(range(100))}
    one_wrong = {0: [*range(99), 7]}
    # 1 of 100 positions is within the probe's 2 % limit; so is a flip by less than the near-tie.
    assert _check(_Scorer(truth), _answers(one_wrong)).problem == ""
    tied = _check(_Scorer(truth, logprob=-0.12), _answers({0: [7] * 100}))
    assert (tied.mismatches, tied.near_ties) == (0, 99)
    assert "0 not the model's argmax (99 near-ties), 0 non-finite" in tied.line()
    assert _check(_Scorer(truth, logprob=-0.12), _answers({0: [7] * 100}), near_tie_nats=0.01).problem


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_logprob_fails(bad: float) -> None:
    truth = {0: [1, 2, 3]}
    check = _check(_Scorer(truth, lead=bad), _answers(truth))
    assert check.nonfinite == 3 and check.mismatches == 0
    assert "request 0, output position 0: the server scores its token 1 with NaN or infinite logprobs" in check.problem


def test_a_server_that_cannot_score_fails_the_check() -> None:
    check = _check(_Scorer({0: [1]}), _answers({0: [1], 5: [2]}))
    assert check.problem == (
        "workload w: the load's answers could not be scored teacher-forced: correctness probe: /generate answered "
        "HTTP 500 for prompt 5"
    )
    assert check.requests == 0


@given(st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=20), min_size=1, max_size=8), st.data())
def test_the_count_of_mismatches_is_the_count_of_changed_tokens(outputs: list[list[int]], data: st.DataObject) -> None:
    truth = dict(enumerate(outputs))
    sent = {i: [t if data.draw(st.booleans()) else t + 1 for t in out] for i, out in truth.items()}
    changed = sum(a != b for i in truth for a, b in zip(truth[i], sent[i], strict=True))
    check = _check(_Scorer(truth), _answers(sent))
    assert (check.positions, check.mismatches) == (sum(map(len, outputs)), changed)
    assert bool(check.problem) == (changed > 0.02 * check.positions)


def test_text_that_does_not_spell_the_ids_fails_when_every_answer_shows_it() -> None:
    truth = {3: [5, 6, 7, 8], 9: [1, 1, 2, 2]}
    lorem = {3: " lorem ipsum dolor sit", 9: " amet"}
    check = _check(_Scorer(truth), _answers(truth, lorem))
    assert (check.mismatches, check.text_checked, check.text_unspelled) == (0, 2, 2)
    assert check.problem == (
        "workload w: the load's answers' text does not spell their ids: request 3: 0 of 4 of its tokens' texts (as "
        "the server's tokenizer spells them) appear in the 22 characters it streamed, and so for all 2 answers whose "
        "text could be checked: the text was rewritten on the way, or does not come from the tokens the server counted"
    )
    # One answer of a model may be all special tokens (left out of its text): not every answer.
    assert _check(_Scorer(truth), _answers(truth, {9: ""})).problem == ""


@pytest.mark.parametrize(
    "text",
    [
        # Joined without the spaces, or with a character the tokens split (detokenizing differs).
        " w5w6w7w8",
        " w5 w6 w7 \ufffd w8",
        # Half the tokens' texts are enough.
        " w5 w6 lorem",
    ],
)
def test_text_that_holds_most_of_its_tokens_texts_passes(text: str) -> None:
    truth = {3: [5, 6, 7, 8], 9: [1, 1, 2, 2]}
    check = _check(_Scorer(truth), _answers(truth, {3: text}))
    assert (check.problem, check.text_checked, check.text_unspelled) == ("", 2, 0)


def test_text_is_not_judged_without_enough_spelled_tokens() -> None:
    truth = {3: [5, 6, 7], 9: [1, 1, 2]}
    # Three tokens each: fewer than the 4 a judgement needs; a server that spells nothing, none.
    assert _check(_Scorer(truth), _answers(truth, {3: "", 9: ""})).text_checked == 0
    longer = {3: [5, 6, 7, 8], 9: [1, 1, 2, 2]}
    assert _check(_Scorer(longer, spell=False), _answers(longer, {3: "", 9: ""})).text_checked == 0
