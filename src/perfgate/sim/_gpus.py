"""Simulated GPUs: identity, a power model driven by engine busy time, and DCGM text.

Power = idle + (full - idle) * busy, where busy is the share of recent wall time the engine
spent in steps, smoothed exponentially over ``BUSY_TAU_S`` (NVML's power reading is a 1-s
average). Energy is the exact integral of that power, so a client that diffs the energy
counter gets the modelled mean power to float precision.
"""

from __future__ import annotations

import math
import random
import socket
import uuid
from dataclasses import dataclass

BUSY_TAU_S = 1.0
DRIVER_VERSION = "580.95.05"
FB_TOTAL_MIB = 97_887
# Per-GPU spread of the dynamic power (boards are never identical).
_SPREAD = (0.0, 0.012, -0.008, 0.02, -0.015, 0.005, -0.02, 0.01)
_BUS_IDS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


@dataclass(frozen=True)
class SimGpu:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    power_limit_w: float
    idle: bool  # stays at idle power whatever the engine does

    def as_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "power_limit_w": self.power_limit_w,
            "idle": self.idle,
        }


def make_gpus(count: int, name: str, power_limit_w: float, idle_gpus: int, seed: int) -> tuple[SimGpu, ...]:
    """Deterministic identities; the last ``idle_gpus`` GPUs are the idle ones."""
    rng = random.Random(f"perfgate-sim-gpus-{seed}")
    gpus = []
    for i in range(count):
        bus = _BUS_IDS[i] if i < len(_BUS_IDS) else 0x100 + i
        gpus.append(
            SimGpu(
                index=i,
                name=name,
                uuid=f"GPU-{uuid.UUID(int=rng.getrandbits(128), version=4)}",
                pci_bus_id=f"00000000:{bus:02X}:00.0",
                power_limit_w=power_limit_w,
                idle=i >= count - idle_gpus,
            )
        )
    return tuple(gpus)


class PowerModel:
    """Busy fraction (EMA of the engine's busy signal) and its exact energy integral."""

    def __init__(self, idle_w: float, full_w: float, now_s: float) -> None:
        self.idle_w = idle_w
        self.full_w = full_w
        self._t = now_s
        self._busy_in = 0.0
        self._ema = 0.0
        self._busy_integral_s = 0.0  # integral of the EMA over time
        self._elapsed_s = 0.0

    def _advance(self, now_s: float) -> None:
        dt = now_s - self._t
        if dt <= 0:
            return
        decay = math.exp(-dt / BUSY_TAU_S)
        u = self._busy_in
        self._busy_integral_s += u * dt + (self._ema - u) * BUSY_TAU_S * (1.0 - decay)
        self._ema = u + (self._ema - u) * decay
        self._elapsed_s += dt
        self._t = now_s

    def set_busy(self, busy: bool, now_s: float) -> None:
        self._advance(now_s)
        self._busy_in = 1.0 if busy else 0.0

    def read(self, now_s: float) -> tuple[float, float, float]:
        """(busy fraction 0-1, seconds elapsed, integral of busy over them in seconds)."""
        self._advance(now_s)
        return self._ema, self._elapsed_s, self._busy_integral_s


@dataclass(frozen=True)
class GpuReading:
    power_w: float
    energy_mj: float
    busy: float


def read_gpus(gpus: tuple[SimGpu, ...], model: PowerModel, now_s: float) -> list[GpuReading]:
    busy, elapsed_s, busy_s = model.read(now_s)
    dyn_w = model.full_w - model.idle_w
    out = []
    for gpu in gpus:
        # The counter starts at an arbitrary "since driver load" value, like NVML's.
        base_mj = 3.6e9 + 1.7e8 * gpu.index
        if gpu.idle:
            out.append(GpuReading(model.idle_w, base_mj + model.idle_w * elapsed_s * 1e3, 0.0))
            continue
        scale = dyn_w * (1.0 + _SPREAD[gpu.index % len(_SPREAD)])
        energy_j = model.idle_w * elapsed_s + scale * busy_s
        out.append(GpuReading(model.idle_w + scale * busy, base_mj + energy_j * 1e3, busy))
    return out


def _labels(gpu: SimGpu, new_names: bool, hostname: str) -> str:
    host_key = "hostname" if new_names else "Hostname"
    driver_key = "DCGM_FI_SYSTEM_DRIVER_VERSION" if new_names else "DCGM_FI_DRIVER_VERSION"
    return (
        f'gpu="{gpu.index}",UUID="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",'
        f'device="nvidia{gpu.index}",modelName="{gpu.name}",{host_key}="{hostname}",'
        f'{driver_key}="{DRIVER_VERSION}"'
    )


def render_dcgm(gpus: tuple[SimGpu, ...], model: PowerModel, now_s: float, new_names: bool) -> str:
    """dcgm-exporter's text format; ``new_names`` uses exporter 4.9's renamed metrics.

    The 4.9 generation renames the metrics listed in telemetry.md (ratios instead of
    percent, explicit units); the others keep their classic names here.
    """
    hostname = socket.gethostname()
    readings = read_gpus(gpus, model, now_s)
    labels = [_labels(g, new_names, hostname) for g in gpus]
    series: list[tuple[str, str, str, list[float]]] = []

    def add(name: str, kind: str, help_text: str, values: list[float]) -> None:
        series.append((name, kind, help_text, values))

    busy = [r.busy for r in readings]
    power = [r.power_w for r in readings]
    sm_clock = [210.0 + 2220.0 * b for b in busy]
    temp = [34.0 + 38.0 * b for b in busy]
    # Weights and KV cache are resident on every GPU of the TP group, idle ones included.
    fb_used = [88_412.0] * len(gpus)
    if new_names:
        add("DCGM_FI_DEV_BOARD_POWER_WATTS", "gauge", "Board power draw (in W).", power)
        add(
            "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
            "gauge",
            "Enforced power limit (in W).",
            [g.power_limit_w for g in gpus],
        )
        add("DCGM_FI_DEV_GPU_UTIL_RATIO", "gauge", "GPU utilization (ratio).", busy)
        add("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "gauge", "GPU temperature (in C).", temp)
        add("DCGM_FI_PROF_SM_UTIL_RATIO", "gauge", "SM activity (ratio).", [0.97 * b for b in busy])
        add("DCGM_FI_PROF_TENSOR_UTIL_RATIO", "gauge", "Tensor pipe activity (ratio).", [0.21 * b for b in busy])
        add("DCGM_FI_PROF_DRAM_UTIL_RATIO", "gauge", "DRAM activity (ratio).", [0.38 * b for b in busy])
    else:
        add("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", power)
        add("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", [round(100.0 * b) for b in busy])
        add("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", [round(t) for t in temp])
        add(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "gauge",
            "Ratio of time the graphics engine is active.",
            [0.98 * b for b in busy],
        )
        add(
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "gauge",
            "Ratio of cycles the tensor (HMMA) pipe is active.",
            [0.21 * b for b in busy],
        )
        add(
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "gauge",
            "Ratio of cycles the device memory interface is active.",
            [0.38 * b for b in busy],
        )
    add(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        [r.energy_mj for r in readings],
    )
    add("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", [round(c) for c in sm_clock])
    add("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", [14_001.0] * len(gpus))
    add("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", fb_used)
    add("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", [FB_TOTAL_MIB - u for u in fb_used])
    lines = []
    for name, kind, help_text, values in series:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for label, value in zip(labels, values, strict=True):
            lines.append(f"{name}{{{label}}} {_fmt(value)}")
    return "\n".join(lines) + "\n"


def _fmt(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6f}"
