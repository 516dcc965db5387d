"""The statistics of one probe pass against a reference, and the degenerate-answer checks.

Teacher-forced agreement (the gate's main evidence): at every position of every prompt, the
logprob this server gives the reference's token (given the reference's tokens before it) against
the logprob the reference recorded, and whether that token is still this server's most likely
one. It does not depend on where two greedy decodes part after a near-tie, which kernel changes
legitimately cause. Greedy agreement (exact match, first divergence) is reported beside it.

Degenerate answers fail on their own, reference or not: a NaN or infinite logprob, an output that
is one token repeated throughout (unless the reference's is too: then that is the model), every
logprob exactly 0 (a server that ignores the model), and two identical requests of one batch that
part other than at a near-tie.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from perfgate.correctness._adapters import Position
from perfgate.correctness._record import PromptRecord

# An output this long that is one token throughout is not a model's answer.
MIN_REPEAT_LEN = 4


@dataclass(frozen=True)
class Finding:
    """One position (or prompt) that counts against a metric, with what was expected and what came."""

    metric: str
    concurrency: int
    prompt: int
    position: int | None = None
    expected_token: int | None = None
    expected_logprob: float | None = None
    got_token: int | None = None
    got_logprob: float | None = None
    detail: str = ""
    count: int = 1
    """How many the metric counts for it (a prompt's NaN logprobs are one finding)."""

    def message(self) -> str:
        where = f"prompt {self.prompt}" + (f", position {self.position}" if self.position is not None else "")
        parts = [f"{self.metric} at concurrency {self.concurrency}, {where}"]
        if self.expected_token is not None:
            parts.append(f"expected token {self.expected_token} (logprob {_lp(self.expected_logprob)})")
        if self.got_token is not None or self.got_logprob is not None:
            got = f"token {self.got_token}" if self.got_token is not None else "the reference's token"
            parts.append(f"got {got} (logprob {_lp(self.got_logprob)})")
        text = ": ".join(parts[:1]) + (": " + ", ".join(parts[1:]) if len(parts) > 1 else "")
        return text + (f"; {self.detail}" if self.detail else "")


def _lp(value: float | None) -> str:
    return "?" if value is None else f"{value:.4f}"


View = Literal["teacher-forced", "greedy"]


@dataclass(frozen=True)
class ViewStats:
    """One view of a prompt's agreement: ``scored`` positions compared; ``argmax_known``: of them,
    where the server named its most likely token; ``deltas``/``delta_sum``/``delta_max``: how many
    finite |logprob differences|, their sum and max; ``mismatches``: positions whose reference
    token is no longer the most likely (near-ties aside); ``near_ties``: positions where another
    token is the most likely, but by less than ``near_tie_nats`` (not counted as mismatches)."""

    scored: int = 0
    argmax_known: int = 0
    deltas: int = 0
    delta_sum: float = 0.0
    delta_max: float = 0.0
    mismatches: int = 0
    near_ties: int = 0


@dataclass(frozen=True)
class PromptAgreement:
    """One prompt of one pass against the reference: each view's statistics, where this server's
    own greedy output first parts from the reference (None: identical), and the findings."""

    prompt: int
    views: Mapping[View, ViewStats]
    first_divergence: int | None
    findings: tuple[Finding, ...] = ()

    @property
    def greedy_match(self) -> bool:
        return self.first_divergence is None


def first_divergence(reference: Sequence[int], got: Sequence[int]) -> int | None:
    """The first position where two outputs differ (a shorter one differs where it ends)."""
    for i, (a, b) in enumerate(zip(reference, got, strict=False)):
        if a != b:
            return i
    return None if len(reference) == len(got) else min(len(reference), len(got))


def agreement(
    reference: PromptRecord,
    generated: Sequence[Position],
    scored: Sequence[Position] | None,
    concurrency: int,
    *,
    delta_limit: float,
    near_tie_nats: float,
) -> PromptAgreement:
    """One prompt's agreement with its reference, from two views of the reference's tokens.

    Teacher-forced (``scored``: the server's logprobs of the reference's tokens given the prompt,
    computed as a prefill; None where the API cannot score, chat) and greedy: up to the position
    where this server's own greedy output parts from the reference, its decode saw the same tokens,
    so its logprobs there score the reference's tokens as a decode (a decode-only bug shows here);
    where it parts, its choice is a mismatch. A mismatch where this server's choice leads the
    reference's token by less than ``near_tie_nats`` is a tie, not counted (a near-uniform model's
    ties flip with the last bits of any kernel).
    """
    diverge = first_divergence(reference.tokens, [p.token for p in generated])
    upto = len(reference.tokens) if diverge is None else min(diverge + 1, len(generated))
    views: list[tuple[View, Sequence[Position]]] = [
        ("greedy", [_as_reference(reference.tokens[i], generated[i]) for i in range(upto)])
    ]
    if scored is not None:
        views.insert(0, ("teacher-forced", scored))
    stats: dict[View, ViewStats] = {}
    worst: tuple[float, int, View] | None = None
    first_mismatch: tuple[int, View] | None = None
    bad: list[tuple[int, View]] = []
    for view, positions in views:
        deltas: list[float] = []
        known = mismatches = ties = 0
        for i, pos in enumerate(positions):
            expected = reference.logprobs[i]
            if not math.isfinite(pos.logprob):
                # The greedy answer's own are counted once, by degenerate().
                if view == "teacher-forced":
                    bad.append((i, view))
            else:
                d = abs(pos.logprob - expected)
                deltas.append(d)
                if worst is None or d > worst[0]:
                    worst = (d, i, view)
            if pos.argmax is not None:
                known += 1
                if pos.argmax != reference.tokens[i] and _lead(pos) >= near_tie_nats:
                    mismatches += 1
                    if first_mismatch is None:
                        first_mismatch = (i, view)
                elif pos.argmax != reference.tokens[i]:
                    ties += 1
        stats[view] = ViewStats(
            len(positions), known, len(deltas), math.fsum(deltas), max(deltas, default=0.0), mismatches, ties
        )
    total = sum(len(p) for _, p in views)
    findings = []

    def at(i: int, view: View) -> Position:
        return dict(views)[view][i]

    def against(metric: str, i: int, got: tuple[int | None, float | None], detail: str, count: int = 1) -> Finding:
        """A finding at position ``i`` of this prompt: the reference's token and logprob there, and ``got``."""
        return Finding(
            metric, concurrency, reference.index, i, reference.tokens[i], reference.logprobs[i], *got, detail, count
        )

    if bad:
        i, view = bad[0]
        findings.append(
            against(
                "correctness_nonfinite",
                i,
                (at(i, view).token, at(i, view).logprob),
                f"{len(bad)} of {total} {view} logprobs are NaN or infinite",
                len(bad),
            )
        )
    if worst is not None and worst[0] > delta_limit:
        d, i, view = worst
        pos = at(i, view)
        findings.append(
            against(
                "correctness_logprob_delta_max",
                i,
                _top(pos),
                f"{view}, the reference's token now has logprob {_lp(pos.logprob)}: |Δlogprob| {d:.4f} nats "
                f"(limit {delta_limit:g})",
            )
        )
    if first_mismatch is not None:
        i, view = first_mismatch
        pos = at(i, view)
        margin = reference.margins[i]
        findings.append(
            against(
                "correctness_argmax_mismatch",
                i,
                _top(pos),
                f"{view}, the reference's token is no longer the most likely (its logprob now "
                + (_lp(pos.logprob) if math.isfinite(pos.logprob) else "below the server's top tokens")
                + (f"; it led by {margin:.3f} nats in the reference" if margin is not None else "")
                + ")",
            )
        )
    return PromptAgreement(reference.index, stats, diverge, tuple(findings))


def _top(pos: Position) -> tuple[int | None, float | None]:
    """The server's most likely token at ``pos`` and its logprob (None, None when it named none)."""
    return pos.argmax, pos.top[0][1] if pos.top else None


def _lead(pos: Position) -> float:
    """How far this server's most likely token leads the reference's token ``pos`` scores: where
    the server did not give that token's logprob (not among its top ones), at least the lead over
    the last of them. A lead below the near-tie threshold is a tie at the serving dtype, not a flip."""
    top = pos.top[0][1]
    other = pos.logprob if math.isfinite(pos.logprob) else pos.top[-1][1]
    return top - other if math.isfinite(top - other) else math.inf


def _as_reference(token: int, pos: Position) -> Position:
    """The greedy position as a score of the reference's ``token``: its logprob when it is the
    token chosen or among the top ones, NaN (unknown) otherwise."""
    if pos.token == token:
        return pos
    logprob = next((lp for t, lp in pos.top if t == token), math.nan)
    return Position(token, logprob, pos.top or ((pos.token, pos.logprob),))


def degenerate(
    prompt: int, generated: Sequence[Position], reference: PromptRecord | None, concurrency: int
) -> list[Finding]:
    """What is wrong with one greedy answer on its own (``reference``: a repeated output the
    reference shows too is the model's, not a fault)."""
    out = []
    bad = next((i for i, p in enumerate(generated) if not math.isfinite(p.logprob)), None)
    if bad is not None:
        count = sum(1 for p in generated if not math.isfinite(p.logprob))
        out.append(
            Finding(
                "correctness_nonfinite",
                concurrency,
                prompt,
                bad,
                reference.tokens[bad] if reference and bad < len(reference.tokens) else None,
                reference.logprobs[bad] if reference and bad < len(reference.logprobs) else None,
                generated[bad].token,
                generated[bad].logprob,
                f"{count} of {len(generated)} greedy logprobs are NaN or infinite",
                count,
            )
        )
    tokens = [p.token for p in generated]
    # Token -1: the server refused to send the answer's numbers (NaN), it named no token.
    if len(tokens) >= MIN_REPEAT_LEN and len(set(tokens)) == 1 and tokens[0] >= 0:
        ref_repeats = reference is not None and len(set(reference.tokens)) == 1 and reference.tokens[0] == tokens[0]
        if not ref_repeats:
            out.append(
                Finding(
                    "correctness_repeated",
                    concurrency,
                    prompt,
                    0,
                    reference.tokens[0] if reference else None,
                    reference.logprobs[0] if reference else None,
                    tokens[0],
                    generated[0].logprob,
                    f"all {len(tokens)} output tokens are token {tokens[0]}",
                )
            )
    if generated and all(p.logprob == 0.0 for p in generated):
        out.append(
            Finding(
                "correctness_zero_logprobs",
                concurrency,
                prompt,
                detail=f"every one of the {len(generated)} output logprobs is exactly 0: the server ignores the model",
            )
        )
    return out


def duplicates_disagree(
    prompt: int, a: Sequence[Position], b: Sequence[Position], concurrency: int, near_tie_nats: float
) -> Finding | None:
    """Two answers to one request sent twice in one batch: a Finding when they part other than
    at a near-tie (both answers' top two within ``near_tie_nats`` there)."""
    at = first_divergence([p.token for p in a], [p.token for p in b])
    if at is None:
        return None
    if at < len(a) and at < len(b):
        margins = [m for m in (a[at].margin(), b[at].margin()) if m is not None]
        if margins and max(margins) < near_tie_nats:
            return None
    pa = a[at] if at < len(a) else None
    pb = b[at] if at < len(b) else None
    return Finding(
        "correctness_batch_disagreements",
        concurrency,
        prompt,
        at,
        pa.token if pa else None,
        pa.logprob if pa else None,
        pb.token if pb else None,
        pb.logprob if pb else None,
        "two identical requests in one batch answered differently (first answer expected, second got)",
    )


@dataclass(frozen=True)
class PassResult:
    """One concurrency's pass: per prompt agreement, the degenerate findings, and its metrics;
    ``padding_sent``: copies of the prompts that filled the batch up to the concurrency;
    ``in_flight``: the most of its requests sent and not yet answered at once (the batch reached)."""

    concurrency: int
    prompts: tuple[PromptAgreement, ...]
    degenerate: tuple[Finding, ...]
    duplicates_sent: int
    metrics: dict[str, float] = field(default_factory=dict)
    padding_sent: int = 0
    in_flight: int = 0

    def findings(self) -> list[Finding]:
        return [f for p in self.prompts for f in p.findings] + list(self.degenerate)


def pass_metrics(prompts: Sequence[PromptAgreement], findings: Sequence[Finding]) -> dict[str, float]:
    """The pass's metric values: each logprob statistic pooled over the positions of one view, and
    the worse of the two views (a decode-only bug shows in the greedy view alone); NaN where
    nothing could be measured (the verdict fails it as not measured)."""
    names = {view for p in prompts for view in p.views}
    mean: list[float] = []
    top: list[float] = []
    mismatch: list[float] = []
    for view in sorted(names):
        stats = [p.views[view] for p in prompts if view in p.views]
        deltas = sum(v.deltas for v in stats)
        known = sum(v.argmax_known for v in stats)
        if deltas:
            mean.append(math.fsum(v.delta_sum for v in stats) / deltas)
            top.append(max(v.delta_max for v in stats if v.deltas))
        if known:
            mismatch.append(sum(v.mismatches for v in stats) / known)
    count = dict.fromkeys(_COUNTED, 0.0)
    for f in findings:
        if f.metric in count:
            count[f.metric] += f.count
    return {
        "correctness_logprob_delta_mean": max(mean, default=math.nan),
        "correctness_logprob_delta_max": max(top, default=math.nan),
        "correctness_argmax_mismatch": max(mismatch, default=math.nan),
        "correctness_greedy_match": sum(p.greedy_match for p in prompts) / len(prompts) if prompts else math.nan,
        **count,
    }


_COUNTED = (
    "correctness_nonfinite",
    "correctness_repeated",
    "correctness_zero_logprobs",
    "correctness_batch_disagreements",
)
