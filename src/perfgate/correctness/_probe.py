"""Run the probe: greedy answers and teacher-forced scores at each concurrency, against a reference.

At every concurrency of the spec (lowest first) the prompts are sent greedily, that many in
flight; the highest one also sends ``duplicates`` prompts a second time in the same batch. A pass
whose concurrency exceeds its requests is padded up to it, so the batch the load runs is the batch
the probe is answered in: the padding requests are more copies of the prompts, as long as theirs
and sent after them, so the batch stays at its peak for every step of the prompts' answers (padding
of 8 tokens left it there for 8 of 64 steps: a fault above 36 in a batch of 64 changed <1 % of the
argmax, under the 2 % limit), and each padding answer must agree with its prompt's, as the
duplicates do. Then
the reference's outputs are scored teacher-forced at the same concurrency (where the API can
score and the profile does not say ``score = false``). The reference is the stored record (a gate
run), stack A's record (``perfgate ab``), or, with neither, this run's own lowest-concurrency
pass: so even a first run catches a server whose answers change with the batch.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from perfgate.catalogue import METRICS
from perfgate.correctness._adapters import NonFiniteAnswer, Position, ProbeClient
from perfgate.correctness._compare import (
    Finding,
    PassResult,
    PromptAgreement,
    agreement,
    degenerate,
    duplicates_disagree,
    pass_metrics,
)
from perfgate.correctness._record import ProbeRecord, PromptRecord
from perfgate.correctness._spec import ProbeSpec, Prompt
from perfgate.errors import CorrectnessError

T = TypeVar("T")
J = TypeVar("J")


@dataclass(frozen=True)
class ProbeOutcome:
    """One probe of one server.

    ``record``: this server's answers at the lowest concurrency (what a recording stores, and stack
    A's reference for B); ``reference``: what the passes were held to, in words; ``metrics``: the
    worst value of each metric over the passes.
    """

    spec: ProbeSpec
    record: ProbeRecord
    reference: str
    passes: tuple[PassResult, ...]
    duration_s: float

    @property
    def metrics(self) -> dict[str, float]:
        return {name: _worst(name, [p.metrics[name] for p in self.passes]) for name in self.passes[0].metrics}

    def findings(self) -> list[Finding]:
        return [f for p in self.passes for f in p.findings()]

    def in_flight(self) -> str:
        """The batch each pass reached, in words (for the summary and failure messages)."""
        return "requests in flight: " + ", ".join(f"{p.in_flight} at concurrency {p.concurrency}" for p in self.passes)


def _worst(name: str, values: list[float]) -> float:
    # NaN (not measured) wins: a pass that measured nothing must not hide behind another.
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values) if METRICS[name].direction == "lower" else min(values)


async def _bounded(limit: int, items: Sequence[J], job: Callable[[J], Awaitable[T]]) -> list[T]:
    """``job`` of every item, at most ``limit`` in flight, in the items' order."""
    gate = asyncio.Semaphore(limit)

    async def one(item: J) -> T:
        async with gate:
            return await job(item)

    tasks = [asyncio.ensure_future(one(p)) for p in items]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        # When one request fails, the others are cancelled and awaited while the client is still
        # open, so each closes its connection. Left running past the client's close, their sockets
        # were found by the garbage collector in a later test (seen on the H200: pytest raised the
        # ResourceWarnings as an error in the workload's first test).
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _generate(client: ProbeClient, prompt: Prompt, n: int) -> list[Position]:
    try:
        return await client.generate(prompt, n)
    except NonFiniteAnswer:
        # Refused for its NaN logprobs: an answer whose every logprob is NaN, of no known token.
        return [Position(-1, math.nan)] * n


async def _score(client: ProbeClient, c: int, prompts: Sequence[Prompt], ref: ProbeRecord) -> list[list[Position]]:
    async def one(p: Prompt) -> list[Position]:
        tokens = ref.prompts[p.index].tokens
        try:
            return await client.score(p, tokens)
        except NonFiniteAnswer:
            return [Position(t, math.nan) for t in tokens]

    return await _bounded(c, prompts, one)


def _check_reference(reference: ProbeRecord, spec: ProbeSpec, label: str) -> None:
    if len(reference.prompts) != spec.prompts or any(len(p.tokens) != spec.output_len for p in reference.prompts):
        raise CorrectnessError(
            f"correctness probe: the reference ({label}) holds {len(reference.prompts)} prompts, not the "
            f"{spec.prompts} x {spec.output_len} tokens this probe sends; re-record it with --perf-update-baselines"
        )


async def probe(
    client: ProbeClient, spec: ProbeSpec, reference: ProbeRecord | None = None, reference_label: str = ""
) -> ProbeOutcome:
    """Probe the server behind ``client``; ``reference`` (``reference_label`` says what it is) or,
    when None, this run's own lowest-concurrency pass is what every pass is held to."""
    if reference is not None:
        _check_reference(reference, spec, reference_label)
    start = time.monotonic()
    prompts = spec.prompt_set()
    record: ProbeRecord | None = None
    passes = []
    delta_limit = spec.limits.get("correctness_logprob_delta_max", float("inf"))
    scoring = client.can_score and not spec.no_score_reason
    for c in spec.concurrencies:
        dups = spec.duplicates if c == spec.concurrencies[-1] and c > 1 else 0
        padding = [prompts[k % len(prompts)] for k in range(max(0, c - len(prompts) - dups))]
        client.peak_in_flight()
        # Every request asks for the same length: the padding keeps the batch for the whole answer.
        sent = await _bounded(c, [*prompts, *prompts[:dups], *padding], lambda p: _generate(client, p, spec.output_len))
        in_flight = client.peak_in_flight()
        answers, pads = sent[: len(sent) - len(padding)], sent[len(sent) - len(padding) :]
        greedy = answers[: len(prompts)]
        if record is None:
            record = ProbeRecord(client.api, c, tuple(PromptRecord.of(i, a) for i, a in enumerate(greedy)))
        ref = reference if reference is not None else record
        scores: list[list[Position] | None]
        if scoring:
            scores = list(await _score(client, c, prompts, ref))
        else:
            scores = [None] * len(prompts)
        agreements: list[PromptAgreement] = []
        bad: list[Finding] = []
        for i, (answer, score) in enumerate(zip(greedy, scores, strict=True)):
            agreements.append(
                agreement(ref.prompts[i], answer, score, c, delta_limit=delta_limit, near_tie_nats=spec.near_tie_nats)
            )
            bad += degenerate(i, answer, ref.prompts[i] if reference is not None else None, c)
        # Each second copy of a prompt in the batch (duplicate or padding) against its first answer.
        copies = [
            *((k, answers[len(prompts) + k]) for k in range(dups)),
            *((p.index, a) for p, a in zip(padding, pads, strict=True)),
        ]
        for i, copy in copies:
            found = duplicates_disagree(i, answers[i], copy, c, spec.near_tie_nats)
            if found is not None:
                bad.append(found)
        all_findings = [f for a in agreements for f in a.findings] + bad
        metrics = pass_metrics(agreements, all_findings)
        passes.append(PassResult(c, tuple(agreements), tuple(bad), dups, metrics, len(padding), in_flight))
    assert record is not None  # a spec has at least one concurrency
    label = reference_label if reference is not None else f"this run's own answers at concurrency {record.concurrency}"
    if client.can_score and not scoring:
        label += f", greedy view only (score = false: {spec.no_score_reason})"
    return ProbeOutcome(spec, record, label, tuple(passes), time.monotonic() - start)
