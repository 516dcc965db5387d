"""Which processes hold the server's GPUs (NVML), before launch and after teardown."""

from __future__ import annotations

import time
from collections.abc import Sequence

from perfgate.gpu import NvmlUnavailable, UnknownGpu, device_handle, nvml_session, resolve_gpu


def gpu_holders(gpus: Sequence[int | str]) -> dict[str, list[int]] | None:
    """PIDs with compute contexts on each of ``gpus`` (keyed as given); None when NVML cannot tell."""
    try:
        with nvml_session() as nvml:
            try:
                return {
                    str(gpu): sorted(
                        p.pid
                        for p in nvml.nvmlDeviceGetComputeRunningProcesses(device_handle(nvml, resolve_gpu(nvml, gpu)))
                    )
                    for gpu in gpus
                }
            except (nvml.NVMLError, UnknownGpu):
                # Cannot tell; an unknown GPU is refused by the lock, with the GPUs that exist.
                return None
    except NvmlUnavailable:
        return None


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
    return [
        f"GPU {g} still held by pid(s) {', '.join(map(str, ps))} {timeout_s:g} s after teardown"
        for g, ps in left.items()
        if ps
    ]
