"""Serving metrics exactly as sglang.bench_serving defines them, plus a steady-state window and goodput."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from perfgate._stats import describe_ms
from perfgate.load import LoadRun, RequestRecord
from perfgate.profile import SLO_KEYS, Slo

TIMELINE_BIN_S = 0.1
PEAK_BUCKET_S = 1.0

_DESCRIBED = ("ttft", "tpot", "itl", "e2e_latency")
METRIC_NAMES = frozenset(
    {
        "duration_s",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "input_throughput",
        "output_throughput",
        "total_throughput",
        "concurrency",
        "max_output_tokens_per_s",
        "steady_output_throughput",
        "steady_mean_tpot_ms",
        "steady_window_s",
        *(f"{stat}_{name}_ms" for name in _DESCRIBED for stat in ("mean", "median", "std", "p90", "p95", "p99")),
        # With a workload SLO.
        "goodput",
        "slo_attainment_pct",
        *(f"slo_{k.removesuffix('_ms')}_attainment_pct" for k in SLO_KEYS),
    }
)
"""Every name :func:`compute_metrics` can put in ``values`` (bench_serving's keys plus the steady window's and,
with an SLO, goodput and attainment)."""
SLO_METRICS = frozenset(n for n in METRIC_NAMES if n == "goodput" or n.startswith("slo_"))
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


def _token_times(rec: RequestRecord) -> list[float]:
    """Arrival time of each output token: the first at TTFT, then one per ITL (bench_serving's reconstruction)."""
    if rec.ttft_s is None:
        return []
    t = rec.start_s + rec.ttft_s
    out = [t]
    for gap in rec.itls_s():
        t += gap
        out.append(t)
    return out


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
    itls = [x for r in ok for x in r.itls_s()]

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
    series: tuple[list[float], ...] = (ttfts, tpots, itls, e2e)
    for name, samples in zip(_DESCRIBED, series):
        values.update(describe_ms(samples, name))
    if slo is not None:
        values.update(_goodput(run.records, ok, out_tokens, slo, duration))

    per_request_times = [_token_times(r) for r in ok]
    token_times = [t for times in per_request_times for t in times]
    values["max_output_tokens_per_s"] = _peak_per_bucket(token_times, run.start_s)

    timeline = _timeline(run, token_times)
    steady = _steady_window(run, per_request_times, timeline, target_concurrency, steady_ratio)
    if steady is not None:
        values["steady_output_throughput"] = steady.output_throughput
        values["steady_mean_tpot_ms"] = steady.mean_itl_ms
        values["steady_window_s"] = steady.length_s
    else:
        notes.append(
            f"no steady-state window: requests in flight never stayed at >= {steady_ratio:.0%} of "
            f"{target_concurrency} for a full {TIMELINE_BIN_S:g} s bin"
        )
    return ServingMetrics(
        workload=run.workload,
        values={k: v for k, v in values.items() if not (isinstance(v, float) and math.isnan(v))},
        completed=len(ok),
        failed=len(failed),
        errors=errors,
        steady=steady,
        timeline=timeline,
        notes=notes,
    )


def _peak_per_bucket(token_times: list[float], start_s: float) -> float:
    if not token_times:
        return 0.0
    counts: dict[int, int] = {}
    for t in token_times:
        b = int((t - start_s) // PEAK_BUCKET_S)
        counts[b] = counts.get(b, 0) + 1
    return max(counts.values()) / PEAK_BUCKET_S


def _timeline(run: LoadRun, token_times: list[float]) -> Timeline:
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
    tokens = [0] * n_bins
    for t in token_times:
        b = min(n_bins - 1, max(0, int((t - run.start_s) / TIMELINE_BIN_S)))
        tokens[b] += 1
    return Timeline(run.start_s, TIMELINE_BIN_S, in_flight, tokens)


def _steady_window(
    run: LoadRun, per_request_times: list[list[float]], timeline: Timeline, target: int, ratio: float
) -> SteadyWindow | None:
    """``per_request_times``: each successful request's token arrival times."""
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
    inside = sum(1 for times in per_request_times for t in times if start <= t < end)
    per_request_gaps: list[float] = []
    for times in per_request_times:
        per_request_gaps.extend(b - a for a, b in itertools.pairwise(times) if start <= b < end)
    mean_gap_ms = sum(per_request_gaps) / len(per_request_gaps) * 1000.0 if per_request_gaps else math.nan
    return SteadyWindow(
        start_s=start,
        end_s=end,
        ratio=ratio,
        target_concurrency=target,
        output_tokens=inside,
        output_throughput=inside / (end - start),
        mean_itl_ms=mean_gap_ms,
    )
