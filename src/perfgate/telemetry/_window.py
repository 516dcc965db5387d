"""Window math: turn one GPU's samples and activity spans into a :class:`GpuWindow`.

Everything here is a pure function of recorded data, so any sub-interval can be summarised after
the run. Cumulative quantities (energy, throttle time) are built as piecewise-linear functions of
time and read at the window edges, which makes energy additive over adjacent windows.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from perfgate._stats import mean, percentile
from perfgate.telemetry._checks import PowerBound, counter_jump, power_bound
from perfgate.telemetry._model import (
    ActivitySpan,
    GpuIdentity,
    GpuSample,
    GpuWindow,
    PowerMethod,
)

ACTIVITY_KEYS = (
    "sm_util_pct",
    "sm_occupancy_pct",
    "tensor_util_pct",
    "dram_bw_util_pct",
    "pcie_tx_mib_s",
    "pcie_rx_mib_s",
    "nvlink_tx_mib_s",
    "nvlink_rx_mib_s",
)


@dataclass(frozen=True)
class Cumulative:
    """A non-decreasing piecewise-linear function given at sorted times ``ts``."""

    ts: tuple[float, ...]
    values: tuple[float, ...]

    def at(self, t: float) -> float:
        """Linear interpolation, clamped to the first/last point."""
        ts = self.ts
        if t <= ts[0]:
            return self.values[0]
        if t >= ts[-1]:
            return self.values[-1]
        i = bisect.bisect_right(ts, t)
        t0, t1 = ts[i - 1], ts[i]
        v0, v1 = self.values[i - 1], self.values[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)

    def delta(self, start_s: float, end_s: float) -> float:
        return self.at(end_s) - self.at(start_s)

    def covered(self, start_s: float, end_s: float) -> float:
        """Seconds of ``[start_s, end_s]`` inside the function's support."""
        return max(0.0, min(end_s, self.ts[-1]) - max(start_s, self.ts[0]))


def _power(s: GpuSample) -> float | None:
    return s.power_instant_w if s.power_instant_w is not None else s.power_avg_w


def _accumulate(
    points: Sequence[tuple[float, float]], step: Callable[[float, float, float, float], float]
) -> Cumulative | None:
    """Running sum of ``step(t0, v0, t1, v1)`` over consecutive points; ``None`` below two points."""
    if len(points) < 2:
        return None
    ts, vals, acc = [points[0][0]], [0.0], 0.0
    for (t0, v0), (t1, v1) in pairwise(points):
        if t1 <= t0:
            continue
        acc += step(t0, v0, t1, v1)
        ts.append(t1)
        vals.append(acc)
    return Cumulative(tuple(ts), tuple(vals)) if len(ts) >= 2 else None


def integrate_power(samples: Sequence[GpuSample]) -> Cumulative | None:
    """Trapezoidal integral of sampled power (J) over time; ``None`` with fewer than two readings."""
    points = [(s.t_s, p) for s in samples if (p := _power(s)) is not None]
    return _accumulate(points, lambda t0, p0, t1, p1: 0.5 * (p0 + p1) * (t1 - t0))


@dataclass(frozen=True)
class CounterSteps:
    """The energy-counter steps not used, as (t0_s, t1_s) intervals: ``resets`` went backwards (a
    driver reload), ``jumps`` rose more than the GPU can draw (see ``_checks.counter_jump``)."""

    resets: tuple[tuple[float, float], ...] = ()
    jumps: tuple[tuple[float, float], ...] = ()


