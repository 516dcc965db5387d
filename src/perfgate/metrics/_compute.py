"""Serving metrics exactly as sglang.bench_serving defines them, plus a steady-state window and goodput."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from perfgate import catalogue
from perfgate._stats import describe_ms
from perfgate.load import LoadRun, RequestRecord
from perfgate.profile import Slo

TIMELINE_BIN_S = 0.1
PEAK_BUCKET_S = 1.0
# Tokens handled at a time where a whole-run temporary would be needed: those stay ~16 MB
# however many tokens a run has.
_BIN_SLICE = 1 << 20

_DESCRIBED = ("ttft", "tpot", "itl", "e2e_latency")
# The families that measure gaps between tokens, which one read of a whole stream hides.
_GAPS = ("tpot", "itl")
_NO_SAMPLE = {
    "ttft": "no completed request streamed a token",
    "tpot": "no completed request had two output tokens",
    "itl": "no completed request had two output tokens",
    "e2e_latency": "no request completed",
}
_STEADY = ("steady_output_throughput", "steady_mean_tpot_ms", "steady_window_s")
METRIC_NAMES = catalogue.names("client")
"""Every name :func:`compute_metrics` can put in ``values``, as the catalogue declares them."""
SLO_METRICS = frozenset(n for n in METRIC_NAMES if catalogue.metric(n).needs_slo)
"""The names that exist only for a workload with an SLO."""


@dataclass(frozen=True)
class SteadyWindow:
    """The longest interval in which requests in flight stayed >= ``ratio`` x target concurrency.

    Times are time.monotonic() seconds; throughput counts tokens that arrived inside the window.
    """

    start_s: float
    end_s: float
    ratio: float
    target_concurrency: int
    output_tokens: int
    output_throughput: float  # tok/s
    mean_itl_ms: float  # mean gap between tokens arriving in the window: the window's TPOT

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Timeline:
    """Requests in flight (sampled at each bin start) and output tokens per ``bin_s`` bin."""

    start_s: float
    bin_s: float
    in_flight: list[int]
    output_tokens: list[int]


@dataclass(frozen=True)
class ServingMetrics:
    """One measured run. ``values`` holds bench_serving's numbers under its key names
    (throughputs in req/s or tok/s, latencies in ms) plus perfgate's steady-window figures."""

    workload: str
    values: dict[str, float]
    completed: int
    failed: int
    errors: dict[str, int]
    steady: SteadyWindow | None
    timeline: Timeline
    notes: list[str] = field(default_factory=list)
    unmeasured: dict[str, str] = field(default_factory=dict)
    """Why a metric has no value: name -> reason (no steady window, no token in it, no two
    tokens of a request read apart)."""


class _Tokens:
    """Every successful request's output tokens as flat float64 columns (bench_serving's reconstruction).

    ``times``: each token's arrival (time.monotonic() seconds): the first at TTFT, then one per
    ITL. ``itls``: every chunk after a request's first gives its gap to the previous chunk,
    split evenly over the tokens it carried (the first chunk's arrival is the TTFT, not an ITL).
    ``first``: whether token k is its request's first. Arrays filled in place, not lists: a
    100,000-request run has ~15 M tokens, 8 bytes each here against ~32 as Python floats in a list.
    """

    def __init__(self, ok: list[RequestRecord]) -> None:
        timed = [r for r in ok if r.ttft_s is not None]
        counts = [np.frombuffer(r.chunk_tokens, dtype=np.uint16)[1:] for r in timed]
        n_itls = np.array([int(c.sum()) for c in counts], dtype=np.int64)
        self.itls = np.empty(int(n_itls.sum()), dtype=np.float64)
        self.times = np.empty(len(self.itls) + len(timed), dtype=np.float64)
        self.first = np.zeros(len(self.times), dtype=bool)
        i = t = 0
        for r, tokens, n in zip(timed, counts, n_itls, strict=True):
            offsets = np.frombuffer(r.chunk_offsets_s, dtype=np.float32).astype(np.float64)
            counted = tokens > 0
            itls = self.itls[i : i + n]
            itls[:] = np.repeat(np.diff(offsets)[counted] / tokens[counted], tokens[counted])
            # A running sum from the first token's time, as the client's clock would add them up.
            times = self.times[t : t + n + 1]
            times[0] = r.start_s + (r.ttft_s or 0.0)
            times[1:] = itls
            np.cumsum(times, out=times)
            self.first[t] = True
            i, t = i + n, t + n + 1

    def mean_gap_s(self, among: npt.NDArray[np.bool_]) -> float:
        """The mean of ``times[k] - times[k-1]`` over the tokens k selected by ``among`` that are not
        their request's first (NaN for none), a slice at a time: no array as long as the run's."""
        total, count = 0.0, 0
        for a in range(0, len(self.times), _BIN_SLICE):
            k = a + np.flatnonzero(among[a : a + _BIN_SLICE] & ~self.first[a : a + _BIN_SLICE])
            total += float((self.times[k] - self.times[k - 1]).sum())
            count += len(k)
        return total / count if count else math.nan


