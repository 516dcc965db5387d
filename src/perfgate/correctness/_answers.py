"""Whether the load's own answers are the model's: a sample of them scored teacher-forced.

The load decodes greedily (temperature 0), so each of its output tokens is the model's most likely
one given the prompt and the tokens before it. Sent back as one prompt (a prefill, after the
measured phase), a load answer must find each of its tokens the argmax where it stands, near-ties
aside. A proxy that rewrites the answers, a server that answers without its model, and a fault
that only the load's full batch triggers (the scoring runs a handful of requests) all show up
there, with no stored reference: the reference is the server itself, asked one request at a time.
A consistently wrong model passes this check; the probe's recorded reference is what catches it.

The scoring also returns each token's text as the server's tokenizer spells it, so an answer's
streamed text is held to its ids: the text must contain most of its tokens' texts. Containment,
not equality: detokenizing a whole answer differs from joining its tokens' texts (spaces, bytes of
a character split over tokens, special tokens left out), but text rewritten on the way holds few.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from perfgate.correctness._adapters import Position, ProbeClient, open_client
from perfgate.correctness._spec import Prompt
from perfgate.errors import CorrectnessError

# A token's text is checked when it has at least this many letters or digits: shorter pieces (a
# space, a byte of a split character, punctuation) are found anywhere or nowhere by chance.
MIN_SPELLED_CHARS = 2
# An answer is judged on its text only with this many such tokens.
MIN_CHECKABLE = 4
# An answer whose text holds less than this share of its checked tokens' texts does not spell them.
MIN_SPELLED_SHARE = 0.5
# As the load's own rules: every answer that can show it, and at least this many.
MIN_ANSWERS = 2


@dataclass(frozen=True)
class LoadAnswer:
    """One load request's prompt and greedy answer, as the load's stream carried them (``text``:
    the whole answer's text; None when the stream carried no text field)."""

    request: int
    prompt_ids: Sequence[int]
    output_ids: Sequence[int]
    text: str | None = None


@dataclass(frozen=True)
class AnswerCheck:
    """A repeat's sampled load answers, scored: ``requests`` and ``positions`` scored, of them
    ``mismatches`` (a token that is not the server's argmax there, near-ties aside) and
    ``nonfinite`` (a NaN or infinite logprob). ``problem``: why the answers are not the model's
    ("" when they are); ``note``: what limited the check ("" when every asked request was scored);
    ``near_ties``: positions whose token is not the argmax but within ``near_tie_nats`` of it (not
    mismatches: how often the load's batch and the scoring prefill broke a tie differently)."""

    requests: int = 0
    positions: int = 0
    mismatches: int = 0
    nonfinite: int = 0
    problem: str = ""
    note: str = ""
    # Answers whose text was held to their ids (enough spelled tokens), and of them those whose
    # text does not hold most of their tokens' texts.
    text_checked: int = 0
    text_unspelled: int = 0
    # Wall time of the scoring requests (the check's cost to the run).
    duration_s: float = 0.0
    near_ties: int = 0

    def line(self) -> str:
        """The check in one line for the summary."""
        if not self.requests:
            return f"not scored ({self.note})" if self.note else "not scored"
        text = (
            f"{self.requests} answer(s) scored teacher-forced, {self.positions:,} positions: "
            f"{self.mismatches} not the model's argmax"
            + (f" ({self.near_ties} near-ties)" if self.near_ties else "")
            + f", {self.nonfinite} non-finite; text spells the ids in "
            f"{self.text_checked - self.text_unspelled} of {self.text_checked} checked; {self.duration_s:.1f} s"
        )
        return text + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class _Wrong:
    """The first position of one answer that its server does not back."""

    request: int
    position: int
    sent: Position
    mismatches: int
    nonfinite: int


def _judge(answer: LoadAnswer, scored: Sequence[Position], near_tie_nats: float) -> _Wrong | None:
    mismatches = nonfinite = 0
    first: tuple[int, Position] | None = None
    for i, pos in enumerate(scored):
        if not math.isfinite(pos.logprob) or any(not math.isfinite(lp) for _, lp in pos.top):
            nonfinite += 1
        elif pos.argmax != pos.token and pos.top[0][1] - pos.logprob >= near_tie_nats:
            mismatches += 1
        else:
            continue
        if first is None:
            first = (i, pos)
    if first is None:
        return None
    return _Wrong(answer.request, first[0], first[1], mismatches, nonfinite)


def _near_ties(scored: Sequence[Position], near_tie_nats: float) -> int:
    """Positions whose token is not the argmax, but within ``near_tie_nats`` of it (finite ones)."""
    return sum(
        1
        for pos in scored
        if math.isfinite(pos.logprob)
        and all(math.isfinite(lp) for _, lp in pos.top)
        and pos.argmax is not None
        and pos.argmax != pos.token
        and pos.top[0][1] - pos.logprob < near_tie_nats
    )


def _spelling(answer: LoadAnswer, scored: Sequence[Position]) -> tuple[int, int] | None:
    """How many of the answer's checkable tokens' texts its streamed text holds, of how many;
    None when it cannot be judged (no text, or too few tokens spelled with letters or digits)."""
    if answer.text is None:
        return None
    pieces = [p.text.strip() for p in scored if p.text is not None]
    checkable = [t for t in pieces if sum(c.isalnum() for c in t) >= MIN_SPELLED_CHARS]
    if len(checkable) < MIN_CHECKABLE:
        return None
    return sum(t in answer.text for t in checkable), len(checkable)


def _unspelled(
    workload: str, answers: Sequence[LoadAnswer], scored: Sequence[Sequence[Position]]
) -> tuple[int, int, str]:
    """(answers checked, answers whose text does not spell their ids, the problem when every one
    checked, at least :data:`MIN_ANSWERS`, does not)."""
    judged = []
    for a, s in zip(answers, scored, strict=True):
        spelled = _spelling(a, s)
        if spelled is not None:
            judged.append((a, *spelled))
    bad = [(a, found, n) for a, found, n in judged if found < MIN_SPELLED_SHARE * n]
    if len(judged) < MIN_ANSWERS or len(bad) < len(judged):
        return len(judged), len(bad), ""
    a, found, n = bad[0]
    return (
        len(judged),
        len(bad),
        f"workload {workload}: the load's answers' text does not spell their ids: request {a.request}: {found} of "
        f"{n} of its tokens' texts (as the server's tokenizer spells them) appear in the "
        f"{len(a.text or '')} characters it streamed, and so for all {len(judged)} answers whose text could be "
        "checked: the text was rewritten on the way, or does not come from the tokens the server counted",
    )


async def score_answers(
    client: ProbeClient,
    workload: str,
    answers: Sequence[LoadAnswer],
    *,
    near_tie_nats: float,
    limits: Mapping[str, float],
    note: str = "",
) -> AnswerCheck:
    """Score ``answers`` (all at once) and judge them: the share of positions whose token is not
    the argmax is held to ``limits["correctness_argmax_mismatch"]`` (the probe's limit), non-finite
    logprobs to ``limits["correctness_nonfinite"]``. A server that cannot score them is a problem
    too: a check that could not decide must not pass."""
    prompts = [Prompt(a.request, tuple(a.prompt_ids), "") for a in answers]
    try:
        scored = await asyncio.gather(*(client.score(p, a.output_ids) for p, a in zip(prompts, answers, strict=True)))
    except CorrectnessError as e:
        return AnswerCheck(
            note=note,
            problem=f"workload {workload}: the load's answers could not be scored teacher-forced: {e}",
        )
    wrong = [w for a, s in zip(answers, scored, strict=True) if (w := _judge(a, s, near_tie_nats))]
    positions = sum(len(s) for s in scored)
    mismatches = sum(w.mismatches for w in wrong)
    nonfinite = sum(w.nonfinite for w in wrong)
    checked, unspelled, text_problem = _unspelled(workload, answers, scored)
    counts = (len(answers), positions, mismatches, nonfinite)
    ties = sum(_near_ties(s, near_tie_nats) for s in scored)
    share_limit = limits.get("correctness_argmax_mismatch", 0.0)
    if not wrong or (nonfinite <= limits.get("correctness_nonfinite", 0.0) and mismatches <= share_limit * positions):
        return AnswerCheck(*counts, text_problem, note, checked, unspelled, near_ties=ties)
    first = wrong[0]
    pos = first.sent
    if math.isfinite(pos.logprob) and all(math.isfinite(lp) for _, lp in pos.top):
        what = (
            f"it answered token {pos.token} (logprob {pos.logprob:.4f}), the server's most likely there is token "
            f"{pos.argmax} (logprob {pos.top[0][1]:.4f})"
        )
    else:
        what = f"the server scores its token {pos.token} with NaN or infinite logprobs"
    problem = (
        f"workload {workload}: the load's answers are not the model's greedy tokens: request {first.request}, "
        f"output position {first.position}: {what}; scored teacher-forced after the measured phase, of "
        f"{positions:,} positions in {len(answers)} answers {mismatches} are not the argmax (limit "
        f"{share_limit:.1%}: [correctness] limits.correctness_argmax_mismatch) and {nonfinite} are NaN or infinite: "
        "the answers were rewritten on the way, given without the model, or computed wrong in the load's batch"
    )
    problems = "; ".join(p for p in (problem, text_problem) if p)
    return AnswerCheck(*counts, problems, note, checked, unspelled, near_ties=ties)


def check_load_answers(
    base_url: str,
    workload: str,
    answers: Sequence[LoadAnswer],
    *,
    model: str,
    headers: Mapping[str, str] | None = None,
    near_tie_nats: float,
    limits: Mapping[str, float],
    note: str = "",
    timeout_s: float = 120.0,
) -> AnswerCheck:
    """:func:`score_answers` against SGLang's ``/generate`` at ``base_url`` (blocking)."""

    async def go() -> AnswerCheck:
        client = open_client("sglang", base_url, model=model, headers=headers, timeout_s=timeout_s)
        try:
            return await score_answers(client, workload, answers, near_tie_nats=near_tie_nats, limits=limits, note=note)
        finally:
            await client.aclose()

    start = time.monotonic()
    check = asyncio.run(go())
    return replace(check, duration_s=time.monotonic() - start)
