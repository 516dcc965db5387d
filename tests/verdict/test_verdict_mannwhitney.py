from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.verdict import mann_whitney_less, min_p_value
from perfgate.verdict._mannwhitney import _u_counts


def brute_force_less(a: list[int], b: list[int]) -> Fraction:
    """Reference: count pairs with ties against the alternative, then enumerate every way
    the m + n (distinct) ranks can be split between the samples."""
    m, n = len(a), len(b)
    observed = sum(1 for x in a for y in b if x >= y)
    splits = list(itertools.combinations(range(m + n), m))
    hits = sum(
        1 for ranks in splits if sum(1 for r in ranks for s in range(m + n) if s not in ranks and r > s) <= observed
    )
    return Fraction(hits, len(splits))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # Complete separation: the one split of 20 with the lowest rank sum.
        ([1, 2, 3], [4, 5, 6], Fraction(1, 20)),
        # Ranks {1,2,4}: only {1,2,3} and {1,2,4} have a rank sum <= 7.
        ([1, 2, 4], [3, 5, 6], Fraction(2, 20)),
        # Ties count against "smaller": U = #(x >= y) = 1 + 1 + 2 = 4; for 3 vs 3 the 20
        # orderings have U = 0..9 with counts 1,1,2,3,3,3,3,2,1,1, so P(U <= 4) = 10/20.
        ([1, 1, 2], [1, 2, 3], Fraction(10, 20)),
        # Everything tied: every split has the same rank sum.
        ([5, 5, 5], [5, 5, 5], Fraction(1)),
        ([1], [5], Fraction(1, 2)),
        ([5], [1], Fraction(1)),
        ([4, 5, 6], [1, 2, 3], Fraction(1)),
    ],
)
def test_hand_computed_p_values(a: list[int], b: list[int], expected: Fraction) -> None:
    assert mann_whitney_less(a, b) == pytest.approx(float(expected), abs=1e-15)


def test_empty_sample_is_never_significant() -> None:
    assert mann_whitney_less([], [1.0, 2.0]) == 1.0
    assert mann_whitney_less([1.0], []) == 1.0


small_samples = st.lists(st.integers(0, 6), min_size=1, max_size=5)


@given(small_samples, small_samples)
def test_matches_brute_force_enumeration(a: list[int], b: list[int]) -> None:
    assert mann_whitney_less(a, b) == pytest.approx(float(brute_force_less(a, b)), abs=1e-12)


@given(small_samples, small_samples)
def test_p_value_range_and_complement(a: list[int], b: list[int]) -> None:
    p, q = mann_whitney_less(a, b), mann_whitney_less(b, a)
    assert min_p_value(len(a), len(b)) - 1e-12 <= p <= 1.0
    # P(R <= r) + P(R >= r) = 1 + P(R = r).
    assert p + q >= 1.0 - 1e-12


@given(small_samples, small_samples, st.integers(-50, 50))
def test_rank_based_shift_invariance(a: list[int], b: list[int], shift: int) -> None:
    assert mann_whitney_less(a, b) == mann_whitney_less([x + shift for x in a], [x + shift for x in b])


@given(small_samples, small_samples, st.data())
def test_lowering_a_value_never_raises_p(a: list[int], b: list[int], data: st.DataObject) -> None:
    i = data.draw(st.integers(0, len(a) - 1))
    lowered = list(a)
    lowered[i] -= data.draw(st.integers(1, 5))
    assert mann_whitney_less(lowered, b) <= mann_whitney_less(a, b) + 1e-12


@given(st.integers(1, 6), st.integers(1, 6))
def test_complete_separation_reaches_min_p(m: int, n: int) -> None:
    assert mann_whitney_less(list(range(m)), list(range(100, 100 + n))) == pytest.approx(min_p_value(m, n))
    assert min_p_value(m, n) == pytest.approx(1 / math.comb(m + n, m))


def test_u_distribution_3_by_3() -> None:
    assert _u_counts(3, 3) == (1, 1, 2, 3, 3, 3, 3, 2, 1, 1)
    assert sum(_u_counts(4, 7)) == math.comb(11, 4)


def test_normal_approximation_close_to_exact_above_the_exact_limit() -> None:
    rng = random.Random(7)
    for shift in (0.0, 0.3, 0.8):
        a = [rng.gauss(0, 1) - shift for _ in range(25)]
        b = [rng.gauss(0, 1) for _ in range(25)]
        u = sum(1 for x in a for y in b if x >= y)
        exact = sum(_u_counts(25, 25)[: u + 1]) / math.comb(50, 25)
        assert mann_whitney_less(a, b) == pytest.approx(exact, abs=0.005)