def _error_kind(error: str) -> str:
    return error.split(":", 1)[0]


def _request_tpot_s(r: RequestRecord, output_tokens: int) -> float:
    """bench_serving's per-request TPOT; 0 for a one-token answer (its goodput counts it so)."""
    if r.ttft_s is None or r.latency_s is None or output_tokens <= 1:
        return 0.0
    return (r.latency_s - r.ttft_s) / (output_tokens - 1)


def _goodput(
    records: list[RequestRecord],
    ok: list[RequestRecord],
    out_tokens: Callable[[RequestRecord], int],
    slo: Slo,
    duration_s: float,
) -> dict[str, float]:
    """bench_serving's goodput: successful requests meeting every target, per second of the run;
    attainment is over every request sent (a failed request meets no SLO)."""
    targets = slo.targets()
    met = dict.fromkeys(targets, 0)
    good = 0
    for r in ok:
        observed_ms = {
            "ttft_ms": (r.ttft_s or 0.0) * 1000.0,
            "tpot_ms": _request_tpot_s(r, out_tokens(r)) * 1000.0,
            "e2e_ms": (r.latency_s or 0.0) * 1000.0,
        }
        passed = [k for k, limit in targets.items() if observed_ms[k] <= limit]
        for k in passed:
            met[k] += 1
        good += len(passed) == len(targets)
    sent = len(records)
    values = {
        "goodput": good / duration_s if duration_s > 0 else 0.0,
        "slo_attainment_pct": 100.0 * good / sent if sent else 0.0,
    }
    for k, n in met.items():
        values[f"slo_{k.removesuffix('_ms')}_attainment_pct"] = 100.0 * n / sent if sent else 0.0
    return values


def compute_metrics(
    run: LoadRun, *, target_concurrency: int, steady_ratio: float = 0.9, slo: Slo | None = None
) -> ServingMetrics:
    """bench_serving's numbers of ``run``; with ``slo``, also goodput and SLO attainment."""
    duration = run.duration_s
    ok = [r for r in run.records if r.ok]
    failed = [r for r in run.records if not r.ok]
    errors: dict[str, int] = {}
    for r in failed:
        errors[_error_kind(r.error)] = errors.get(_error_kind(r.error), 0) + 1
    notes: list[str] = list(run.notes)

    uncounted = sum(1 for r in ok if r.output_tokens is None)
    if uncounted:
        notes.append(
            f"{uncounted} of {len(ok)} requests carried no server token count (meta_info/usage): "
            "their output tokens are the streamed chunks counted by the client"
        )

    def out_tokens(r: RequestRecord) -> int:
        return r.output_tokens if r.output_tokens is not None else sum(r.chunk_tokens)

    total_in = sum(r.input_tokens for r in ok)
    total_out = sum(out_tokens(r) for r in ok)
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    e2e = [r.latency_s for r in ok if r.latency_s is not None]
    tpots = [
        (r.latency_s - r.ttft_s) / (out_tokens(r) - 1)
        for r in ok
        if r.latency_s is not None and r.ttft_s is not None and out_tokens(r) > 1
    ]
    tokens = _Tokens(ok)

    values: dict[str, float] = {
        "duration_s": duration,
        "completed": float(len(ok)),
        "failed": float(len(failed)),
        "total_input_tokens": float(total_in),
        "total_output_tokens": float(total_out),
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "input_throughput": total_in / duration if duration > 0 else 0.0,
        "output_throughput": total_out / duration if duration > 0 else 0.0,
        "total_throughput": (total_in + total_out) / duration if duration > 0 else 0.0,
        "concurrency": sum(e2e) / duration if duration > 0 else 0.0,
    }
    series: tuple[list[float] | npt.NDArray[np.float64], ...] = (ttfts, tpots, tokens.itls, e2e)
    unmeasured: dict[str, str] = {}
    for name, samples in zip(_DESCRIBED, series):
        described = describe_ms(samples, name)
        if name in _GAPS and len(samples) and not np.any(samples):
            # Every stream arrived in one read: the client saw no gap between tokens, and a TPOT of
            # 0 would be a limit no later run can worsen (the client lagged, or the server buffered).
            why = f"{name.upper()} not measured: every request's tokens arrived in one read of its stream"
            notes.append(f"{why} (the client read late, or the server does not stream)")
            unmeasured |= dict.fromkeys(described, why)
            continue
        if not len(samples):
            unmeasured |= dict.fromkeys(described, _NO_SAMPLE[name])
        values.update(described)
    if slo is not None:
        values.update(_goodput(run.records, ok, out_tokens, slo, duration))

    values["max_output_tokens_per_s"] = _peak_per_bucket(tokens.times, run.start_s)

    timeline = _timeline(run, tokens.times)
    steady = _steady_window(run, tokens, timeline, target_concurrency, steady_ratio)
    steady_note = ""
    if steady is None:
        steady_note = (
            f"no steady-state window: requests in flight never stayed at >= {steady_ratio:.0%} of "
            f"{target_concurrency} for a full {TIMELINE_BIN_S:g} s bin"
        )
    elif steady.output_tokens == 0:
        # A server that stalls while the load holds (a prefill wave, a noisy host) leaves a window
        # with no token: its figures would be zeros, so the steady figures go unreported and the
        # windows that follow the steady one (telemetry, tokens per joule) use the whole phase.
        steady_note = (
            f"no steady figures: the steady window ({steady.length_s:.1f} s at >= {steady_ratio:.0%} of "
            f"{target_concurrency} in flight) holds no output token"
        )
        steady = None
    else:
        values["steady_output_throughput"] = steady.output_throughput
        values["steady_mean_tpot_ms"] = steady.mean_itl_ms
        values["steady_window_s"] = steady.length_s
    if steady_note:
        notes.append(steady_note)
        unmeasured |= dict.fromkeys(_STEADY, steady_note)
    return ServingMetrics(
        workload=run.workload,
        values={k: v for k, v in values.items() if not (isinstance(v, float) and math.isnan(v))},
        completed=len(ok),
        failed=len(failed),
        errors=errors,
        steady=steady,
        timeline=timeline,
        notes=notes,
        unmeasured=unmeasured,
    )


