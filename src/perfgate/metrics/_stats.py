"""Summary statistics with numpy's default (linear) percentile definition, in pure Python."""

from __future__ import annotations

import math
from typing import Sequence


def percentile(sorted_values: Sequence[float], q_pct: float) -> float:
    """numpy.percentile(values, q_pct) with linear interpolation; ``sorted_values`` must be sorted."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = (n - 1) * q_pct / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def describe_ms(values_s: Sequence[float], prefix: str) -> dict[str, float]:
    """mean/median/std/p90/p95/p99 of seconds, reported in ms under bench_serving's key names."""
    v = sorted(x * 1000.0 for x in values_s)
    n = len(v)
    mean = sum(v) / n if n else math.nan
    # bench_serving uses numpy.std: the population standard deviation.
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / n) if n else math.nan
    return {
        f"mean_{prefix}_ms": mean,
        f"median_{prefix}_ms": percentile(v, 50),
        f"std_{prefix}_ms": std,
        f"p90_{prefix}_ms": percentile(v, 90),
        f"p95_{prefix}_ms": percentile(v, 95),
        f"p99_{prefix}_ms": percentile(v, 99),
    }
