"""Stalls of the measured phase: stretches in which no stream received a token while requests were
in flight (a kernel compiled on first use, a CUDA graph captured late, a host-side pause).

The client sees every chunk's arrival, so a stall is read off the merged arrivals of all streams:
between two consecutive arrivals (the phase start counts as one), the part of the gap during
which at least one request had been sent and had not ended. A request ends at its last chunk or
when it failed; a failure inside a gap is not split out (the gap is then counted to the next token).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfgate.load import LoadRun


@dataclass(frozen=True)
class TokenGap:
    """No token arrived for ``length_s`` from ``start_s`` (seconds after the measured phase began)
    while ``in_flight`` requests were open."""

    start_s: float
    length_s: float
    in_flight: int

    def text(self) -> str:
        return (
            f"no token for {self.length_s:.2f} s from {self.start_s:.2f} s into the measured phase "
            f"({self.in_flight} request(s) in flight)"
        )


class _Arrivals:
    """The merged arrivals of a run and its requests' open intervals, sorted for counting."""

    def __init__(self, run: LoadRun) -> None:
        records = run.records
        self.t0 = run.start_s
        chunks = [
            r.start_s + np.asarray(r.chunk_offsets_s, dtype=np.float64) for r in records if len(r.chunk_offsets_s)
        ]
        self.arrivals = np.sort(np.concatenate([np.array([run.start_s]), *chunks]))
        self.starts = np.sort(np.array([r.start_s for r in records], dtype=np.float64))
        # A request that never ended (cancelled) is open until the phase's end.
        self.ends = np.sort(
            np.array(
                [r.start_s + (r.latency_s if r.latency_s is not None else run.duration_s) for r in records],
                dtype=np.float64,
            )
        )
        self.widths = np.diff(self.arrivals)

    def gap(self, k: int) -> TokenGap | None:
        """The stall inside the ``k``-th gap between arrivals, or None when nothing was in flight."""
        lo, hi = float(self.arrivals[k]), float(self.arrivals[k + 1])
        starts, ends = self.starts, self.ends
        # Open at lo: sent by then and not yet ended; else the stall starts with the first send in the gap.
        sent = int(np.searchsorted(starts, lo, side="right"))
        if sent - int(np.searchsorted(ends, lo, side="right")) > 0:
            begin = lo
        elif sent < len(starts) and starts[sent] < hi:
            begin = float(starts[sent])
        else:
            return None
        in_flight = int(np.searchsorted(starts, hi, side="left")) - int(np.searchsorted(ends, begin, side="right"))
        return TokenGap(begin - self.t0, hi - begin, max(in_flight, 1))


def token_gaps(run: LoadRun, min_s: float) -> list[TokenGap]:
    """Every stall of ``run`` longer than ``min_s``, in time order."""
    if not run.records:
        return []
    arr = _Arrivals(run)
    gaps = (arr.gap(int(k)) for k in np.nonzero(arr.widths > min_s)[0])
    return [g for g in gaps if g is not None and g.length_s > min_s]


def longest_token_gap(run: LoadRun) -> TokenGap | None:
    """The longest stall of ``run`` (None when no gap had a request in flight). Gaps are tried
    widest first; a stall is never longer than its gap, so the search stops at the first gap
    narrower than the best stall found."""
    if not run.records:
        return None
    arr = _Arrivals(run)
    best: TokenGap | None = None
    for k in np.argsort(-arr.widths, kind="stable"):
        if best is not None and arr.widths[k] <= best.length_s:
            break
        g = arr.gap(int(k))
        if g is not None and (best is None or g.length_s > best.length_s):
            best = g
    return best
