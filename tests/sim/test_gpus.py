from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.sim._gpus import BUSY_TAU_S, PowerModel, make_gpus, read_gpus


def test_power_follows_busy_time_and_energy_is_its_exact_integral() -> None:
    model = PowerModel(idle_w=87.0, full_w=250.0, now_s=100.0)
    gpus = make_gpus(2, "GPU", 600.0, idle_gpus=1, seed=0)
    start = read_gpus(gpus, model, 100.0)
    assert [r.power_w for r in start] == [87.0, 87.0]
    model.set_busy(True, 100.0)
    end = read_gpus(gpus, model, 102.0)
    busy_integral_s = 2.0 - BUSY_TAU_S * (1.0 - math.exp(-2.0 / BUSY_TAU_S))
    assert end[0].energy_mj - start[0].energy_mj == pytest.approx((87.0 * 2 + 163.0 * busy_integral_s) * 1e3)
    assert end[0].power_w == pytest.approx(87.0 + 163.0 * (1 - math.exp(-2.0)))
    assert end[1].power_w == 87.0  # the idle GPU
    assert end[1].energy_mj - start[1].energy_mj == pytest.approx(87.0 * 2 * 1e3)


@given(st.lists(st.tuples(st.floats(0.001, 5.0), st.booleans()), min_size=1, max_size=30))
def test_mean_power_from_energy_stays_between_idle_and_full(segments: list[tuple[float, bool]]) -> None:
    model = PowerModel(idle_w=87.0, full_w=250.0, now_s=0.0)
    gpus = make_gpus(1, "GPU", 600.0, idle_gpus=0, seed=0)
    e0 = read_gpus(gpus, model, 0.0)[0].energy_mj
    t = 0.0
    for duration, busy in segments:
        model.set_busy(busy, t)
        t += duration
    reading = read_gpus(gpus, model, t)[0]
    mean_w = (reading.energy_mj - e0) / 1e3 / t
    assert 87.0 - 1e-6 <= mean_w <= 250.0 + 1e-6
    assert 87.0 - 1e-9 <= reading.power_w <= 250.0 + 1e-9


def test_gpu_identities_are_deterministic_and_unique() -> None:
    a = make_gpus(8, "X", 600.0, 0, seed=1)
    assert a == make_gpus(8, "X", 600.0, 0, seed=1)
    assert len({g.uuid for g in a}) == len({g.pci_bus_id for g in a}) == 8
