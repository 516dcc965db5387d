"""Descriptive statistics, the one home every stage imports them from (pure Python).

It sits beside ``errors.py``, outside the stages, because load/, metrics/, telemetry/, verdict/
and report/ all need the same definitions and metrics imports load (a home in one stage would
make another import sideways or upward). Percentiles are numpy's default (linear) definition,
as ``sglang.bench_serving`` computes them. The Mann-Whitney test is the verdict's own
(``verdict/_mannwhitney.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt


def percentile(sorted_values: Sequence[float] | npt.NDArray[np.float64], q_pct: float) -> float:
    """numpy.percentile(values, q_pct) with linear interpolation; ``sorted_values`` must be sorted.

    Clamped to the two order statistics it interpolates between, so float rounding can never put
    a percentile outside [min, max] or out of order. NaN for no values.
    """
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = (n - 1) * q_pct / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    a, b = float(sorted_values[lo]), float(sorted_values[hi])
    return min(max(a + (b - a) * (pos - lo), a), b)


def median(values: Sequence[float]) -> float:
    """The sample median (mean of the two middle values for an even count); ValueError for none."""
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean; ValueError for no values."""
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def describe_ms(values_s: Sequence[float] | npt.NDArray[np.float64], prefix: str) -> dict[str, float]:
    """mean/median/std/p90/p95/p99 of seconds, reported in ms under bench_serving's key names.

    Computed with numpy as bench_serving computes them (std is numpy's population standard
    deviation). NaN for each when there are no values.
    """
    # Imported here: the load client's processes import this module for their self-check and
    # never describe a run; numpy would cost each of them ~16 MB and 0.1 s.
    import numpy as np

    # One copy, scaled and sorted in place, and the deviations a slice at a time: a run's ITLs
    # are ~15 M values.
    v = np.array(values_s, dtype=np.float64)
    v *= 1000.0
    v.sort()
    n = len(v)
    if not n:
        return dict.fromkeys((f"{stat}_{prefix}_ms" for stat in _DESCRIBE_STATS), math.nan)
    avg = float(v.mean())
    squares = sum(float(np.dot(d, d)) for d in (v[k : k + _SLICE] - avg for k in range(0, n, _SLICE)))
    return {
        f"mean_{prefix}_ms": avg,
        f"median_{prefix}_ms": percentile(v, 50),
        # bench_serving uses numpy.std: the population standard deviation.
        f"std_{prefix}_ms": math.sqrt(squares / n),
        f"p90_{prefix}_ms": percentile(v, 90),
        f"p95_{prefix}_ms": percentile(v, 95),
        f"p99_{prefix}_ms": percentile(v, 99),
    }


_SLICE = 1 << 20
_DESCRIBE_STATS = ("mean", "median", "std", "p90", "p95", "p99")
