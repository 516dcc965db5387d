"""Summary statistics with numpy's default (linear) percentile definition, in pure Python."""

from __future__ import annotations

import math
from typing import Sequence

from perfgate._stats import percentile


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
