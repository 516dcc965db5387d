"""The high pass puts the workload's concurrency in flight (issue #34: it never had more than its
prompts + duplicates, 36 by default, so a server wrong only in bigger batches passed a load of
1024). A fake client in the event loop counts what is in flight: every request of a pass has
started before any answers, so the batch each request sees is known exactly."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from perfgate.correctness import Position, ProbeSpec, Prompt, judge_probe, probe

SPEC = ProbeSpec(
    prompts=8,
    prompt_len=4,
    output_len=32,
    concurrencies=(8, 64),
    duplicates=2,
    seed=0,
    api="sglang",
    token_id_range=(4, 2048),
    near_tie_nats=0.05,
)


def _right(prompt: Prompt, i: int) -> int:
    return 100 + 10 * prompt.index + i


class _Batched:
    """A model whose greedy tokens are wrong in batches above ``wrong_above``; ``wrong_from``
    picks which requests of such a batch: those started after the first ``wrong_from``."""

    api = "sglang"
    can_score = True

    def __init__(self, wrong_above: int, wrong_from: int = 0) -> None:
        self.wrong_above, self.wrong_from = wrong_above, wrong_from
        self.in_flight = self.peak = 0
        self.asked: list[int] = []

    def peak_in_flight(self) -> int:
        self.peak, peak = self.in_flight, self.peak
        return peak

    async def generate(self, prompt: Prompt, n: int) -> list[Position]:
        self.in_flight += 1
        self.asked.append(n)
        started = len(self.asked)
        await asyncio.sleep(0)  # every request of the pass starts before any answers
        batch = self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0)
        self.in_flight -= 1
        wrong = batch > self.wrong_above and started > self.wrong_from
        out = []
        for i in range(n):
            right = _right(prompt, i)
            got = right + 1 if wrong and i % 4 == 1 else right
            out.append(Position(got, -0.1, ((got, -0.1), (right if got != right else right + 1, -3.0))))
        return out

    async def score(self, prompt: Prompt, tokens: Sequence[int]) -> list[Position]:
        out = []
        for i, t in enumerate(tokens):
            right = _right(prompt, i)
            out.append(Position(t, -0.1 if t == right else -3.0, ((right, -0.1), (right + 1, -3.0))))
        return out

    async def aclose(self) -> None:
        pass


def test_the_high_pass_is_padded_to_its_concurrency_for_the_whole_answer() -> None:
    client = _Batched(wrong_above=10_000)
    outcome = asyncio.run(probe(client, SPEC))
    low, high = outcome.passes
    assert (low.in_flight, low.padding_sent) == (8, 0)
    assert (high.in_flight, high.padding_sent, high.duplicates_sent) == (64, 54, 2)
    # The padding asks for as many tokens as the prompts: the batch holds for their whole answers.
    assert client.asked == [32] * (8 + 64)
    assert outcome.in_flight() == "requests in flight: 8 at concurrency 8, 64 at concurrency 64"
    assert judge_probe(outcome).passed


def test_a_fault_only_above_the_probes_own_requests_fails_at_the_workload_batch() -> None:
    # 8 prompts + 2 duplicates: 10 in flight without the padding, which is clean here.
    outcome = asyncio.run(probe(_Batched(wrong_above=36), SPEC))
    verdict = judge_probe(outcome)
    assert not verdict.passed
    assert {f.concurrency for f in outcome.findings()} == {64}
    assert any(f.metric == "correctness_argmax_mismatch" for f in outcome.findings())


def test_padding_answers_are_checked_against_their_prompts_answers() -> None:
    # Only the padding of the big batch is wrong (sent after the low pass's 8 and the high pass's
    # 8 prompts + 2 duplicates): the prompts' own answers are right.
    outcome = asyncio.run(probe(_Batched(wrong_above=36, wrong_from=8 + 10), SPEC))
    found = outcome.findings()
    assert found and {f.metric for f in found} == {"correctness_batch_disagreements"}
    assert outcome.passes[-1].metrics["correctness_batch_disagreements"] == 54
    assert not judge_probe(outcome).passed
