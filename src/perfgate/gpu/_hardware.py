"""The hardware a measurement belongs to: the part of a baseline's fingerprint that is metal."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Hardware:
    """GPU model and count, enforced per-GPU power limit in W (None: not readable), driver version
    ("" for none); ``cpu`` names the processor where no GPU serves (see :func:`cpu_description`)."""

    gpu_model: str
    gpu_count: int
    power_limit_w: float | None
    driver_version: str
    cpu: str = ""


def cpu_description() -> str:
    """The host's processor model and the CPUs this process may use, e.g. "AMD EPYC 9654 x2".

    Part of the fingerprint where no GPU serves (a CPU-only engine's numbers belong to the CPU).
    """
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware", "cpu model") and value.strip():
                model = value.strip()
                break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    try:
        count = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        count = os.cpu_count() or 0
    return f"{' '.join(model.split())} x{count}"


def host_without_gpus() -> Hardware:
    """The hardware of a run no GPU telemetry describes: its processor."""
    return Hardware(gpu_model="", gpu_count=0, power_limit_w=None, driver_version="", cpu=cpu_description())
