"""Check the NVML telemetry source against a real NVIDIA GPU.

Runs an idle phase, a compute-bound phase (bf16 matmul loop) and a memory-bound phase (large
device-to-device copies) under perfgate's NVML monitor and prints, per phase: mean power from the
energy counter, integrated instant power, instant-power percentiles, utilization.gpu, GPM SM /
tensor / DRAM activity, and the sampler thread's own CPU cost. A second monitor runs alongside
with the energy counter read every second (the old cadence): the energy-based means of the
default monitor (counters at the window edges and every --counter-period-s) must agree with it
within 0.5 %, also over post-hoc windows inside the phases. Needs torch with CUDA and
nvidia-ml-py. Last stdout line: one JSON object with every figure.

    python benchmarks/gpu_telemetry_check.py --phase-s 20
    python benchmarks/gpu_telemetry_check.py --watch-all   # also every other GPU: mapping and imbalance
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import pynvml
import torch

from perfgate.errors import TelemetryError
from perfgate.telemetry import Monitor, NvmlSource, TelemetryWindow


def _cuda_uuid(device: int) -> str | None:
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    return f"GPU-{uuid}" if uuid is not None else None


def _matmul(seconds: float, n: int) -> dict[str, float]:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    iters, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            torch.mm(a, b)
        torch.cuda.synchronize()
        iters += 10
    elapsed = time.perf_counter() - t0
    return {"tflops": 2 * n**3 * iters / elapsed / 1e12}


def _copy(seconds: float, gib: float) -> dict[str, float]:
    count = int(gib * 2**30) // 2
    src = torch.empty(count, device="cuda", dtype=torch.bfloat16).fill_(1.0)
    dst = torch.empty_like(src)
    torch.cuda.synchronize()
    iters, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            dst.copy_(src)
        torch.cuda.synchronize()
        iters += 10
    elapsed = time.perf_counter() - t0
    # A copy reads and writes every byte.
    return {"copy_gb_s": 2 * src.numel() * 2 * iters / elapsed / 1e9}


def _profile_calls(uuid: str, reps: int = 20) -> dict[str, float]:
    """CPU microseconds per call of each NVML query the sampler may make."""
    nv = pynvml
    h = nv.nvmlDeviceGetHandleByUUID(uuid)
    throttle = [
        nv.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP,
        nv.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN,
        nv.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN,
    ]
    gpm = nv.nvmlGpmSampleAlloc()
    calls = {
        "fields[power_instant]": lambda: nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_POWER_INSTANT]),
        "fields[energy]": lambda: nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]),
        "fields[power_instant,energy]": lambda: nv.nvmlDeviceGetFieldValues(
            h, [nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]
        ),
        "fields[3 throttle counters]": lambda: nv.nvmlDeviceGetFieldValues(h, throttle),
        "GetTotalEnergyConsumption": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
        "GetPowerUsage": lambda: nv.nvmlDeviceGetPowerUsage(h),
        "GetUtilizationRates": lambda: nv.nvmlDeviceGetUtilizationRates(h),
        "GetClockInfo(SM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        "GetTemperature": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        "GetMemoryInfo": lambda: nv.nvmlDeviceGetMemoryInfo(h),
        "GetCurrentClocksEventReasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
        "GpmSampleGet": lambda: nv.nvmlGpmSampleGet(h, gpm),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            c0 = time.thread_time()
            for _ in range(reps):
                call()
            out[name] = (time.thread_time() - c0) / reps * 1e6
        except nv.NVMLError as err:
            out[name] = -1.0
            print(f"{name}: {err}", flush=True)
    nv.nvmlGpmSampleFree(gpm)
    return out


def _figures(window: TelemetryWindow, uuid: str) -> dict[str, object]:
    g = next(g for g in window.gpus if g.uuid == uuid)
    keep = (
        "mean_power_w",
        "integrated_power_w",
        "power_method",
        "power_p5_w",
        "power_p50_w",
        "power_p95_w",
        "limit_share",
        "util_gpu_pct",
        "sm_clock_mean_mhz",
        "sm_util_pct",
        "sm_occupancy_pct",
        "tensor_util_pct",
        "dram_bw_util_pct",
        "pcie_tx_mib_s",
        "pcie_rx_mib_s",
        "temperature_max_c",
        "samples",
        "coverage_s",
    )
    out: dict[str, object] = {k: getattr(g, k) for k in keep}
    out["throttle_s"] = dict(g.throttle_s)
    out["length_s"] = window.length_s
    out["notes"] = list(window.notes)
    if len(window.gpus) > 1:
        out["all_gpus_mean_power_w"] = {g.label: g.mean_power_w for g in window.gpus}
        out["imbalance"] = window.imbalance
    return out


def _round(value: object) -> object:
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v) for v in value]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-s", type=float, default=20.0, help="seconds per phase (default 20)")
    parser.add_argument("--interval-s", type=float, default=0.1, help="sampler interval (default 0.1 = 10 Hz)")
    parser.add_argument(
        "--activity-period-s",
        type=float,
        default=1.0,
        help="period of the slow reads: GPM, utilization, clocks (default 1)",
    )
    parser.add_argument(
        "--counter-period-s",
        type=float,
        default=30.0,
        help="period of energy and clock-event counter reads between window edges (default 30)",
    )
    parser.add_argument("--device", type=int, default=0, help="CUDA device to load (default 0)")
    parser.add_argument("--matmul-n", type=int, default=8192)
    parser.add_argument("--copy-gib", type=float, default=4.0, help="GiB per copy buffer (default 4)")
    parser.add_argument(
        "--watch-all",
        action="store_true",
        help="monitor every visible GPU (by UUID), load only --device: shows mapping and imbalance",
    )
    args = parser.parse_args()

    torch.cuda.set_device(args.device)
    uuid = _cuda_uuid(args.device)
    watched = [args.device]
    if args.watch_all:
        watched = list(range(torch.cuda.device_count()))
        # CUDA's device order is not NVML's: name each GPU by the UUID torch reports for it.
        print("CUDA device -> UUID: " + ", ".join(f"{d} -> {_cuda_uuid(d)}" for d in watched), flush=True)
    ids = [_cuda_uuid(d) for d in watched]
    # NVML order may differ from CUDA's: resolve the loaded GPU by UUID when torch tells it.
    try:
        source = NvmlSource(pynvml, ids if all(ids) else watched)
    except TelemetryError as err:
        print(f"torch's UUIDs {ids} did not resolve ({err}); using NVML indices {watched}", flush=True)
        source = NvmlSource(pynvml, watched)
    monitor = Monitor(
        source,
        interval_s=args.interval_s,
        activity_period_s=args.activity_period_s,
        counter_period_s=args.counter_period_s,
    )
    # The reference: the same sampler with the energy counter read every second.
    reference = Monitor(
        NvmlSource(pynvml, [g.uuid for g in monitor.gpus()]),
        interval_s=args.interval_s,
        activity_period_s=args.activity_period_s,
        counter_period_s=1.0,
    )
    for g in monitor.gpus():
        print(f"watching NVML index {g.index}: {g.uuid} pci={g.pci_bus_id}", flush=True)
    ident = next((g for g in monitor.gpus() if g.uuid == uuid), monitor.gpus()[0])
    print(
        f"GPU: {ident.name} {ident.uuid} pci={ident.pci_bus_id} cc={ident.compute_capability} "
        f"limit={ident.power_limit_w} W driver={ident.driver_version} cuda={ident.cuda_driver_version} "
        f"gpm={ident.gpm_supported}",
        flush=True,
    )

    call_cpu_us = _profile_calls(ident.uuid)
    # The poll and sampler costs below are for all watched GPUs together.
    print(f"CPU us per NVML call: {json.dumps(_round(call_cpu_us))}", flush=True)
    poll_cpu_ms = {}
    for label, full, counters in (("fast", False, False), ("full", True, False), ("full+counters", True, True)):
        c0 = time.thread_time()
        for _ in range(20):
            monitor.sample_now(full=full, counters=counters)
        poll_cpu_ms[label] = (time.thread_time() - c0) / 20 * 1000

    monitor.start()
    reference.start()
    phases: dict[str, dict[str, object]] = {}
    steady: dict[str, dict[str, object]] = {}
    ref_means: dict[str, dict[str, float | None]] = {}
    work: dict[str, dict[str, float]] = {}
    for name, run in (
        ("idle", lambda s: time.sleep(s) or {}),
        ("matmul_bf16", lambda s: _matmul(s, args.matmul_n)),
        ("d2d_copy", lambda s: _copy(s, args.copy_gib)),
    ):
        monitor.begin_window(name)
        t0 = time.monotonic()
        work[name] = run(args.phase_s)
        t1 = time.monotonic()
        phases[name] = _figures(monitor.end_window(name), ident.uuid)
        # Post hoc: the middle of the phase, as the load generator's steady-state window would be.
        mid = (t0 + 0.25 * (t1 - t0), t1 - 0.1 * (t1 - t0))
        steady[name] = _figures(monitor.summarize(*mid), ident.uuid)
        ref_means[name] = {
            "phase": _figures(reference.summarize(t0, t1), ident.uuid)["mean_power_w"],  # type: ignore[dict-item]
            "steady": _figures(reference.summarize(*mid), ident.uuid)["mean_power_w"],  # type: ignore[dict-item]
        }
        torch.cuda.empty_cache()
        print(f"{name}: {json.dumps(_round(phases[name]))} work={_round(work[name])}", flush=True)
    monitor.stop()
    reference.stop()
    cpu_pct = monitor.sampler_cpu_pct
    cpu_pct_per_gpu = cpu_pct / len(monitor.gpus()) if cpu_pct is not None else None

    def diff_pct(new: object, ref: object) -> float | None:
        return abs(new - ref) / ref * 100 if isinstance(new, float) and isinstance(ref, float) and ref else None

    cadence = {
        name: {
            "phase_pct": diff_pct(phases[name]["mean_power_w"], ref_means[name]["phase"]),
            "steady_pct": diff_pct(steady[name]["mean_power_w"], ref_means[name]["steady"]),
        }
        for name in phases
    }

    def agree(phase: dict[str, object]) -> float | None:
        e, i = phase["mean_power_w"], phase["integrated_power_w"]
        return abs(e - i) / e * 100 if isinstance(e, float) and isinstance(i, float) and e else None

    mm, cp = phases["matmul_bf16"], phases["d2d_copy"]
    disagreement = {name: agree(p) for name, p in phases.items()}
    tensor_gap = (
        mm["tensor_util_pct"] - cp["tensor_util_pct"]
        if isinstance(mm["tensor_util_pct"], float) and isinstance(cp["tensor_util_pct"], float)
        else None
    )
    result = {
        "gpu": dataclasses.asdict(ident),
        "watched_gpus": [g.uuid for g in monitor.gpus()],
        "phase_s": args.phase_s,
        "interval_s": args.interval_s,
        "activity_period_s": args.activity_period_s,
        "phases": phases,
        "steady_windows": steady,
        "work": work,
        "energy_vs_integrated_pct": disagreement,
        "tensor_gap_pct": tensor_gap,
        "sampler_cpu_pct_of_core": cpu_pct,
        "sampler_cpu_pct_of_core_per_gpu": cpu_pct_per_gpu,
        "reference_sampler_cpu_pct_of_core": reference.sampler_cpu_pct,
        "counter_period_s": args.counter_period_s,
        "mean_power_vs_1s_energy_reads": cadence,
        "poll_cpu_ms": poll_cpu_ms,
        "nvml_call_cpu_us": call_cpu_us,
        "checks": {
            "loaded_power_agrees_within_3pct": all(
                d is not None and d <= 3.0 for n, d in disagreement.items() if n != "idle"
            ),
            "tensor_separates_phases": tensor_gap is not None and tensor_gap >= 20.0,
            "sampler_below_0_25pct_core_per_gpu": cpu_pct_per_gpu is not None and cpu_pct_per_gpu < 0.25,
            "means_within_0_5pct_of_1s_energy_reads": all(
                d is not None and d <= 0.5 for c in cadence.values() for d in c.values()
            ),
        },
    }
    print(json.dumps(_round(result)))
    return 0 if all(result["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
