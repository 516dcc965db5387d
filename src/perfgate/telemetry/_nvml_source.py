"""The NVML source: per-GPU power, energy, clocks and GPM activity through nvidia-ml-py.

The binding is a parameter (``nvml``), so tests drive this code with a fake module; loading it and
resolving GPU names is :mod:`perfgate.gpu`'s. Slow queries (identity, limits, topology) happen once
in ``__init__``; a poll makes a handful of cheap calls per GPU, drops calls the GPU answered with
"not supported", and never raises for a single failing read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from perfgate import gpu
from perfgate.errors import TelemetryError
from perfgate.telemetry._model import ActivitySpan, Batch, Event, GpuIdentity, GpuLink, GpuSample

# GPM metric ids by the name GpuWindow uses; the values are binding attribute names.
_GPM_METRICS = {
    "sm_util_pct": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_pct": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_util_pct": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_bw_util_pct": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "pcie_tx_mib_s": "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
    "pcie_rx_mib_s": "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
    "nvlink_tx_mib_s": "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC",
    "nvlink_rx_mib_s": "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC",
}

# Cumulative clock-event counters (ns), by the reason names _window.THROTTLE_BITS uses.
_THROTTLE_FIELDS = {
    "sw_power_cap": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP",
    "sync_boost": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST",
    "sw_thermal": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN",
    "hw_thermal": "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN",
    "hw_power_brake": "NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN",
}

# Read every tick. On the H200s here a field read of instant power cost ~3 us of CPU, while the
# energy counter cost 2.9-3.8 ms and the clock-event counters 0.4-0.8 ms (2026-11-29/30): both
# cumulative counters are read only when asked (window edges, every counter_period_s), and
# _window spreads each counter step over the 10 Hz instant-power shape.
_FAST_FIELDS = {"power_instant": "NVML_FI_DEV_POWER_INSTANT"}

_TOPOLOGY = {0: "internal", 10: "single", 20: "multiple", 30: "hostbridge", 40: "node", 50: "system"}

# GPM needs its two samples more than 100 ms apart.
_GPM_MIN_GAP_S = 0.1


class _GpuLost(Exception):
    pass


@dataclass
class _Gpu:
    handle: Any
    ident: GpuIdentity
    # (key, NVML field id) read every tick / only on full polls; unsupported ones are dropped.
    fast_fields: list[tuple[str, int]]
    slow_fields: list[tuple[str, int]]
    gpm_prev: tuple[Any, float] | None = None
    lost: bool = False
    # Reads the GPU answered with "not supported" / "function not found": never asked again.
    skip: set[str] = field(default_factory=set)


class NvmlSource:
    """Samples the given GPUs through ``nvml`` (the ``pynvml`` module, or a fake with its API).

    ``gpus`` are NVML indices, UUIDs (``"GPU-..."``) or PCI bus ids; each is resolved once to a
    UUID-bearing identity (:func:`perfgate.gpu.resolve_gpus`). An empty ``gpus`` monitors every
    GPU NVML sees. Raises :class:`perfgate.gpu.NvmlUnavailable` when NVML does not work here, and
    :class:`~perfgate.errors.TelemetryError` when a requested GPU does not exist.
    """

    name = "nvml"

    def __init__(self, nvml: Any, gpus: Sequence[int | str]) -> None:
        self._nvml = nvml
        self._seen: set[tuple[str, str, str]] = set()
        gpu.init_nvml(nvml)
        try:
            self._gpus = [self._describe(g) for g in self._resolve(gpus)]
            self._link_topology()
        except BaseException:
            nvml.nvmlShutdown()
            raise

    # -- once, at open -------------------------------------------------------------------

    def _resolve(self, gpus: Sequence[int | str]) -> list[gpu.GpuId]:
        try:
            return gpu.resolve_gpus(self._nvml, gpus)
        except gpu.UnknownGpu as err:
            raise TelemetryError(str(err)) from err

    def _once(self, fn: Callable[..., Any], *args: Any) -> Any:
        return gpu.query(self._nvml, fn, *args)

    def _describe(self, gpu_id: gpu.GpuId) -> _Gpu:
        nvml, once = self._nvml, self._once
        handle = gpu.device_handle(nvml, gpu_id)
        cc = once(nvml.nvmlDeviceGetCudaComputeCapability, handle)
        limit_mw = once(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        default_mw = once(nvml.nvmlDeviceGetPowerManagementDefaultLimit, handle)
        mem = once(nvml.nvmlDeviceGetMemoryInfo, handle)
        ecc = once(nvml.nvmlDeviceGetEccMode, handle)
        mig = once(nvml.nvmlDeviceGetMigMode, handle)
        persistence = once(nvml.nvmlDeviceGetPersistenceMode, handle)
        cuda = once(nvml.nvmlSystemGetCudaDriverVersion)
        gpm = once(nvml.nvmlGpmQueryDeviceSupport, handle)
        ident = GpuIdentity(
            index=gpu_id.index,
            uuid=gpu_id.uuid,
            name=gpu_id.name or "?",
            pci_bus_id=gpu_id.pci_bus_id,
            compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
            power_limit_w=limit_mw / 1000 if limit_mw is not None else None,
            default_power_limit_w=default_mw / 1000 if default_mw is not None else None,
            memory_total_mib=mem.total / 2**20 if mem is not None else None,
            driver_version=once(nvml.nvmlSystemGetDriverVersion) or "",
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else "",
            persistence_mode=bool(persistence) if persistence is not None else None,
            ecc_enabled=bool(ecc[0]) if ecc is not None else None,
            mig_enabled=bool(mig[0]) if mig is not None else None,
            gpm_supported=bool(gpm.isSupportedDevice) if gpm is not None else False,
        )

        def ids(names: dict[str, str]) -> list[tuple[str, int]]:
            return [(key, getattr(nvml, attr)) for key, attr in names.items() if hasattr(nvml, attr)]

        return _Gpu(handle=handle, ident=ident, fast_fields=ids(_FAST_FIELDS), slow_fields=ids(_THROTTLE_FIELDS))

    def _link_topology(self) -> None:
        nvml, once = self._nvml, self._once
        for g in self._gpus:
            links = []
            for other in self._gpus:
                if other is g:
                    continue
                level = once(nvml.nvmlDeviceGetTopologyCommonAncestor, g.handle, other.handle)
                p2p = gpu.p2p_read_status(nvml, g.handle, other.handle)
                links.append(
                    GpuLink(
                        peer_uuid=other.ident.uuid,
                        common_ancestor=_TOPOLOGY.get(level, str(level)) if level is not None else None,
                        p2p_read=(p2p == nvml.NVML_P2P_STATUS_OK) if p2p is not None else None,
                    )
                )
            g.ident = replace(g.ident, links=tuple(links))

    def origin(self, uuid: str) -> str:
        """Where ``uuid``'s readings come from, for messages."""
        return "NVML"

    def identities(self) -> list[GpuIdentity]:
        return [g.ident for g in self._gpus]

    # -- every tick ----------------------------------------------------------------------

    def poll(self, clock: Callable[[], float], *, full: bool, counters: bool) -> Batch:
        """Read every live GPU once: instant power always; with ``full`` also utilization, clocks,
        temperature, memory and a GPM sample (closing a span); with ``counters`` the energy and
        clock-event counters. Only instant power is cheap enough for 10 Hz (see _FAST_FIELDS);
        the counters are cumulative and lose nothing between reads."""
        samples: list[GpuSample] = []
        spans: list[ActivitySpan] = []
        events: list[Event] = []
        for g in self._gpus:
            if g.lost:
                continue
            try:
                samples.append(self._sample(g, clock, events, full, counters))
                if full and g.ident.gpm_supported:
                    span = self._gpm(g, clock, events)
                    if span is not None:
                        spans.append(span)
            except _GpuLost as lost:
                g.lost = True
                events.append(Event(clock(), f"{g.ident.label}: GPU lost ({lost}); no samples after this"))
        return Batch(tuple(samples), tuple(spans), tuple(events))

    def _read(
        self, g: _Gpu, what: str, events: list[Event], clock: Callable[[], float], fn: Callable[..., Any], *args: Any
    ) -> Any:
        if what in g.skip:
            return None
        nvml = self._nvml
        try:
            return fn(g.handle, *args)
        except nvml.NVMLError as err:
            code = getattr(err, "value", None)
            if code == nvml.NVML_ERROR_GPU_IS_LOST:
                raise _GpuLost(str(err)) from err
            if code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                g.skip.add(what)
            self._note(g, what, str(err), clock(), events)
            return None

    def _note(self, g: _Gpu, what: str, err: str, t: float, events: list[Event]) -> None:
        # One event per distinct failure, not one per tick.
        key = (g.ident.uuid, what, err)
        if key not in self._seen:
            self._seen.add(key)
            events.append(Event(t, f"{g.ident.label}: {what} unreadable ({err}) at t={t:.3f}s"))

    def _sample(
        self, g: _Gpu, clock: Callable[[], float], events: list[Event], full: bool, counters: bool
    ) -> GpuSample:
        nvml = self._nvml
        fast = self._fields(g, g.fast_fields, clock, events)
        energy_mj = None
        throttle = self._fields(g, g.slow_fields, clock, events) if counters else {}
        if counters:
            energy_mj = self._read(g, "energy counter", events, clock, nvml.nvmlDeviceGetTotalEnergyConsumption)
        t = clock()
        instant_mw = fast.get("power_instant")
        avg_mw = None
        if not g.fast_fields:
            # nvmlDeviceGetPowerUsage is a 1-s average on Ampere and newer: only a fallback.
            avg_mw = self._read(g, "power usage", events, clock, nvml.nvmlDeviceGetPowerUsage)
        sample = GpuSample(
            t_s=t,
            uuid=g.ident.uuid,
            power_instant_w=instant_mw / 1000 if instant_mw is not None else None,
            power_avg_w=avg_mw / 1000 if avg_mw is not None else None,
            energy_j=energy_mj / 1000 if energy_mj is not None else None,
            throttle_ns=throttle or None,
        )
        if not full:
            return sample
        util = self._read(g, "utilization", events, clock, nvml.nvmlDeviceGetUtilizationRates)
        sm = self._read(g, "SM clock", events, clock, nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)
        mem = self._read(g, "memory clock", events, clock, nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM)
        temp = self._read(g, "temperature", events, clock, nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)
        meminfo = self._read(g, "memory info", events, clock, nvml.nvmlDeviceGetMemoryInfo)
        mask = None
        if not g.slow_fields:
            mask = self._read(g, "clock event reasons", events, clock, nvml.nvmlDeviceGetCurrentClocksEventReasons)
        return replace(
            sample,
            util_gpu_pct=float(util.gpu) if util is not None else None,
            sm_clock_mhz=float(sm) if sm is not None else None,
            mem_clock_mhz=float(mem) if mem is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            memory_used_mib=meminfo.used / 2**20 if meminfo is not None else None,
            throttle_mask=int(mask) if mask is not None else None,
        )

    def _fields(
        self, g: _Gpu, fields: list[tuple[str, int]], clock: Callable[[], float], events: list[Event]
    ) -> dict[str, float]:
        """Read ``fields`` in one call; drops (from ``fields``) those the GPU does not support."""
        if not fields:
            return {}
        nvml = self._nvml
        values = self._read(g, "field values", events, clock, nvml.nvmlDeviceGetFieldValues, [fid for _, fid in fields])
        if values is None:
            return {}
        out: dict[str, float] = {}
        dropped = []
        for (key, fid), value in zip(fields, values):
            if value.nvmlReturn != nvml.NVML_SUCCESS:
                if value.nvmlReturn in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_INVALID_ARGUMENT):
                    dropped.append((key, fid))
                self._note(g, f"field {key}", f"NVML return {value.nvmlReturn}", clock(), events)
                continue
            out[key] = _field_value(nvml, value)
        for item in dropped:
            fields.remove(item)
        return out

    def _gpm(self, g: _Gpu, clock: Callable[[], float], events: list[Event]) -> ActivitySpan | None:
        nvml = self._nvml
        sample = self._read(g, "GPM sample", events, clock, _gpm_sample(nvml))
        if sample is None:
            return None
        t = clock()
        if g.gpm_prev is None:
            g.gpm_prev = (sample, t)
            return None
        prev, t0 = g.gpm_prev
        if t - t0 < _GPM_MIN_GAP_S:
            nvml.nvmlGpmSampleFree(sample)
            return None
        values = self._gpm_metrics(g, prev, sample, clock, events)
        nvml.nvmlGpmSampleFree(prev)
        g.gpm_prev = (sample, t)
        return ActivitySpan(t0, t, g.ident.uuid, values)

    def _gpm_metrics(
        self, g: _Gpu, s1: Any, s2: Any, clock: Callable[[], float], events: list[Event]
    ) -> dict[str, float | None]:
        nvml = self._nvml
        keys = [k for k, attr in _GPM_METRICS.items() if hasattr(nvml, attr)]
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(keys)
        request.sample1 = s1
        request.sample2 = s2
        for i, key in enumerate(keys):
            request.metrics[i].metricId = getattr(nvml, _GPM_METRICS[key])
        out: dict[str, float | None] = dict.fromkeys(_GPM_METRICS)
        try:
            nvml.nvmlGpmMetricsGet(request)
        except nvml.NVMLError as err:
            self._note(g, "GPM metrics", str(err), clock(), events)
            return out
        for i, key in enumerate(keys):
            metric = request.metrics[i]
            if metric.nvmlReturn == nvml.NVML_SUCCESS:
                out[key] = float(metric.value)
            else:
                self._note(g, f"GPM {key}", f"NVML return {metric.nvmlReturn}", clock(), events)
        return out

    def close(self) -> None:
        for g in self._gpus:
            if g.gpm_prev is not None:
                self._once(self._nvml.nvmlGpmSampleFree, g.gpm_prev[0])
                g.gpm_prev = None
        self._once(self._nvml.nvmlShutdown)


def _gpm_sample(nvml: Any) -> Callable[[Any], Any]:
    def take(handle: Any) -> Any:
        sample = nvml.nvmlGpmSampleAlloc()
        try:
            return nvml.nvmlGpmSampleGet(handle, sample)
        except nvml.NVMLError:
            nvml.nvmlGpmSampleFree(sample)
            raise

    return take


def _field_value(nvml: Any, value: Any) -> float:
    member = {
        nvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        nvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    }.get(value.valueType, "ullVal")
    return float(getattr(value.value, member))
