"""Workload keys whose value is a small table of its own: a latency SLO and a length distribution.

Each is a frozen dataclass plus the :class:`~perfgate.profile._keys.Check` that builds it from
TOML, so the loader and the generated reference treat them like any other key.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

from perfgate._limits import COUNT_MAX, LENGTH_MAX, SECONDS_MAX, VALUE_MAX
from perfgate.profile._keys import Bad, Check, _finite_float, _is_int, shown

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


@dataclass(frozen=True)
class Slo:
    """Per-request latency targets in milliseconds; None where the SLO says nothing.

    A request meets the SLO when it succeeded and every set target holds: TTFT, TPOT
    ((latency - TTFT) / (output tokens - 1), 0 for a one-token answer, as bench_serving
    counts it) and end-to-end latency at or below its target.
    """

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def targets(self) -> dict[str, float]:
        """The set targets by key (``ttft_ms`` ...), in a fixed order."""
        return {k: v for k in SLO_KEYS if (v := getattr(self, k)) is not None}


# An SLO target past a day is none.
_SLO_MS_MAX = SECONDS_MAX * 1e3


def _slo(v: Any) -> Slo:
    expected = (
        f"a table of ttft_ms, tpot_ms and/or e2e_ms in milliseconds (> 0), at most {shown(_SLO_MS_MAX)} (a day), "
        "e.g. { ttft_ms = 2000, tpot_ms = 100 }"
    )
    if not isinstance(v, dict) or not v or not set(v) <= set(SLO_KEYS):
        raise Bad(expected)
    out = {}
    for k, x in v.items():
        f = _finite_float(x)
        if f is None or not 0 < f <= _SLO_MS_MAX:
            raise Bad(expected)
        out[k] = f
    return Slo(**out)


slo_table = Check("table", "`ttft_ms`, `tpot_ms`, `e2e_ms` (ms, > 0); at least one", _slo)

LengthKind = Literal["uniform", "normal", "lognormal", "histogram"]


@dataclass(frozen=True)
class LengthDist:
    """How lengths are drawn.

    ``normal`` and ``lognormal``: mean = the workload's length key, ``stddev`` in tokens (for
    ``lognormal`` the mean and stddev of the lengths themselves, not of their logarithm),
    rounded and clamped to [``min``, ``max``] (``max`` None: no upper bound). ``histogram``:
    ``bins`` of (lo, hi, weight); a bin is picked with probability weight / total, then a length
    uniformly in [lo, hi].
    """

    kind: LengthKind
    stddev: float = 0.0
    min: int = 1
    max: int | None = None
    bins: tuple[tuple[int, int, float], ...] = ()

    def mean(self) -> float:
        """The histogram's expected length (the other kinds take theirs from the length key)."""
        total = sum(w for _, _, w in self.bins)
        return sum((lo + hi) / 2 * w for lo, hi, w in self.bins) / total

    def spec(self) -> dict[str, object]:
        """As stored in a fingerprint."""
        if self.kind == "histogram":
            return {"kind": self.kind, "bins": [list(b) for b in self.bins]}
        return {"kind": self.kind, "stddev": self.stddev, "min": self.min, "max": self.max}


_DIST_EXPECTED = (
    '{ kind = "normal" or "lognormal", stddev = N (> 0), min = N, max = N } or '
    '{ kind = "histogram", bins = [[lo, hi, weight], ...] }'
)


def _bins(v: Any) -> tuple[tuple[int, int, float], ...]:
    expected = f"bins = [[lo, hi, weight], ...] with 1 <= lo <= hi and weights from 0 to {shown(VALUE_MAX)}, not all 0"
    if not isinstance(v, list) or not v:
        raise Bad(expected)
    out = []
    for b in v:
        if not (
            isinstance(b, list) and len(b) == 3 and _is_int(b[0]) and _is_int(b[1]) and 1 <= b[0] <= b[1] <= LENGTH_MAX
        ):
            raise Bad(expected)
        w = _finite_float(b[2])
        # Weights are summed: 1e308s would sum to infinity and every probability to NaN.
        if w is None or not 0 <= w <= VALUE_MAX:
            raise Bad(expected)
        out.append((b[0], b[1], w))
    if not any(w > 0 for _, _, w in out):
        raise Bad(expected)
    return tuple(out)


