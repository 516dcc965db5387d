"""The order of an A/B's runs: ABBA, so that a trend of the host cancels."""

from __future__ import annotations

from perfgate.ab._candidate import Label


def abba_order(first_round: int, rounds: int) -> list[tuple[int, Label]]:
    """(round, variant) of every run of rounds ``first_round`` .. ``first_round + rounds - 1``.

    Odd rounds run A then B, even rounds B then A (AB BA AB BA ...): over each pair of rounds B
    is once the later run and once the earlier, so a host that drifts linearly moves the two
    ratios B/A by the same amount in opposite directions. Numbering is global, so rounds added
    later continue the pattern.
    """
    order: list[tuple[int, Label]] = []
    for r in range(first_round, first_round + rounds):
        order += [(r, "A"), (r, "B")] if r % 2 else [(r, "B"), (r, "A")]
    return order
