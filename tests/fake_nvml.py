"""A fake of the parts of nvidia-ml-py (``pynvml``) perfgate uses: GPU identity, the holders
check, doctor's report and the NVML telemetry source.

It models N GPUs driven by a manual clock: each GPU has a power level (W) and activity levels
that can change at any time; its energy counter and GPM samples integrate them exactly, so tests
know the true answer. Failures are injected per function name, per field, or per GPU (lost).
Code that imports ``pynvml`` itself gets the fake with
``monkeypatch.setitem(sys.modules, "pynvml", nvml)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class FakeGpu:
    uuid: str
    name: str = "Fake H200"
    compute_capability: tuple[int, int] = (9, 0)
    # PIDs with a compute context on this GPU.
    pids: list[int] = field(default_factory=list)
    power_w: float = 300.0
    limit_w: float = 700.0
    tensor_pct: float = 0.0
    sm_pct: float = 50.0
    gpm: bool = True
    # Function name -> NVML error code raised by that function for this GPU.
    fail: dict[str, int] = field(default_factory=dict)
    # Field ids answered with NOT_SUPPORTED in nvmlDeviceGetFieldValues.
    unsupported_fields: set[int] = field(default_factory=set)
    lost: bool = False
    energy_mj: float = 5e6
    tensor_int: float = 0.0
    sm_int: float = 0.0
    throttle_ns: float = 0.0
    last_t: float = 0.0


class FakeNvml:
    NVML_SUCCESS = 0
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_UNKNOWN = 999
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP = 74
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST = 76
    NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN = 269
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN = 270
    NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN = 271
    NVML_VALUE_TYPE_DOUBLE = 0
    NVML_VALUE_TYPE_UNSIGNED_INT = 1
    NVML_VALUE_TYPE_UNSIGNED_LONG = 2
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
    NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
    NVML_VALUE_TYPE_SIGNED_INT = 5
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_P2P_STATUS_OK = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20
    NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21
    NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60
    NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return f"NVML error {self.value}"

    def __init__(
        self,
        clock: FakeClock,
        gpus: list[FakeGpu],
        *,
        init_error: int | None = None,
        p2p: dict[tuple[int, int], int | Exception] | None = None,
        driver_version: str = "580.159.04",
    ) -> None:
        self.clock = clock
        self.gpus = gpus
        self.init_error = init_error
        # (a, b) -> NVML_P2P_STATUS_* or the error to raise; None: OK between neighbours only.
        self.p2p = p2p
        self.driver_version = driver_version
        self.calls: dict[str, int] = {}
        self.live_gpm_samples = 0
        self.initialised = 0
        for g in gpus:
            g.last_t = clock.now

    # -- model ---------------------------------------------------------------------------

    def _advance(self, g: FakeGpu) -> None:
        dt = self.clock.now - g.last_t
        g.energy_mj += g.power_w * dt * 1000
        g.tensor_int += g.tensor_pct * dt
        g.sm_int += g.sm_pct * dt
        if g.power_w >= g.limit_w:
            g.throttle_ns += dt * 1e9
        g.last_t = self.clock.now

    def set_power(self, index: int, watts: float) -> None:
        g = self.gpus[index]
        self._advance(g)
        g.power_w = watts

    def set_tensor(self, index: int, pct: float) -> None:
        g = self.gpus[index]
        self._advance(g)
        g.tensor_pct = pct

    def reset_energy(self, index: int) -> None:
        g = self.gpus[index]
        self._advance(g)
        g.energy_mj = 0.0

    def _gpu(self, handle: Any, fn: str) -> FakeGpu:
        self.calls[fn] = self.calls.get(fn, 0) + 1
        g = self.gpus[handle]
        if g.lost:
            raise self.NVMLError(self.NVML_ERROR_GPU_IS_LOST)
        if fn in g.fail:
            raise self.NVMLError(g.fail[fn])
        self._advance(g)
        return g

    def _static(self, handle: Any, fn: str) -> FakeGpu:
        """A GPU for a query of fixed facts (no clock), with ``fail`` injection."""
        self.calls[fn] = self.calls.get(fn, 0) + 1
        g = self.gpus[handle]
        if fn in g.fail:
            raise self.NVMLError(g.fail[fn])
        return g

    # -- API -----------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise self.NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        for i, g in enumerate(self.gpus):
            if g.uuid == uuid:
                return i
        raise self.NVMLError(self.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str) -> int:
        for i in range(len(self.gpus)):
            if self._bus(i) == bus_id:
                return i
        raise self.NVMLError(self.NVML_ERROR_NOT_FOUND)

    @staticmethod
    def _bus(i: int) -> str:
        return f"00000000:{0x18 + i:02X}:00.0"

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.gpus[h].uuid

    def nvmlDeviceGetIndex(self, h: int) -> int:
        return h

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self._static(h, "nvmlDeviceGetName").name.encode()

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._bus(h).encode())

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return self._static(h, "nvmlDeviceGetCudaComputeCapability").compute_capability

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return int(self._static(h, "nvmlDeviceGetEnforcedPowerLimit").limit_w * 1000)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=2**30)
            for pid in self._static(h, "nvmlDeviceGetComputeRunningProcesses").pids
        ]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        return 700_000

    def nvmlDeviceGetEccMode(self, h: int) -> tuple[int, int]:
        return (1, 1)

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPersistenceMode(self, h: int) -> int:
        return 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlGpmQueryDeviceSupport(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(isSupportedDevice=int(self.gpus[h].gpm))

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return 50

    def nvmlDeviceGetP2PStatus(self, a: int, b: int, index: int) -> int:
        if not isinstance(index, int):
            raise TypeError("p2p index must be an int")
        if self.p2p is None:
            return 0 if abs(a - b) == 1 else 4
        status = self.p2p[(a, b)]
        if isinstance(status, Exception):
            raise status
        return status

    def nvmlDeviceGetFieldValues(self, h: int, field_ids: list[int]) -> list[SimpleNamespace]:
        g = self._gpu(h, "nvmlDeviceGetFieldValues")
        out = []
        for fid in field_ids:
            if fid in g.unsupported_fields:
                out.append(
                    SimpleNamespace(
                        nvmlReturn=self.NVML_ERROR_NOT_SUPPORTED, valueType=1, value=SimpleNamespace(uiVal=0)
                    )
                )
            elif fid == self.NVML_FI_DEV_POWER_INSTANT:
                out.append(
                    SimpleNamespace(
                        nvmlReturn=0,
                        valueType=self.NVML_VALUE_TYPE_UNSIGNED_INT,
                        value=SimpleNamespace(uiVal=int(g.power_w * 1000)),
                    )
                )
            elif fid == self.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
                out.append(
                    SimpleNamespace(
                        nvmlReturn=0,
                        valueType=self.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                        value=SimpleNamespace(ullVal=int(g.energy_mj)),
                    )
                )
            else:
                ns = g.throttle_ns if fid == self.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP else 0
                out.append(
                    SimpleNamespace(
                        nvmlReturn=0,
                        valueType=self.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                        value=SimpleNamespace(ullVal=int(ns)),
                    )
                )
        return out

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return int(self._gpu(h, "nvmlDeviceGetTotalEnergyConsumption").energy_mj)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return int(self._gpu(h, "nvmlDeviceGetPowerUsage").power_w * 1000)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self._gpu(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=100, memory=40)

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        self._gpu(h, "nvmlDeviceGetClockInfo")
        return 1980 if kind == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        self._gpu(h, "nvmlDeviceGetTemperature")
        return 40 + h

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        self._gpu(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=141 * 2**30, used=10 * 2**30)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        g = self._gpu(h, "nvmlDeviceGetCurrentClocksEventReasons")
        return 0x4 if g.power_w >= g.limit_w else 0

    # -- GPM -----------------------------------------------------------------------------

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:
        self.live_gpm_samples += 1
        return SimpleNamespace(t=None, tensor=None, sm=None)

    def nvmlGpmSampleFree(self, sample: SimpleNamespace) -> None:
        self.live_gpm_samples -= 1

    def nvmlGpmSampleGet(self, h: int, sample: SimpleNamespace) -> SimpleNamespace:
        g = self._gpu(h, "nvmlGpmSampleGet")
        sample.t, sample.tensor, sample.sm = self.clock.now, g.tensor_int, g.sm_int
        return sample

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.version = 0
            self.numMetrics = 0
            self.sample1: Any = None
            self.sample2: Any = None
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(210)]

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        s1, s2 = request.sample1, request.sample2
        dt = s2.t - s1.t
        for m in request.metrics[: request.numMetrics]:
            if m.metricId == self.NVML_GPM_METRIC_ANY_TENSOR_UTIL:
                m.value = (s2.tensor - s1.tensor) / dt
            elif m.metricId == self.NVML_GPM_METRIC_SM_UTIL:
                m.value = (s2.sm - s1.sm) / dt
            elif m.metricId in (
                self.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
                self.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
            ):
                m.nvmlReturn = self.NVML_ERROR_NOT_SUPPORTED
            else:
                m.value = 12.5
        return request


def uuids(n: int) -> list[str]:
    return [f"GPU-{i:08x}-0000-0000-0000-0000abcd{i:04x}" for i in range(n)]


def make(n: int = 2, **kw: Any) -> tuple[FakeClock, FakeNvml]:
    clock = FakeClock()
    return clock, FakeNvml(clock, [FakeGpu(uuid=u, **kw) for u in uuids(n)])
