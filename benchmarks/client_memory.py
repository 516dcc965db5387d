"""The load client's memory on a 100,000-request workload, as the OS counts it (RSS from /proc).

Boots ``python -m perfgate.sim --zero-cost true`` and, in a fresh process, runs one workload of
``--requests`` requests (256 prompt tokens, ``--output-len`` output tokens, one chunk per token,
``--concurrency`` streams) with perfgate.load.run_workload in one client process. A thread samples
the process's resident set (VmRSS) every 50 ms; VmHWM gives the peak. Then, in the same process,
it computes the metrics (perfgate.metrics.compute_metrics) and writes the results JSON
(perfgate.report.write_results) and reports each stage's peak above what was resident before it.
The last stdout line is one JSON object.

    python benchmarks/client_memory.py [--requests 100000] [--output-len 128] [--concurrency 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _rss import PeakRss, status_kb  # noqa: E402  (beside this script)


def worker(url: str, requests: int, output_len: int, concurrency: int) -> dict:
    from perfgate.load import ClientLimits, run_workload
    from perfgate.metrics import compute_metrics
    from perfgate.profile import Workload
    from perfgate.report import write_results
    from perfgate.session import RepeatResult, RunSummary, WorkloadResult

    w = Workload(
        name="memory",
        num_prompts=requests,
        concurrency=concurrency,
        input_len=256,
        output_len=output_len,
        warmup_requests=16,
        client_processes=1,
    )
    started_mb = status_kb("VmRSS") / 1024
    t0 = time.monotonic()
    with PeakRss() as client:
        run = run_workload(url, w, limits=ClientLimits(max_lag_p99_ms=1e9, max_cpu_share=1e9))
    client_s = time.monotonic() - t0
    failed = [r.error for r in run.records if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed; first: {failed[0]}")
    out: dict[str, object] = {
        "requests": requests,
        "output_len": output_len,
        "concurrency": concurrency,
        "chunks": run.client.chunks,
        "client_s": round(client_s, 1),
        "interpreter_mb": round(started_mb, 1),
        "client_peak_rss_mb": round(client.peak_mb, 1),
        "client_vmhwm_mb": round(status_kb("VmHWM") / 1024, 1),
        "rss_after_run_mb": round(client.after_mb, 1),
    }
    print(
        f"client: {run.client.chunks:,} chunks in {client_s:.0f} s, peak RSS {client.peak_mb:.0f} MB "
        f"(interpreter and imports {started_mb:.0f} MB)",
        file=sys.stderr,
        flush=True,
    )
    with PeakRss() as metrics_stage:
        metrics = compute_metrics(run, target_concurrency=concurrency)
    out["metrics_peak_above_before_mb"] = round(metrics_stage.peak_mb - metrics_stage.before_mb, 1)
    print(f"metrics: +{metrics_stage.peak_mb - metrics_stage.before_mb:.0f} MB at peak", file=sys.stderr, flush=True)
    result = WorkloadResult(workload="memory", repeats=[RepeatResult(run, metrics, None, "telemetry disabled")])
    summary = RunSummary("memory", "", None, (), "", "", (result,), {"memory": ()}, {"memory": 0.0})
    with tempfile.TemporaryDirectory() as d, PeakRss() as writing:
        t1 = time.monotonic()
        paths = write_results(summary, Path(d))
        out["results_json_mb"] = round(paths[0].stat().st_size / 2**20, 1)
        out["results_write_s"] = round(time.monotonic() - t1, 1)
    out["results_write_peak_above_before_mb"] = round(writing.peak_mb - writing.before_mb, 1)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=1024)
    p.add_argument("--worker-url", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker_url:
        print(json.dumps(worker(a.worker_url, a.requests, a.output_len, a.concurrency)))
        return

    from perfgate.profile import ServerSpec
    from perfgate.server import start_server

    sim = {
        "zero_cost": True,
        # The client alone: the toy model's answers would add the server's cost per token.
        "tape_answers": True,
        "startup_delay_s": 0.1,
        "gpus": 1,
        "max_total_tokens": 10_000_000,  # the most the simulator takes (perfgate._limits.LENGTH_MAX)
        "max_running_requests": a.concurrency,
    }
    spec = ServerSpec(kind="simulator", sim=sim, startup_timeout_s=60.0, shutdown_timeout_s=10.0)
    with tempfile.TemporaryDirectory() as logs, ExitStack() as stack:
        server = start_server(spec, log_dir=Path(logs), stack=stack)
        argv = [
            sys.executable,
            __file__,
            "--worker-url",
            server.base_url,
            "--requests",
            str(a.requests),
            "--output-len",
            str(a.output_len),
            "--concurrency",
            str(a.concurrency),
        ]
        proc = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            text=True,
            timeout=3600,
            check=False,
            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        )
    if proc.returncode != 0:
        raise SystemExit(f"worker failed (exit {proc.returncode})")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["load_average_1m"] = round(os.getloadavg()[0], 2)
    res["target_client_mb"] = 250
    res["target_met"] = res["client_peak_rss_mb"] <= 250
    print(json.dumps(res))


if __name__ == "__main__":
    main()