def _peak_per_bucket(token_times: npt.NDArray[np.float64], start_s: float) -> float:
    if not len(token_times):
        return 0.0
    lo, hi = (math.floor((t - start_s) / PEAK_BUCKET_S) for t in (token_times.min(), token_times.max()))
    return int(_bin_counts(token_times, start_s, PEAK_BUCKET_S, lo, hi).max()) / PEAK_BUCKET_S


def _bin_counts(
    times: npt.NDArray[np.float64], origin_s: float, width_s: float, lo: int, hi: int
) -> npt.NDArray[np.int64]:
    """How many ``times`` fall in each bin ``floor((t - origin_s) / width_s)``, clipped to [lo, hi].

    Index 0 counts bin ``lo``.
    """
    counts = np.zeros(hi - lo + 1, dtype=np.int64)
    for k in range(0, len(times), _BIN_SLICE):
        b = np.floor((times[k : k + _BIN_SLICE] - origin_s) / width_s)
        np.clip(b, lo, hi, out=b)
        counts += np.bincount((b - lo).astype(np.int64), minlength=hi - lo + 1)
    return counts


def _timeline(run: LoadRun, token_times: npt.NDArray[np.float64]) -> Timeline:
    n_bins = max(1, math.ceil(run.duration_s / TIMELINE_BIN_S))
    delta = [0] * (n_bins + 1)
    for r in run.records:
        # Failed requests carry the time they failed; only a record without one (never sent) runs to the end.
        end = r.start_s + r.latency_s if r.latency_s is not None else run.end_s
        # A request counts in bin b when it is in flight at the bin's start.
        b0 = max(0, math.ceil((r.start_s - run.start_s) / TIMELINE_BIN_S - 1e-9))
        b1 = min(n_bins, math.ceil((end - run.start_s) / TIMELINE_BIN_S - 1e-9))
        if b1 > b0:
            delta[b0] += 1
            delta[b1] -= 1
    in_flight, level = [], 0
    for b in range(n_bins):
        level += delta[b]
        in_flight.append(level)
    # Clamped: a token after the end counts in the last bin.
    tokens = _bin_counts(token_times, run.start_s, TIMELINE_BIN_S, 0, n_bins - 1).tolist()
    return Timeline(run.start_s, TIMELINE_BIN_S, in_flight, tokens)


def _steady_window(run: LoadRun, tokens: _Tokens, timeline: Timeline, target: int, ratio: float) -> SteadyWindow | None:
    threshold = ratio * target
    best = (0, 0)
    i = 0
    n = len(timeline.in_flight)
    while i < n:
        if timeline.in_flight[i] >= threshold and (i + 1 == n or timeline.in_flight[i + 1] >= threshold):
            j = i
            while j + 1 < n and timeline.in_flight[j + 1] >= threshold:
                j += 1
            # Bins i..j start with enough requests in flight; the window runs from bin i's start to bin j's start.
            if j - i > best[1] - best[0]:
                best = (i, j)
            i = j + 1
        else:
            i += 1
    if best[1] <= best[0]:
        return None
    start = run.start_s + best[0] * TIMELINE_BIN_S
    end = run.start_s + best[1] * TIMELINE_BIN_S
    in_window = (tokens.times >= start) & (tokens.times < end)
    inside = int(in_window.sum())
    # The gap from a request's previous token to each of its tokens that arrived in the window.
    mean_gap_ms = tokens.mean_gap_s(in_window) * 1000.0
    return SteadyWindow(
        start_s=start,
        end_s=end,
        ratio=ratio,
        target_concurrency=target,
        output_tokens=inside,
        output_throughput=inside / (end - start),
        mean_itl_ms=mean_gap_ms,
    )
