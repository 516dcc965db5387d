"""Telemetry: per-GPU power, energy and activity, and the server's own metrics, over any window of a run.

``open_monitor(spec, gpus=..., base_url=...)`` returns a :class:`Monitor` (NVML or dcgm-exporter
source) or :class:`NotMeasured` with the reason. Start it, run the load, then summarise any
``[start_s, end_s]`` (``time.monotonic()`` seconds) with :meth:`Monitor.summarize`, or use
Zeus-style named windows (``begin_window`` / ``end_window``). ``open_server_monitor(base_url,
path)`` scrapes the server's Prometheus metrics (SGLang, vLLM) the same way; its
:meth:`ServerMonitor.summarize` gives a :class:`ServerWindow`. ``open_host_sampler(pid)`` reads the
CPU of a launched server's processes at the edges of a window (:class:`HostCpuWindow`).
"""

from perfgate.gpu import NvmlUnavailable
from perfgate.telemetry._dcgm import DcgmReading, DcgmSource, parse_dcgm_text
from perfgate.telemetry._host import (
    GPU_BUSY_PCT,
    HostCpuSampler,
    HostCpuWindow,
    ProcessCpu,
    TreeReading,
    cpu_governors,
    host_bound_finding,
    open_host_sampler,
    process_affinity,
)
from perfgate.telemetry._model import (
    TELEMETRY_METRICS,
    GpuIdentity,
    GpuLink,
    GpuSample,
    GpuWindow,
    NotMeasured,
    TelemetryWindow,
)
from perfgate.telemetry._monitor import Monitor, open_monitor
from perfgate.telemetry._nvml_source import NvmlSource
from perfgate.telemetry._prometheus import (
    SERVER_METRICS,
    ServerMonitor,
    ServerReading,
    ServerWindow,
    open_server_monitor,
    parse_server_metrics,
)

__all__ = [
    "GPU_BUSY_PCT",
    "SERVER_METRICS",
    "TELEMETRY_METRICS",
    "DcgmReading",
    "DcgmSource",
    "GpuIdentity",
    "GpuLink",
    "GpuSample",
    "GpuWindow",
    "HostCpuSampler",
    "HostCpuWindow",
    "Monitor",
    "NotMeasured",
    "NvmlSource",
    "NvmlUnavailable",
    "ProcessCpu",
    "ServerMonitor",
    "ServerReading",
    "ServerWindow",
    "TelemetryWindow",
    "TreeReading",
    "cpu_governors",
    "host_bound_finding",
    "open_host_sampler",
    "open_monitor",
    "open_server_monitor",
    "parse_dcgm_text",
    "parse_server_metrics",
    "process_affinity",
]
