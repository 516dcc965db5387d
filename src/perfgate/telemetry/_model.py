"""What the telemetry stage records and returns.

Times are ``time.monotonic()`` seconds, power in W, energy in J, memory in MiB, rates in MiB/s,
utilisations in percent (0-100). ``None`` always means "not measured" (unsupported by the GPU or
the source, or the read failed), never zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from perfgate import catalogue
from perfgate._stats import mean

PowerMethod = Literal["energy_counter", "energy_counter+integrated", "integrated_instant", "integrated_average"]


@dataclass(frozen=True)
class NotMeasured:
    """Telemetry is unavailable; ``reason`` says why in one sentence a person can act on."""

    reason: str


@dataclass(frozen=True)
class GpuLink:
    """How this GPU reaches another monitored GPU.

    ``common_ancestor`` is NVML's topology level name (e.g. ``"internal"``, ``"single"``,
    ``"hostbridge"``, ``"system"``); ``p2p_read`` is whether CUDA peer reads work.
    """

    peer_uuid: str
    common_ancestor: str | None
    p2p_read: bool | None


@dataclass(frozen=True)
class GpuIdentity:
    """One monitored GPU, read once at start; part of a run's hardware fingerprint.

    ``index`` is the NVML index (dcgm-exporter's ``gpu`` label for the dcgm source) at the time the
    monitor opened; ``uuid`` is what every later lookup uses. Power limits are in W.
    """

    index: int
    uuid: str
    name: str
    pci_bus_id: str = ""
    hostname: str = ""
    compute_capability: tuple[int, int] | None = None
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    memory_total_mib: float | None = None
    driver_version: str = ""
    cuda_driver_version: str = ""
    persistence_mode: bool | None = None
    ecc_enabled: bool | None = None
    mig_enabled: bool | None = None
    gpm_supported: bool | None = None
    links: tuple[GpuLink, ...] = ()

    @property
    def label(self) -> str:
        """``"GPU 2 (…1a2b3c4d)"``: index plus UUID suffix, what failure messages show."""
        host = f"{self.hostname}:" if self.hostname else ""
        return f"GPU {host}{self.index} (…{self.uuid[-8:]})"


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One sampler tick for one GPU.

    ``energy_j`` is the GPU's cumulative energy counter (J since driver load); ``throttle_ns`` holds
    NVML's cumulative clock-event counters (ns) by reason; ``throttle_mask`` the instantaneous
    clock-event reason bits when the counters are unavailable.
    """

    t_s: float
    uuid: str
    power_instant_w: float | None = None
    power_avg_w: float | None = None
    energy_j: float | None = None
    util_gpu_pct: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temperature_c: float | None = None
    memory_used_mib: float | None = None
    throttle_ns: Mapping[str, float] | None = None
    throttle_mask: int | None = None


SAMPLE_FIELDS = (
    "power_instant_w",
    "power_avg_w",
    "energy_j",
    "util_gpu_pct",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temperature_c",
    "memory_used_mib",
)
"""The numeric readings of a :class:`GpuSample` (all non-negative), as sources fill them in."""


@dataclass(frozen=True, slots=True)
class ActivitySpan:
    """Averages over ``[t0_s, t1_s]`` for one GPU (one GPM sample pair, or one DCGM profiling period).

    Keys: ``sm_util_pct``, ``sm_occupancy_pct``, ``tensor_util_pct``, ``dram_bw_util_pct``,
    ``pcie_tx_mib_s``, ``pcie_rx_mib_s``, ``nvlink_tx_mib_s``, ``nvlink_rx_mib_s``.
    """

    t0_s: float
    t1_s: float
    uuid: str
    values: Mapping[str, float | None]


@dataclass(frozen=True, slots=True)
class Event:
    """Something a window's notes should mention (a failing read, a lost GPU, an unreachable URL)."""

    t_s: float
    message: str


@dataclass(frozen=True)
class GpuWindow:
    """One GPU over one window.

    ``mean_power_w`` is energy-counter delta / covered length, unless ``power_method`` says it was
    integrated from instant (or 1-s average) power. ``integrated_power_w`` is always the integral of
    the sampled power, kept as a cross-check. Percentiles are of the sampled instant power.
    ``limit_share`` is mean power / enforced power limit (0-1). GPM/DCGM activity values are
    time-weighted averages over the window. ``throttle_s`` is seconds spent in each clock-event
    reason during the window. ``coverage_s`` is how much of the window the samples span.
    ``rejected``: what of this GPU's readings was not used, and why (readings that cannot be true,
    a source lost); ``unmeasured``: why ``mean_power_w`` is None ("" when it is measured).
    """

    index: int
    uuid: str
    name: str
    hostname: str = ""
    samples: int = 0
    coverage_s: float = 0.0
    mean_power_w: float | None = None
    energy_j: float | None = None
    power_method: PowerMethod | None = None
    integrated_power_w: float | None = None
    power_p5_w: float | None = None
    power_p50_w: float | None = None
    power_p95_w: float | None = None
    power_limit_w: float | None = None
    limit_share: float | None = None
    util_gpu_pct: float | None = None
    sm_clock_mean_mhz: float | None = None
    sm_util_pct: float | None = None
    sm_occupancy_pct: float | None = None
    tensor_util_pct: float | None = None
    dram_bw_util_pct: float | None = None
    pcie_tx_mib_s: float | None = None
    pcie_rx_mib_s: float | None = None
    nvlink_tx_mib_s: float | None = None
    nvlink_rx_mib_s: float | None = None
    throttle_s: Mapping[str, float] = field(default_factory=dict)
    temperature_max_c: float | None = None
    memory_used_max_mib: float | None = None
    rejected: tuple[str, ...] = ()
    unmeasured: str = ""

    @property
    def label(self) -> str:
        """``"GPU 2 (…1a2b3c4d)"``."""
        host = f"{self.hostname}:" if self.hostname else ""
        return f"GPU {host}{self.index} (…{self.uuid[-8:]})"


# Window metric -> the GpuWindow attribute it is computed from; the GPU with the lowest value of
# that attribute is the "weakest" one a failure message names.
_METRIC_ATTR: Mapping[str, str] = {
    "gpu_power_min_w": "mean_power_w",
    "gpu_power_mean_w": "mean_power_w",
    "gpu_power_total_w": "mean_power_w",
    "gpu_imbalance": "mean_power_w",
    "gpu_limit_share_min": "limit_share",
    "energy_j": "energy_j",
    "tensor_util_min_pct": "tensor_util_pct",
    "sm_util_min_pct": "sm_util_pct",
    "dram_util_mean_pct": "dram_bw_util_pct",
    "util_gpu_mean_pct": "util_gpu_pct",
}


# The attributes a GPU's mean power decides: GpuWindow.unmeasured says why they are None.
_POWER_ATTRS = frozenset({"mean_power_w", "energy_j", "limit_share"})


def _values(gpus: tuple[GpuWindow, ...], attr: str) -> list[float]:
    return [v for g in gpus if (v := getattr(g, attr)) is not None]


@dataclass(frozen=True)
class TelemetryWindow:
    """All monitored GPUs over ``[start_s, end_s]`` (monotonic seconds)."""

    start_s: float
    end_s: float
    source: str
    gpus: tuple[GpuWindow, ...]
    notes: tuple[str, ...] = ()

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def imbalance(self) -> float | None:
        """(max - min) / mean of per-GPU mean power; 0 for one GPU or equal GPUs."""
        powers = _values(self.gpus, "mean_power_w")
        if not powers:
            return None
        avg = mean(powers)
        return (max(powers) - min(powers)) / avg if avg > 0 else 0.0

    def metrics(self) -> dict[str, float]:
        """Flat values for the verdict engine (names in TELEMETRY_METRICS); a key is absent where
        nothing was measured."""
        out: dict[str, float] = {}
        powers = _values(self.gpus, "mean_power_w")
        if powers:
            out["gpu_power_min_w"] = min(powers)
            out["gpu_power_mean_w"] = mean(powers)
            out["gpu_power_total_w"] = sum(powers)
            out["gpu_imbalance"] = self.imbalance or 0.0
        reducers: dict[str, tuple[str, Callable[[list[float]], float]]] = {
            "gpu_limit_share_min": ("limit_share", min),
            "energy_j": ("energy_j", sum),
            "tensor_util_min_pct": ("tensor_util_pct", min),
            "sm_util_min_pct": ("sm_util_pct", min),
            "dram_util_mean_pct": ("dram_bw_util_pct", mean),
            "util_gpu_mean_pct": ("util_gpu_pct", mean),
        }
        for key, (attr, reduce) in reducers.items():
            values = _values(self.gpus, attr)
            if values:
                out[key] = reduce(values)
        return out

    @property
    def rejected(self) -> tuple[str, ...]:
        """What of the GPUs' readings was not used, and why, each said once."""
        return tuple(dict.fromkeys(m for g in self.gpus for m in g.rejected))

    def unmeasured(self, metric: str) -> str:
        """Why ``metric`` (a telemetry metric) has no value in this window, one line per GPU that lacks it."""
        attr = _METRIC_ATTR.get(metric, "energy_j")
        whys = [
            g.unmeasured if attr in _POWER_ATTRS and g.unmeasured else f"{g.label}: {attr} not reported"
            for g in self.gpus
            if getattr(g, attr) is None
        ]
        return "; ".join(whys) or f"no {metric} in this window"

    def weakest_gpu(self, metric: str) -> GpuWindow:
        """The GPU with the lowest value behind ``metric`` (a key of :meth:`metrics`).

        Raises ``KeyError`` for an unknown metric and ``ValueError`` when no GPU measured it.
        """
        attr = _METRIC_ATTR[metric]
        measured = [g for g in self.gpus if getattr(g, attr) is not None]
        if not measured:
            raise ValueError(f"no GPU measured {metric} in this window")
        return min(measured, key=lambda g: getattr(g, attr))


# Output tokens in the window per joule is the session's: it divides the window's tokens by energy_j.
TELEMETRY_METRICS = catalogue.names("telemetry")
"""Every gateable name telemetry can produce, as the catalogue declares them."""


@dataclass(frozen=True)
class Batch:
    """What one poll of a source produced; ``lost``: (uuid, why) for each GPU whose readings the
    source has given up on for the rest of the run."""

    samples: tuple[GpuSample, ...] = ()
    spans: tuple[ActivitySpan, ...] = ()
    events: tuple[Event, ...] = ()
    lost: tuple[tuple[str, str], ...] = ()
