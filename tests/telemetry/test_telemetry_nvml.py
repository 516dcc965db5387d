"""The NVML source and the monitor, driven by a fake pynvml and a manual clock."""

from __future__ import annotations

import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.errors import TelemetryError
from perfgate.profile import TelemetrySpec
from perfgate.telemetry import Monitor, NotMeasured, NvmlSource, open_monitor
from tests.fake_nvml import FakeNvml, make, uuids


def run(monitor: Monitor, clock, seconds: float, dt: float = 0.1, each=None) -> None:
    for i in range(round(seconds / dt)):
        clock.advance(dt)
        if each is not None:
            each(i)
        monitor.sample_now()


def test_gpus_resolve_by_index_uuid_and_pci_once_with_identity_and_topology():
    _, nv = make(3)
    source = NvmlSource(nv, [2, uuids(3)[0], "00000000:19:00.0", 0])
    idents = source.identities()
    assert [i.index for i in idents] == [2, 0, 1]
    first = idents[1]
    assert first.uuid == uuids(3)[0] and first.name == "Fake H200" and first.pci_bus_id == "00000000:18:00.0"
    assert first.compute_capability == (9, 0) and first.power_limit_w == 700.0
    assert first.cuda_driver_version == "13.0" and first.ecc_enabled and first.mig_enabled is None
    links = {link.peer_uuid: link for link in first.links}
    assert links[uuids(3)[1]].p2p_read is True and links[uuids(3)[2]].p2p_read is False
    assert links[uuids(3)[2]].common_ancestor == "system"
    source.close()
    assert nv.initialised == 0


def test_unknown_gpu_is_a_telemetry_error_listing_visible_gpus():
    _, nv = make(2)
    with pytest.raises(TelemetryError, match=r"GPU 'GPU-nope'.*visible GPUs: 0=GPU-0.*1=GPU-"):
        NvmlSource(nv, ["GPU-nope"])
    assert nv.initialised == 0


def test_windows_give_true_power_energy_and_gpm_activity():
    clock, nv = make(2)
    # Energy read once a second here, so every whole-second sub-window is bracketed by readings.
    monitor = Monitor(NvmlSource(nv, [0, 1]), clock=clock, counter_period_s=1.0)
    monitor.mark()
    nv.set_tensor(0, 80.0)
    start = monitor.begin_window("load")
    run(monitor, clock, 3.0, each=lambda i: nv.set_power(1, 500.0) if i == 9 else None)
    window = monitor.end_window("load")
    g0, g1 = window.gpus
    assert math.isclose(g0.mean_power_w, 300.0) and g0.power_method == "energy_counter"
    assert math.isclose(g1.energy_j, 300.0 * 1.0 + 500.0 * 2.0, rel_tol=1e-6)
    assert math.isclose(g0.tensor_util_pct, 80.0) and math.isclose(g1.tensor_util_pct, 0.0)
    assert g0.nvlink_tx_mib_s is None and g0.pcie_tx_mib_s == 12.5
    assert g0.util_gpu_pct == 100.0 and g0.temperature_max_c == 40.0
    assert window.start_s == start and window.source == "nvml"
    # Instant power every tick, the costly energy counter only at marks and every counter_period_s.
    assert nv.calls["nvmlDeviceGetFieldValues"] > 5 * nv.calls["nvmlDeviceGetTotalEnergyConsumption"]
    # Post hoc: any sub-window of the recorded data, e.g. the part after the step.
    late = monitor.summarize(start + 1.0, start + 3.0)
    assert math.isclose(late.gpus[1].mean_power_w, 500.0, rel_tol=1e-6)
    tl = monitor.timeline(start, start + 1.0)
    assert tl["gpus"][0]["power_w"][0] == 300.0 and len(tl["gpus"]) == 2
    monitor.stop()
    assert nv.live_gpm_samples == 0 and nv.initialised == 0


def test_failing_field_counter_reset_and_lost_gpu_are_notes_not_crashes():
    clock, nv = make(3)
    nv.gpus[0].fail["nvmlDeviceGetTemperature"] = nv.NVML_ERROR_UNKNOWN
    nv.gpus[2].unsupported_fields.add(nv.NVML_FI_DEV_POWER_INSTANT)
    nv.gpus[2].gpm = False
    monitor = Monitor(NvmlSource(nv, [0, 1, 2]), clock=clock, counter_period_s=1.0)
    monitor.mark()
    start = clock.now

    def events(i: int) -> None:
        if i == 15:
            nv.reset_energy(1)
        if i == 25:
            nv.gpus[0].lost = True

    run(monitor, clock, 4.0, each=events)
    monitor.mark()
    window = monitor.summarize(start, clock.now)
    notes = "\n".join(window.notes)
    g0, g1, g2 = window.gpus
    assert g0.temperature_max_c is None and "temperature unreadable (NVML error 999)" in notes
    assert "GPU 0 (…abcd0000): GPU lost (NVML error 15); no samples after this" in notes
    assert math.isclose(g0.mean_power_w, 300.0) and g0.coverage_s < 4.0
    assert g1.power_method == "energy_counter+integrated" and "GPU 1 (…abcd0001): energy counter reset" in notes
    assert math.isclose(g1.mean_power_w, 300.0, rel_tol=1e-6)
    # No instant-power field: the 1-s average fills in, energy still from the counter.
    assert g2.power_method == "energy_counter" and g2.power_p50_w == 300.0 and g2.tensor_util_pct is None
    assert "field power_instant unreadable" in notes


