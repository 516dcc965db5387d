"""Statistics shared by more than one stage (kept outside them: metrics imports load)."""

from __future__ import annotations

import math
from typing import Sequence


def percentile(sorted_values: Sequence[float], q_pct: float) -> float:
    """numpy.percentile(values, q_pct) with linear interpolation; ``sorted_values`` must be sorted.

    NaN for no values.
    """
    n = len(sorted_values)
    if n == 0:
        return math.nan
    pos = (n - 1) * q_pct / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
