"""GPU telemetry: per-GPU power, energy and activity over any window of a run.

``open_monitor(spec, gpus=..., base_url=...)`` returns a :class:`Monitor` (NVML or dcgm-exporter
source) or :class:`NotMeasured` with the reason. Start it, run the load, then summarise any
``[start_s, end_s]`` (``time.monotonic()`` seconds) with :meth:`Monitor.summarize`, or use
Zeus-style named windows (``begin_window`` / ``end_window``).
"""

from perfgate.gpu import NvmlUnavailable
from perfgate.telemetry._dcgm import DcgmReading, DcgmSource, parse_dcgm_text
from perfgate.telemetry._model import (
    GpuIdentity,
    GpuLink,
    GpuSample,
    GpuWindow,
    NotMeasured,
    TELEMETRY_METRICS,
    TelemetryWindow,
)
from perfgate.telemetry._monitor import Monitor, open_monitor
from perfgate.telemetry._nvml import NvmlSource

__all__ = [
    "DcgmReading",
    "DcgmSource",
    "GpuIdentity",
    "GpuLink",
    "GpuSample",
    "GpuWindow",
    "Monitor",
    "NotMeasured",
    "NvmlSource",
    "NvmlUnavailable",
    "TELEMETRY_METRICS",
    "TelemetryWindow",
    "open_monitor",
    "parse_dcgm_text",
]
