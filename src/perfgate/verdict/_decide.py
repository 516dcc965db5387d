"""The one decision on a gated metric, and its message, for the gate and for A/B.

The gate holds a workload's median to its baseline's (repeats, Mann-Whitney); A/B holds the
median ratio B/A to 1 (paired rounds, the sign test). Both decide alike: a floor or ceiling
broken, or the tolerance limit passed with evidence that the change is real, FAILS; the limit
passed without that evidence is INCONCLUSIVE (never a pass; a warning only under
``[gate] inconclusive = "warn"``); too few samples for any noise test leave the tolerance alone
to decide, so passing the limit fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from perfgate.profile import InconclusivePolicy
from perfgate.verdict._rules import MetricRule

Decided = Literal["pass", "fail", "inconclusive"]

# p-values and alpha are compared with a hair of slack: 1/20 computed as a ratio of integers
# must count as <= alpha = 0.05 (3 vs 3 repeats), and 1/32 as <= alpha = 1/32 (5 rounds).
_P_SLACK = 1e-9


def reaches(p_value: float, alpha: float) -> bool:
    """Whether ``p_value`` is at most ``alpha`` (with the slack above)."""
    return p_value <= alpha * (1 + _P_SLACK)


def check_policy(alpha: float, inconclusive: InconclusivePolicy) -> None:
    """Refuse an ``alpha`` outside (0, 1) or an unknown inconclusive policy (ValueError)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1 (exclusive), got {alpha!r}")
    if inconclusive not in ("fail", "warn"):
        raise ValueError(f'inconclusive must be "fail" or "warn", got {inconclusive!r}')


@dataclass(frozen=True)
class Bound:
    """One bound a metric is held to: the tolerance ``limit``, an absolute ``floor`` or ``ceiling``."""

    kind: Literal["limit", "floor", "ceiling"]
    value: float
    is_lower: bool
    violated: bool

    @property
    def sign(self) -> str:
        """How a value that breaks this bound compares to it."""
        return "<" if self.is_lower else ">"


@dataclass(frozen=True)
class Decision:
    """The status of one metric, the bounds it was held to (the tolerance limit first) and the
    one its message names (``shown``: the first one broken, else the one that applies)."""

    status: Decided
    ok: bool
    bounds: tuple[Bound, ...]
    shown: Bound | None

    @property
    def violated(self) -> tuple[Bound, ...]:
        return tuple(b for b in self.bounds if b.violated)

    @property
    def limit(self) -> Bound | None:
        """The tolerance limit, when there is a tolerance and something to hold it against."""
        return next((b for b in self.bounds if b.kind == "limit"), None)


def decide(
    rule: MetricRule,
    *,
    centre: float,
    reference: float | None,
    absolute: float,
    p_value: float | None,
    alpha: float,
    inconclusive: InconclusivePolicy,
) -> Decision:
    """Decide one metric.

    ``centre`` is what the tolerance holds (the median, or the median ratio B/A), relative to
    ``reference`` (the baseline's median, or 1.0; None: nothing to hold it against, so no
    limit); ``absolute`` is what floors and ceilings hold (the median, or B's median);
    ``p_value`` is the noise test's p that the change is real, None when the samples are too
    few for the test to reach ``alpha`` (the tolerance alone decides).
    """
    higher = rule.direction == "higher"
    bounds: list[Bound] = []
    past = False
    if rule.tolerance is not None and reference is not None:
        allowed = abs(reference) * rule.tolerance
        limit = reference - allowed if higher else reference + allowed
        past = centre < limit if higher else centre > limit
        significant = p_value is None or reaches(p_value, alpha)
        bounds.append(Bound("limit", limit, higher, past and significant))
    if rule.floor is not None:
        bounds.append(Bound("floor", rule.floor, True, absolute < rule.floor))
    if rule.ceiling is not None:
        bounds.append(Bound("ceiling", rule.ceiling, False, absolute > rule.ceiling))
    status: Decided
    if any(b.violated for b in bounds):
        status, ok = "fail", False
    elif past:
        status, ok = "inconclusive", inconclusive == "warn"
    else:
        status, ok = "pass", True
    violated = [b for b in bounds if b.violated]
    # Unbroken: the relative limit (listed first), else the absolute bound on the side that matters.
    shown = violated[0] if violated else next((b for b in bounds if b.is_lower == higher), None)
    return Decision(status=status, ok=ok, bounds=tuple(bounds), shown=shown or (bounds[0] if bounds else None))


def decision_message(
    decision: Decision,
    head: str,
    detail: str,
    *,
    value_text: Callable[[Bound], str],
    subject: Callable[[Bound], str],
    samples: str,
    advice: str,
    alpha: float,
) -> str:
    """The message of a decided metric.

    ``head`` names the workload, metric and measurement; ``detail`` is the parenthesised
    evidence; ``value_text(bound)`` writes a bound's value, ``subject(bound)`` what is held to it
    when that is not the head's number ("B's median 95.0 W "); ``samples`` says what could not
    tell a change from noise ("3 vs 3 repeats"); ``advice`` how to decide it instead.
    """

    def broken(b: Bound) -> str:
        return f"{subject(b)}{b.sign} {b.kind} {value_text(b)}"

    if decision.status == "fail":
        return f"{head} {'; '.join(broken(b) for b in decision.violated)}{detail}"
    if decision.status == "inconclusive" and decision.limit is not None:
        consequence = (
            'a warning only ([gate] inconclusive = "warn")'
            if decision.ok
            else f'failing: {advice}, or set [gate] inconclusive = "warn"'
        )
        return (
            f"{head} {broken(decision.limit)}{detail}: INCONCLUSIVE, the {samples} cannot tell the change from "
            f"noise (p > alpha {alpha:g}); {consequence}"
        )
    shown = decision.shown
    if shown is not None:
        return f"{head} within {shown.kind} {value_text(shown)}{detail}"
    return f"{head}{detail}"
