"""The one-sided Mann-Whitney U test the gate's noise check uses, in pure Python.

The one-sided Mann-Whitney U test is computed exactly for the repeat counts a serving
benchmark can afford (every way of ranking the pooled repeats is equally likely under "no
change"), and with the normal approximation (continuity-corrected) for large samples.

Ties between the two samples are broken against the alternative, as asv does: a tie counts
as "not smaller". That p-value is never below the one of any tie-breaking, so it stays a valid
test, and it is monotone: making a value of the first sample smaller never raises it. (The
textbook mid-rank permutation test is not monotone: moving a value into a tie changes the
null distribution, and a worse measurement could turn a fail into a pass.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

# Pooled repeat counts up to this use the exact distribution (a few ms to build, then cached).
_EXACT_MAX_N = 40


def min_p_value(n_a: int, n_b: int) -> float:
    """The smallest one-sided p-value the exact test can reach with these sample sizes.

    When it is above alpha the test can never reject, whatever was measured: the gate then
    falls back to the tolerance alone (asv makes the same check before testing).
    """
    if n_a < 1 or n_b < 1:
        return 1.0
    return 1.0 / math.comb(n_a + n_b, n_a)


@cache
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """counts[u] = number of orderings of m + n distinct values in which exactly u of the
    m * n cross pairs have the first sample's value above the second's."""
    if m == 0 or n == 0:
        return (1,)
    # The largest value is either from the first sample (above all n of the second) or not.
    with_a_top = _u_counts(m - 1, n)
    with_b_top = _u_counts(m, n - 1)
    counts = [0] * (m * n + 1)
    for u, c in enumerate(with_a_top):
        counts[u + n] += c
    for u, c in enumerate(with_b_top):
        counts[u] += c
    return tuple(counts)


def mann_whitney_less(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided Mann-Whitney U p-value for "values in ``a`` tend to be smaller than in ``b``".

    U counts the pairs (x in a, y in b) with x >= y (ties against the alternative); the
    p-value is P(U <= observed) under "same distribution". Exact when len(a) + len(b) <= 40,
    normal approximation above. Returns 1.0 when either sample is empty.
    """
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        return 1.0
    u = sum(1 for x in a for y in b if x >= y)
    if m + n <= _EXACT_MAX_N:
        counts = _u_counts(min(m, n), max(m, n))
        return sum(counts[: u + 1]) / math.comb(m + n, m)
    mean = m * n / 2
    sd = math.sqrt(m * n * (m + n + 1) / 12)
    return min(1.0, 0.5 * math.erfc(-(u + 0.5 - mean) / sd / math.sqrt(2)))
