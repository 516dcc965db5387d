"""Which processes hold the server's GPUs (NVML), before launch and after teardown."""

from __future__ import annotations

import time
from typing import Any, Sequence


def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no library, no driver, no GPU: all mean "cannot tell"
        return None


def _handle(nv: Any, gpu: int | str) -> Any:
    if isinstance(gpu, int) or str(gpu).isdigit():
        return nv.nvmlDeviceGetHandleByIndex(int(gpu))
    if str(gpu).startswith(("GPU-", "MIG-")):
        return nv.nvmlDeviceGetHandleByUUID(str(gpu))
    return nv.nvmlDeviceGetHandleByPciBusId(str(gpu))


def gpu_holders(gpus: Sequence[int | str]) -> dict[str, list[int]] | None:
    """PIDs with compute contexts on each of ``gpus``; None when NVML cannot tell."""
    nv = _nvml()
    if nv is None:
        return None
    try:
        out: dict[str, list[int]] = {}
        for gpu in gpus:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(_handle(nv, gpu))
            out[str(gpu)] = sorted(p.pid for p in procs)
        return out
    except Exception:  # noqa: BLE001 - any NVML failure: report "cannot tell", never crash the gate
        return None
    finally:
        nv.nvmlShutdown()


def wait_released(gpus: Sequence[int | str], pids: set[int], timeout_s: float) -> list[str]:
    """Wait until none of ``pids`` holds ``gpus``; notes on what is left."""
    deadline = time.monotonic() + timeout_s
    left: dict[str, list[int]] = {}
    while True:
        holders = gpu_holders(gpus)
        if holders is None:
            return []
        left = {g: [p for p in ps if p in pids] for g, ps in holders.items()}
        if not any(left.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    return [f"GPU {g} still held by pid(s) {', '.join(map(str, ps))} {timeout_s:g} s after teardown" for g, ps in left.items() if ps]
