"""Does explain name the kernel that got slower, and what does a capture cost?

Each trial boots the simulator twice with one seed, once as is and once with
``PERFGATE_SIM_SLOW_KERNEL=NAME:FACTOR``, keeps a closed-loop load of ``--concurrency`` streams on
it, profiles ``--steps`` steps with perfgate's own capture (``/start_profile``), reduces both
traces and ranks the diff. A trial is a hit when the slowed kernel's key is the first row of the
ranking. Reported: hits per (kernel, factor), and per capture the time from /start_profile to a
settled trace file, the time to read and reduce it, and the trace's size (gzip, as written).

    python benchmarks/explain_ranking.py [--trials 20] [--kernels moe_gemm] [--factors 3]

Last stdout line: one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import httpx

from perfgate.explain import ProfileTable, capture_profile, diff_tables, normalise, read_trace, reduce_trace
from perfgate.sim._kernels import KERNELS

SRC = str(Path(__file__).resolve().parent.parent / "src")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def profiled(seed: int, slow: str, args: argparse.Namespace, out: Path) -> tuple[ProfileTable, dict[str, float]]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": SRC, "PERFGATE_SIM_SLOW_KERNEL": slow}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfgate.sim",
            "--port",
            str(port),
            "--seed",
            str(seed),
            "--time-scale",
            str(args.time_scale),
            "--startup-delay-s",
            "0",
            "--gpus",
            "8",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    try:
        for _ in range(200):
            try:
                if httpx.get(url + "/health_generate", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)

        def stream() -> None:
            with httpx.Client(base_url=url, timeout=60) as c:
                while not stop.is_set():
                    c.post(
                        "/generate", json={"input_ids": list(range(1, 257)), "sampling_params": {"max_new_tokens": 128}}
                    )

        threads = [threading.Thread(target=stream, daemon=True) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        time.sleep(args.settle_s)
        cap = capture_profile(url, out, num_steps=args.steps, activities=["CPU", "GPU"], timeout_s=60)
        stop.set()
        t0 = time.monotonic()
        events, size = read_trace(cap.traces[0], root=out)
        table = reduce_trace(events, steps=args.steps, output_tokens=None, trace_bytes=size)
        return table, {"capture_s": cap.capture_s, "reduce_s": time.monotonic() - t0, "trace_bytes": size}
    finally:
        stop.set()
        proc.terminate()
        proc.wait(10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--kernels", nargs="+", default=["moe_gemm"])
    p.add_argument("--factors", nargs="+", type=float, default=[3.0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--time-scale", type=float, default=0.1)
    p.add_argument("--settle-s", type=float, default=1.0)
    args = p.parse_args()
    keys = {k.short: normalise(k.raw) for k in KERNELS}
    hits: dict[str, list[int]] = {}
    costs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in args.kernels:
            for factor in args.factors:
                label = f"{kernel}:{factor:g}"
                hits[label] = []
                for seed in range(args.trials):
                    base, c1 = profiled(seed, "", args, Path(tmp, f"{label}-{seed}-a"))
                    slow, c2 = profiled(seed, label, args, Path(tmp, f"{label}-{seed}-b"))
                    costs += [c1, c2]
                    ranked = [r.key for r in diff_tables(base, slow).rows]
                    hits[label].append(int(ranked[0] == keys[kernel]))
                    rank = ranked.index(keys[kernel]) + 1
                    print(f"{label} seed {seed}: first {ranked[0]}, slowed kernel ranked {rank}", flush=True)
    summary = {
        "hits": {k: f"{sum(v)}/{len(v)}" for k, v in hits.items()},
        "captures": len(costs),
        "capture_s_median": statistics.median(c["capture_s"] for c in costs),
        "capture_s_max": max(c["capture_s"] for c in costs),
        "reduce_s_median": statistics.median(c["reduce_s"] for c in costs),
        "trace_bytes_median": statistics.median(c["trace_bytes"] for c in costs),
        "steps": args.steps,
        "concurrency": args.concurrency,
        "time_scale": args.time_scale,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