def test_sampler_thread_samples_until_stopped():
    _, nv = make(1)
    monitor = Monitor(NvmlSource(nv, [0]), interval_s=0.01)
    polled = threading.Event()
    original = nv.nvmlDeviceGetFieldValues

    def spy(h, ids):
        if nv.calls.get("nvmlDeviceGetFieldValues", 0) >= 5:
            polled.set()
        return original(h, ids)

    nv.nvmlDeviceGetFieldValues = spy
    monitor.start()
    assert polled.wait(timeout=30)
    monitor.stop()
    count = nv.calls["nvmlDeviceGetFieldValues"]
    assert count >= 5 and monitor.sampler_cpu_pct is not None
    assert nv.initialised == 0


def test_open_monitor_choices(monkeypatch):
    clock, nv = make(1)
    assert isinstance(open_monitor(TelemetrySpec(source="none"), gpus=[], base_url=""), NotMeasured)
    monitor = open_monitor(TelemetrySpec(source="auto"), gpus=[0], base_url="", nvml=nv)
    assert isinstance(monitor, Monitor) and monitor.source == "nvml"
    monitor.stop()
    with pytest.raises(TelemetryError, match="GPU 7"):
        open_monitor(TelemetrySpec(source="nvml"), gpus=[7], base_url="", nvml=nv)
    auto = open_monitor(TelemetrySpec(source="auto"), gpus=[7], base_url="", nvml=nv)
    assert isinstance(auto, NotMeasured) and "GPU 7" in auto.reason
    broken = FakeNvml(clock, [], init_error=FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    off = open_monitor(TelemetrySpec(source="nvml"), gpus=[], base_url="", nvml=broken)
    assert isinstance(off, NotMeasured) and off.reason.startswith("NVML not available: nvmlInit failed (NVML error 12)")


def test_auto_without_gpu_on_this_machine_is_not_measured():
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML")
    except pynvml.NVMLError:
        pass
    result = open_monitor(TelemetrySpec(source="auto"), gpus=[], base_url="")
    assert isinstance(result, NotMeasured)
    assert result.reason.startswith("NVML not available: ") and "dcgm_endpoints" in result.reason


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(60, 750), min_size=12, max_size=40))
def test_counter_read_at_the_edges_gives_exact_energy_between_them(powers):
    clock, nv = make(1)
    monitor = Monitor(NvmlSource(nv, ["0"]), clock=clock)
    monitor.mark()
    start = clock.now
    run(monitor, clock, len(powers) * 0.1, each=lambda i: nv.set_power(0, powers[i]))
    monitor.mark()
    # The fake's power changes right after each tick's clock step: 300 W for the first tick,
    # then powers[i] until the next one; the last value holds for no time.
    truth = 300.0 * 0.1 + sum(p * 0.1 for p in powers[:-1])
    (gpu,) = monitor.summarize(start, clock.now).gpus
    # The counter is whole mJ.
    assert math.isclose(gpu.energy_j, truth, abs_tol=0.01)
    # Instant power is reported in whole mW, as NVML does: the percentiles are within 1 mW of the set powers.
    assert min([*powers, 300.0]) - 1e-3 <= gpu.power_p5_w <= gpu.power_p95_w <= max([*powers, 300.0]) + 1e-3
    monitor.stop()


def test_window_misuse_is_a_clear_error():
    clock, nv = make(1)
    with Monitor(NvmlSource(nv, [0]), clock=clock, interval_s=0.05) as monitor:
        monitor.begin_window("a")
        with pytest.raises(ValueError, match="'a' is already open"):
            monitor.begin_window("a")
        with pytest.raises(ValueError, match="'b' was never begun"):
            monitor.end_window("b")
        with pytest.raises(ValueError, match="not after its start"):
            monitor.summarize(5.0, 5.0)
    with pytest.raises(TelemetryError, match="interval_s must be > 0"):
        Monitor(NvmlSource(nv, [0]), interval_s=0)
    assert nv.initialised == 0


def test_counters_are_read_at_marks_and_every_counter_period_only():
    clock, nv = make(1)
    monitor = Monitor(NvmlSource(nv, [0]), clock=clock, counter_period_s=30.0)
    monitor.mark()
    start = clock.now
    reads0 = nv.calls["nvmlDeviceGetTotalEnergyConsumption"]
    # 300 W for 2 s, then 600 W for 2 s: between the two marks the counter is not read at all.
    run(monitor, clock, 4.0, each=lambda i: nv.set_power(0, 600.0) if i == 19 else None)
    assert nv.calls["nvmlDeviceGetTotalEnergyConsumption"] == reads0
    monitor.mark()
    (whole,) = monitor.summarize(start, clock.now).gpus
    assert math.isclose(whole.energy_j, 300.0 * 2 + 600.0 * 2, abs_tol=0.01)
    # A sub-window follows the 10 Hz instant-power trace between the two exact readings.
    (late,) = monitor.summarize(start + 2.5, start + 3.5).gpus
    assert late.power_method == "energy_counter" and math.isclose(late.mean_power_w, 600.0, rel_tol=0.01)
    # The period still applies while nothing marks: a counter reset can cost at most that long.
    run(monitor, clock, 31.0)
    assert nv.calls["nvmlDeviceGetTotalEnergyConsumption"] == reads0 + 2
    monitor.stop()
