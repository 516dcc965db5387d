"""Window math on synthetic sample series (no source, no thread)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.telemetry import GpuIdentity, GpuSample, GpuWindow, TelemetryWindow
from perfgate.telemetry._model import ActivitySpan
from perfgate.telemetry._window import summarize_gpu

IDENT = GpuIdentity(index=3, uuid="GPU-aaaaaaaa-bbbb-cccc-dddd-0000deadbeef", name="Fake", power_limit_w=600.0)


def trace(
    powers: list[float], dt: float = 0.1, *, energy_every: int = 1, t0: float = 50.0, energy0: float = 1e4
) -> list[GpuSample]:
    """Samples of a piecewise-constant power trace (power[i] holds on [t_i, t_i+1)); the energy
    counter is exact and read every ``energy_every`` samples (and at the last one)."""
    out, energy = [], energy0
    for i, p in enumerate(powers):
        read = i % energy_every == 0 or i == len(powers) - 1
        out.append(GpuSample(t_s=t0 + i * dt, uuid=IDENT.uuid, power_instant_w=p, energy_j=energy if read else None))
        energy += p * dt
    return out


powers_st = st.lists(st.floats(min_value=50, max_value=800), min_size=3, max_size=60)


@settings(max_examples=60, deadline=None)
@given(powers_st, st.integers(1, 12), st.floats(0, 1), st.floats(0, 1))
def test_energy_is_additive_over_adjacent_windows(powers, every, a, b):
    samples = trace(powers, energy_every=every)
    t_first, t_last = samples[0].t_s, samples[-1].t_s
    lo, hi = sorted((a, b))
    mid = t_first + (t_last - t_first) * (lo + hi) / 2
    start, end = t_first + (t_last - t_first) * lo / 2, t_last - (t_last - t_first) * (1 - hi) / 2
    if not start < mid < end:
        return
    whole, _ = summarize_gpu(IDENT, samples, [], start, end)
    left, _ = summarize_gpu(IDENT, samples, [], start, mid)
    right, _ = summarize_gpu(IDENT, samples, [], mid, end)
    assert whole.energy_j is not None and left.energy_j is not None and right.energy_j is not None
    assert math.isclose(whole.energy_j, left.energy_j + right.energy_j, rel_tol=1e-9, abs_tol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.floats(1, 1000), st.integers(2, 80), st.integers(1, 15), st.floats(0.01, 0.49))
def test_constant_power_trace_means_that_power(power, n, every, edge):
    samples = trace([power] * n, energy_every=every)
    t_first, t_last = samples[0].t_s, samples[-1].t_s
    start, end = t_first + edge * (t_last - t_first), t_last - edge * (t_last - t_first)
    window, notes = summarize_gpu(IDENT, samples, [], start, end)
    assert window.power_method == "energy_counter"
    assert math.isclose(window.mean_power_w, power, rel_tol=1e-9)
    assert math.isclose(window.integrated_power_w, power, rel_tol=1e-9)
    assert math.isclose(window.limit_share, power / 600.0, rel_tol=1e-9)
    assert notes == []


def test_counter_reset_uses_integrated_power_for_that_interval():
    samples = trace([400.0] * 21)
    # Driver reload between t[10] and t[11]: the counter restarts near zero.
    samples[11:] = [
        GpuSample(t_s=s.t_s, uuid=s.uuid, power_instant_w=s.power_instant_w, energy_j=s.energy_j - 1e4 - 10 * 40.0)
        for s in samples[11:]
    ]
    window, notes = summarize_gpu(IDENT, samples, [], samples[0].t_s, samples[-1].t_s)
    assert window.power_method == "energy_counter+integrated"
    assert math.isclose(window.mean_power_w, 400.0, rel_tol=1e-9)
    assert any("energy counter reset at t=51.100s" in n and "integrated" in n for n in notes)
    clean, clean_notes = summarize_gpu(IDENT, samples, [], samples[12].t_s, samples[-1].t_s)
    assert clean.power_method == "energy_counter" and clean_notes == []


def test_no_counter_falls_back_to_integration_and_says_so():
    samples = [GpuSample(t_s=10 + i * 0.1, uuid=IDENT.uuid, power_avg_w=250.0) for i in range(11)]
    window, notes = summarize_gpu(IDENT, samples, [], 10.0, 11.0)
    assert window.power_method == "integrated_average"
    assert math.isclose(window.mean_power_w, 250.0)
    assert any("no energy counter" in n and "1-s average" in n for n in notes)


def test_window_beyond_samples_reports_coverage():
    samples = trace([300.0] * 11)
    window, notes = summarize_gpu(IDENT, samples, [], 49.0, 51.0)
    assert math.isclose(window.coverage_s, 1.0)
    assert math.isclose(window.mean_power_w, 300.0)
    assert any("cover only 1.00s of the 2.00s window" in n for n in notes)


def test_activity_spans_are_overlap_weighted_and_throttle_counters_diffed():
    spans = [
        ActivitySpan(0.0, 1.0, IDENT.uuid, {"tensor_util_pct": 90.0}),
        ActivitySpan(1.0, 2.0, IDENT.uuid, {"tensor_util_pct": 30.0, "sm_util_pct": None}),
    ]
    samples = [
        GpuSample(
            t_s=t, uuid=IDENT.uuid, power_instant_w=100.0, energy_j=100.0 * t, throttle_ns={"sw_power_cap": 0.5e9 * t}
        )
        for t in (0.0, 1.0, 2.0)
    ]
    window, _ = summarize_gpu(IDENT, samples, spans, 0.5, 2.0)
    assert math.isclose(window.tensor_util_pct, (90 * 0.5 + 30 * 1.0) / 1.5)
    assert window.sm_util_pct is None
    assert math.isclose(window.throttle_s["sw_power_cap"], 0.75)


def gpu_window(index: int, power: float | None, tensor: float | None = None) -> GpuWindow:
    return GpuWindow(
        index=index,
        uuid=f"GPU-0000-{index:08d}",
        name="Fake",
        mean_power_w=power,
        energy_j=None if power is None else power * 10,
        power_limit_w=600.0,
        limit_share=None if power is None else power / 600.0,
        tensor_util_pct=tensor,
    )


@given(st.floats(1, 1000), st.integers(1, 8))
def test_imbalance_is_zero_for_equal_gpus(power, n):
    window = TelemetryWindow(0.0, 10.0, "nvml", tuple(gpu_window(i, power) for i in range(n)))
    assert window.imbalance == 0.0
    assert window.metrics()["gpu_imbalance"] == 0.0


def test_metrics_and_weakest_gpu_name_the_low_gpu():
    window = TelemetryWindow(
        0.0, 10.0, "nvml", (gpu_window(0, 250.0, 40.0), gpu_window(1, 500.0, 80.0), gpu_window(2, None))
    )
    m = window.metrics()
    assert m["gpu_power_min_w"] == 250.0 and m["gpu_power_total_w"] == 750.0
    assert m["gpu_imbalance"] == (500 - 250) / 375
    assert m["gpu_limit_share_min"] == 250 / 600 and m["tensor_util_min_pct"] == 40.0
    assert m["energy_j"] == 7500.0
    assert "sm_util_min_pct" not in m
    weakest = window.weakest_gpu("gpu_power_min_w")
    assert weakest.index == 0 and weakest.label == "GPU 0 (…00000000)"