def energy_counter(
    samples: Sequence[GpuSample], integrated: Cumulative | None, bound: PowerBound
) -> tuple[Cumulative | None, CounterSteps]:
    """Energy (J) from the GPU's counter, continuous across counter resets.

    The counter is read less often than power (it is the expensive NVML call), so each counter
    step is spread over its interval in proportion to the integrated sampled power: the result
    is exact at every counter reading and follows the power trace in between, which keeps
    windows whose edges fall between readings accurate (and additive).
    A step that goes backwards (the counter restarted: driver reload) or jumps past ``bound`` is
    not used: that one interval is filled from ``integrated`` power instead, or is NaN where
    there is none (nothing to fill it with: no window from that step on is measured).
    Returns the function and the steps not used.
    """
    resets: list[tuple[float, float]] = []
    jumps: list[tuple[float, float]] = []

    def step(t0: float, e0: float, t1: float, e1: float) -> float:
        if e1 < e0:
            resets.append((t0, t1))
        elif counter_jump(e0, e1, t1 - t0, bound):
            jumps.append((t0, t1))
        else:
            return e1 - e0
        return integrated.delta(t0, t1) if integrated is not None else math.nan

    points = [(s.t_s, s.energy_j) for s in samples if s.energy_j is not None]
    counter = _accumulate(points, step)
    steps = CounterSteps(tuple(resets), tuple(jumps))
    if counter is None or integrated is None:
        return counter, steps
    ts, vals = [counter.ts[0]], [counter.values[0]]
    for t0, t1, c0, c1 in zip(counter.ts, counter.ts[1:], counter.values, counter.values[1:]):
        i0, i1 = integrated.at(t0), integrated.at(t1)
        lo, hi = bisect.bisect_right(integrated.ts, t0), bisect.bisect_left(integrated.ts, t1)
        for k in range(lo, hi):
            t = integrated.ts[k]
            share = (integrated.values[k] - i0) / (i1 - i0) if i1 > i0 else (t - t0) / (t1 - t0)
            ts.append(t)
            vals.append(c0 + (c1 - c0) * share)
        ts.append(t1)
        vals.append(c1)
    return Cumulative(tuple(ts), tuple(vals)), steps


def _throttle_s(samples: Sequence[GpuSample], start_s: float, end_s: float) -> dict[str, float]:
    out: dict[str, float] = {}
    counters = [s for s in samples if s.throttle_ns]
    if len(counters) >= 2:
        for reason in counters[-1].throttle_ns or {}:
            points = [(s.t_s, ns[reason]) for s in counters if (ns := s.throttle_ns) and reason in ns]
            # A counter that went backwards restarted: count nothing for that step.
            total = _accumulate(points, lambda t0, v0, t1, v1: max(0.0, v1 - v0))
            if total is not None:
                out[reason] = total.delta(start_s, end_s) / 1e9
        return out
    masked = [s for s in samples if s.throttle_mask is not None]
    for prev, cur in pairwise(masked):
        overlap = min(cur.t_s, end_s) - max(prev.t_s, start_s)
        if overlap <= 0 or not cur.throttle_mask:
            continue
        for bit, reason in THROTTLE_BITS.items():
            if cur.throttle_mask & bit:
                out[reason] = out.get(reason, 0.0) + overlap
    return out


# NVML clock-event reason bits (nvmlClocksEventReason*), named like the cumulative counters.
THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


def span_average(spans: Iterable[ActivitySpan], key: str, start_s: float, end_s: float) -> float | None:
    """Overlap-weighted mean of ``key`` over the spans intersecting ``[start_s, end_s]``."""
    num = den = 0.0
    for span in spans:
        value = span.values.get(key)
        overlap = min(span.t1_s, end_s) - max(span.t0_s, start_s)
        if value is None or overlap <= 0:
            continue
        num += value * overlap
        den += overlap
    return num / den if den > 0 else None


def _mean_or_none(values: list[float]) -> float | None:
    return mean(values) if values else None


WINDOW_BOUND_FACTOR = 2.0
"""A window's mean power may pass a GPU's bound by this factor: a counter step is spread over its
interval in proportion to the sampled power, which puts more of it in a short window where the
samples (trapezoids) and the counter disagree; twice the bound is past any such overshoot."""


@dataclass(frozen=True)
class _Power:
    """A window's mean power and energy, how they were obtained, and why not where they were not."""

    mean_w: float | None = None
    energy_j: float | None = None
    method: PowerMethod | None = None
    covered_s: float = 0.0
    unmeasured: str = ""


