"""GPU identity and the NVML binding: the one place that loads NVML and says which GPU a name means.

A profile names GPUs by NVML index (``0``, ``"0"``), UUID (``"GPU-..."``, ``"MIG-..."``) or PCI
bus id (``"00000000:18:00.0"``). :func:`resolve_gpus` turns each into a :class:`GpuId`, and
everything after that (host locks, the holders check, the release wait, telemetry, doctor)
addresses the GPU by its UUID, so two names of one GPU are one GPU.

Why a package of its own, beside ``errors.py``: server/ and telemetry/ both need it and neither
may import the other (they are siblings in the data flow), and ``doctor`` needs it without a
server or a monitor. It imports nothing of perfgate but ``errors``, so every stage may import it
without an upward import. The binding is a parameter wherever NVML is used (``nvml``), so tests
drive it with a fake; :func:`load_nvml` is the only ``import pynvml`` in perfgate.

Usage::

    with nvml_session() as nvml:            # NvmlUnavailable: "NVML not available: <reason>"
        gpus = resolve_gpus(nvml, ["0", "GPU-8f6c..."])   # UnknownGpu names the GPUs that exist
        handle = device_handle(nvml, gpus[0])
"""

from perfgate.gpu._hardware import Hardware, cpu_description, host_without_gpus
from perfgate.gpu._identity import (
    GpuId,
    UnknownGpu,
    all_gpus,
    device_handle,
    p2p_read_status,
    resolve_gpu,
    resolve_gpus,
)
from perfgate.gpu._nvml_binding import NvmlUnavailable, init_nvml, load_nvml, nvml_session, query

__all__ = [
    "GpuId",
    "Hardware",
    "NvmlUnavailable",
    "UnknownGpu",
    "all_gpus",
    "cpu_description",
    "device_handle",
    "host_without_gpus",
    "init_nvml",
    "load_nvml",
    "nvml_session",
    "p2p_read_status",
    "query",
    "resolve_gpu",
    "resolve_gpus",
]
