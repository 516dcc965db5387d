"""Small-sample statistics for the gate, in pure Python.

The one-sided Mann-Whitney U test is computed exactly (every way of splitting the pooled
repeats into two groups is equally likely under "no change") for the repeat counts a serving
benchmark can afford, with ties given mid-ranks; larger samples use the normal approximation
with tie and continuity corrections.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import Sequence

# Above this many pooled repeats the exact distribution gets slow; the normal approximation is
# within ~0.01 of it there.
_EXACT_MAX_N = 30


def median(values: Sequence[float]) -> float:
    """The sample median (mean of the two middle values for an even count)."""
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def min_p_value(n_a: int, n_b: int) -> float:
    """The smallest one-sided p-value the exact test can reach with these sample sizes.

    When it is above alpha the test can never reject, whatever was measured: the gate then
    falls back to the tolerance alone (asv does the same check before testing).
    """
    if n_a < 1 or n_b < 1:
        return 1.0
    return 1.0 / math.comb(n_a + n_b, n_a)


def _doubled_midranks(pooled: Sequence[float]) -> list[int]:
    """Twice each value's mid-rank (1-based), so tied ranks stay integers."""
    order = sorted(range(len(pooled)), key=lambda i: pooled[i])
    ranks = [0] * len(pooled)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and pooled[order[j + 1]] == pooled[order[i]]:
            j += 1
        # Positions i..j (0-based) share ranks i+1..j+1; twice their mean is i+j+2.
        for k in range(i, j + 1):
            ranks[order[k]] = i + j + 2
        i = j + 1
    return ranks


@lru_cache(maxsize=4096)
def _rank_sum_counts(ranks: tuple[int, ...], size: int) -> tuple[tuple[int, int], ...]:
    """How many ``size``-subsets of ``ranks`` have each rank sum, as sorted (sum, count)."""
    # counts[k] maps a rank sum to the number of k-subsets of the ranks seen so far.
    counts: list[Counter[int]] = [Counter() for _ in range(size + 1)]
    counts[0][0] = 1
    for r in ranks:
        for k in range(size, 0, -1):
            for s, c in counts[k - 1].items():
                counts[k][s + r] += c
    return tuple(sorted(counts[size].items()))


def mann_whitney_less(a: Sequence[float], b: Sequence[float]) -> float:
    """One-sided Mann-Whitney U p-value for "values in ``a`` tend to be smaller than in ``b``".

    Exact (with ties) when the pooled count is at most 30, normal approximation above.
    Returns 1.0 when either sample is empty.
    """
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        return 1.0
    pooled = [float(x) for x in a] + [float(x) for x in b]
    ranks = _doubled_midranks(pooled)
    observed = sum(ranks[:m])
    if m + n <= _EXACT_MAX_N:
        table = _rank_sum_counts(tuple(sorted(ranks)), m)
        at_most = sum(c for s, c in table if s <= observed)
        return at_most / math.comb(m + n, m)
    return _normal_less(ranks, m, n, observed)


def _normal_less(ranks: Sequence[int], m: int, n: int, observed: int) -> float:
    big_n = m + n
    # Work in ordinary ranks: halve the doubled sums.
    rank_sum = observed / 2
    mean = m * (big_n + 1) / 2
    tie_term = sum(t**3 - t for t in Counter(ranks).values())
    var = m * n / 12 * ((big_n + 1) - tie_term / (big_n * (big_n - 1)))
    if var <= 0:
        return 1.0
    z = (rank_sum - mean + 0.5) / math.sqrt(var)
    return min(1.0, 0.5 * math.erfc(-z / math.sqrt(2)))