def _window_power(
    ident: GpuIdentity, samples: Sequence[GpuSample], start_s: float, end_s: float, notes: list[str]
) -> tuple[_Power, Cumulative | None]:
    """Mean power and energy over ``[start_s, end_s]`` (notes appended to ``notes``), and the
    integrated sampled power they were checked against."""
    label = ident.label
    bound = power_bound(ident.power_limit_w)
    integrated = integrate_power(samples)
    energy, steps = energy_counter(samples, integrated, bound)
    basis = energy or integrated
    covered = basis.covered(start_s, end_s) if basis is not None else 0.0
    if basis is None or covered <= 0:
        return _Power(unmeasured=f"{label}: no power reading in the window"), integrated
    energy_j = basis.delta(start_s, end_s)
    mean_w = energy_j / covered
    if not mean_w <= WINDOW_BOUND_FACTOR * bound.max_w:
        # Counter steps each within the bound (and its slack) can still add up past it over a short
        # window, and a step with no power reading to fill it is NaN: neither is a GPU's power.
        why = (
            f"{label}: mean power {mean_w:,.1f} W over the window is more than {WINDOW_BOUND_FACTOR:g} x "
            f"{bound.text}: its energy counter holds more than the GPU can draw"
            if math.isfinite(mean_w)
            else f"{label}: an energy-counter step went backwards or jumped, and no power reading fills it"
        )
        return _Power(covered_s=covered, unmeasured=f"{why}; not measured"), integrated
    method: PowerMethod
    if energy is None:
        has_instant = any(s.power_instant_w is not None for s in samples)
        method = "integrated_instant" if has_instant else "integrated_average"
        notes.append(
            f"{label}: no energy counter; mean power integrated from sampled "
            f"{'instant' if has_instant else '1-s average'} power"
        )
    else:
        resets = [t1 for t0, t1 in steps.resets if t0 < end_s and t1 > start_s]
        jumps = [t1 for t0, t1 in steps.jumps if t0 < end_s and t1 > start_s]
        method = "energy_counter+integrated" if resets or jumps else "energy_counter"
        for t in resets:
            notes.append(f"{label}: energy counter reset at t={t:.3f}s; used integrated power for that sample interval")
    return _Power(mean_w, energy_j, method, covered), integrated


def summarize_gpu(
    ident: GpuIdentity,
    samples: Sequence[GpuSample],
    spans: Sequence[ActivitySpan],
    start_s: float,
    end_s: float,
    rejected: Sequence[str] = (),
) -> tuple[GpuWindow, list[str]]:
    """One GPU over ``[start_s, end_s]`` plus the notes a reader needs to trust the numbers.

    ``samples`` must be sorted by time and may extend beyond the window (neighbours outside it
    are what the edges are interpolated from). ``rejected``: what was not used of this GPU's
    readings in the window, and why (``_checks.ReadingCheck``; a source lost); it is kept on the
    window and is the reason given where mean power is not measured.
    """
    notes: list[str] = []
    label = ident.label
    inside = [s for s in samples if start_s <= s.t_s <= end_s]
    power, integrated = _window_power(ident, samples, start_s, end_s, notes)
    unmeasured = power.unmeasured
    if unmeasured and rejected and power.covered_s <= 0:
        unmeasured = f"{unmeasured} ({'; '.join(rejected)})"
    integrated_w = None
    if integrated is not None and (cov := integrated.covered(start_s, end_s)) > 0:
        integrated_w = integrated.delta(start_s, end_s) / cov
    mean_w, covered = power.mean_w, power.covered_s
    length = end_s - start_s
    if length > 0 and covered < 0.9 * length:
        notes.append(f"{label}: samples cover only {covered:.2f}s of the {length:.2f}s window")

    instant = [p for s in inside if (p := s.power_instant_w) is not None]
    if not instant:
        instant = [p for s in inside if (p := s.power_avg_w) is not None]
    ordered = sorted(instant)
    missing_power = sum(1 for s in inside if _power(s) is None)
    if missing_power:
        notes.append(f"{label}: power unreadable in {missing_power} of {len(inside)} samples")

    limit = ident.power_limit_w
    activity = {key: span_average(spans, key, start_s, end_s) for key in ACTIVITY_KEYS}
    temps = [v for s in inside if (v := s.temperature_c) is not None]
    mems = [v for s in inside if (v := s.memory_used_mib) is not None]
    window = GpuWindow(
        index=ident.index,
        uuid=ident.uuid,
        name=ident.name,
        hostname=ident.hostname,
        samples=len(inside),
        coverage_s=covered,
        mean_power_w=mean_w,
        energy_j=power.energy_j,
        power_method=power.method,
        integrated_power_w=integrated_w,
        power_p5_w=percentile(ordered, 5) if ordered else None,
        power_p50_w=percentile(ordered, 50) if ordered else None,
        power_p95_w=percentile(ordered, 95) if ordered else None,
        power_limit_w=limit,
        limit_share=mean_w / limit if mean_w is not None and limit else None,
        util_gpu_pct=_mean_or_none([v for s in inside if (v := s.util_gpu_pct) is not None]),
        sm_clock_mean_mhz=_mean_or_none([v for s in inside if (v := s.sm_clock_mhz) is not None]),
        throttle_s=_throttle_s(samples, start_s, end_s),
        temperature_max_c=max(temps) if temps else None,
        memory_used_max_mib=max(mems) if mems else None,
        rejected=(*rejected, *([unmeasured] if mean_w is None and power.covered_s > 0 else [])),
        unmeasured=unmeasured,
        **activity,
    )
    return window, notes