def _length_dist(v: Any) -> LengthDist:
    if not isinstance(v, dict) or v.get("kind") not in ("normal", "lognormal", "histogram"):
        raise Bad(_DIST_EXPECTED)
    kind = v["kind"]
    if kind == "histogram":
        if set(v) != {"kind", "bins"}:
            raise Bad('{ kind = "histogram", bins = [[lo, hi, weight], ...] } and nothing else')
        return LengthDist(kind, bins=_bins(v["bins"]))
    if not set(v) <= {"kind", "stddev", "min", "max"} or "stddev" not in v:
        raise Bad(f'{{ kind = "{kind}", stddev = N (> 0), min = N, max = N }} (min and max optional)')
    stddev = _finite_float(v["stddev"])
    if stddev is None or not 0 < stddev <= LENGTH_MAX:
        raise Bad(f"{kind} with stddev > 0 and <= {LENGTH_MAX:,} tokens")
    lo, hi = v.get("min", 1), v.get("max")
    if (
        not _is_int(lo)
        or not 1 <= lo <= LENGTH_MAX
        or (hi is not None and (not _is_int(hi) or not lo <= hi <= LENGTH_MAX))
    ):
        raise Bad(f"{kind} with integer bounds 1 <= min <= max <= {LENGTH_MAX:,}")
    return LengthDist(kind, stddev=stddev, min=lo, max=hi)


length_dist = Check(
    "table", '`kind` = `"normal"`, `"lognormal"` (`stddev`, `min`, `max`) or `"histogram"` (`bins`)', _length_dist
)


def _int_or_list(v: Any) -> int | tuple[int, ...]:
    expected = "an integer >= 1, or a list of them in increasing order (a capacity sweep)"
    values = v if isinstance(v, list) else [v]
    if any(_is_int(x) and x > COUNT_MAX for x in values):
        raise Bad(f"an integer from 1 to {COUNT_MAX:,}, or a list of them in increasing order (a capacity sweep)")
    if _is_int(v) and v >= 1:
        return int(v)
    if isinstance(v, list) and len(v) >= 2 and all(_is_int(x) and x >= 1 for x in v) and _increasing(v):
        return tuple(v)
    raise Bad(expected)


def _increasing(v: list[Any]) -> bool:
    return all(a < b for a, b in itertools.pairwise(v))


concurrency_or_sweep = Check(
    "integer or list of integers", f"1 - {COUNT_MAX:,}; a list (increasing) runs a capacity sweep", _int_or_list
)


def rate_or_sweep(single: Check) -> Check:
    """``single`` (the request rate's own check), or a list of finite rates: a capacity sweep."""

    def convert(v: Any) -> float | tuple[float, ...]:
        if not isinstance(v, list):
            rate: float = single.convert(v)
            return rate
        expected = (
            f'a number {single.allowed} or "inf", or a list of finite rates {single.allowed} in increasing order '
            "(a capacity sweep)"
        )
        try:
            rates = [single.convert(x) for x in v]
        except Bad:
            raise Bad(expected) from None
        if len(v) < 2 or any(math.isinf(r) for r in rates) or not _increasing(rates):
            raise Bad(expected)
        return tuple(rates)

    return Check(
        'number or "inf", or list of numbers',
        f"{single.allowed}; a list (increasing, finite) runs a capacity sweep",
        convert,
    )


def _concurrency_list(v: Any) -> tuple[int, ...]:
    expected = f"a list of integers from 1 to {COUNT_MAX:,} in increasing order"
    if not isinstance(v, list) or not v or not all(_is_int(x) and 1 <= x <= COUNT_MAX for x in v):
        raise Bad(expected)
    if not _increasing(v):
        raise Bad(expected)
    return tuple(int(x) for x in v)


concurrency_list = Check("list of integers", f"1 - {COUNT_MAX:,}, increasing", _concurrency_list)
