"""The load client at scale: 1,024 / 4,096 / 8,192 concurrent streams against the zero-cost simulator.

Boots ``python -m perfgate.sim --zero-cost true`` (steps take no simulated time, so the server
streams as fast as its one process allows) and runs, each in a fresh process and ``--runs``
times, one workload per stream count: as many requests as streams, all sent at once, 256 prompt
tokens, ``--output-len`` output tokens in one chunk each, ``client_processes = "auto"``.
Reported per run: chunks per second over the measured phase, client CPU microseconds per chunk
(all client processes), the event-loop lag p99 (the busiest process), the client's resident
memory (the peak of the summed VmRSS of the client process and its children, from /proc), the
processes "auto" chose, the client's self-check verdict, and the simulator's CPU share over the
measured phase, which says whether the server or the client was the limit, and how long the
client processes waited for a CPU while runnable, per second they ran (from /proc/PID/schedstat:
what tells a starved client from one that is slow on its own). The last stdout line is one JSON
object.

    python benchmarks/client_scale.py [--streams 1024,4096,8192] [--runs 2] [--output-len 128]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _tree(pid: int) -> list[int]:
    """``pid`` and every descendant."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def _tree_sample(pid: int) -> tuple[float, float, float]:
    """Summed over ``pid``'s tree: VmRSS (MB), and from /proc/PID/schedstat the seconds run on a CPU
    and the seconds spent runnable but waiting for one (what starves an event loop)."""
    rss_kb, run_ns, wait_ns = 0, 0, 0
    for p in _tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss_kb += int(line.split()[1])
            ran, waited, _ = Path(f"/proc/{p}/schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        run_ns += int(ran)
        wait_ns += int(waited)
    return rss_kb / 1024, run_ns / 1e9, wait_ns / 1e9


def worker(url: str, streams: int, output_len: int) -> dict:
    from perfgate.load import run_workload
    from perfgate.profile import Workload

    w = Workload(
        name=f"scale-{streams}",
        num_prompts=streams,
        concurrency=streams,
        input_len=256,
        output_len=output_len,
        warmup_requests=64,
        client_processes="auto",
    )
    run = run_workload(url, w)
    failed = [r.error for r in run.records if not r.ok]
    c = run.client
    return {
        "streams": streams,
        "processes": c.processes,
        "sizing": c.sizing,
        "event_loop": c.event_loop,
        "start_s": run.start_s,
        "end_s": run.end_s,
        "chunks": c.chunks,
        "wall_s": c.wall_s,
        "cpu_us_per_chunk": c.cpu_us_per_chunk,
        "cpu_share_busiest": c.cpu_share,
        "loop_lag_p99_ms": c.loop_lag_p99_ms,
        "valid": c.valid,
        "limit": c.limit,
        "reason": c.reason,
        "failed": len(failed),
        "first_failure": failed[0] if failed else "",
    }


def _run_one(url: str, sim_pid: int, streams: int, output_len: int) -> dict:
    argv = [sys.executable, __file__, "--worker-url", url, "--streams", str(streams), "--output-len", str(output_len)]
    # (monotonic, simulator CPU s, client tree: RSS MB, s on a CPU, s waiting for one)
    samples: list[tuple[float, float, float, float, float]] = []
    # The client in a session of its own, so a scheduling group (autogroup) of its own, as a client
    # beside a server on other cores would be: in one group with the zero-cost simulator (perfgate
    # keeps launched servers in its session since 8e36bd6), the kernel splits the two cores nine
    # ways and the simulator, which needs a whole core, became the limit: 52k -> 36-42k chunks/s
    # at 8,192 streams, measured either side of that commit.
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        start_new_session=True,
    )
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            samples.append((time.monotonic(), _cpu_s(sim_pid), *_tree_sample(proc.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate(timeout=900)
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{streams} streams: the client process failed (exit {proc.returncode})")
    res = json.loads(out.strip().splitlines()[-1])
    inside = [s for s in samples if res["start_s"] <= s[0] <= res["end_s"]]
    if len(inside) >= 2:
        first, last = inside[0], inside[-1]
        res["server_cpu_share"] = (last[1] - first[1]) / (last[0] - first[0])
        # Runnable client time spent waiting for a CPU, per second it ran: above ~1 the host,
        # not the client, decides how late its event loops run.
        res["client_cpu_wait_per_run_s"] = (last[4] - first[4]) / max(1e-9, last[3] - first[3])
    else:
        res["server_cpu_share"] = res["client_cpu_wait_per_run_s"] = float("nan")
    res["client_rss_mb"] = max((s[2] for s in samples), default=float("nan"))
    res["chunks_per_s"] = res["chunks"] / res["wall_s"]
    if res["failed"]:
        res["limit_by"] = "failed requests"
    elif res["limit"] == "saturated":
        res["limit_by"] = "client"
    elif res["server_cpu_share"] >= 0.9:
        res["limit_by"] = "server (simulator CPU)"
    else:
        res["limit_by"] = "neither saturated (CPU shared with other processes)"
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="1024,4096,8192", help="comma-separated stream counts")
    p.add_argument("--runs", type=int, default=2, help="runs per stream count")
    p.add_argument("--output-len", type=int, default=128, help="output tokens (chunks) per request")
    p.add_argument("--worker-url", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker_url:
        print(json.dumps(worker(a.worker_url, int(a.streams), a.output_len)))
        return

    from perfgate.profile import ServerSpec
    from perfgate.server import start_server

    counts = [int(x) for x in a.streams.split(",")]
    sim = {
        "zero_cost": True,
        # The client alone: the toy model's answers would add the server's cost per token.
        "tape_answers": True,
        "startup_delay_s": 0.1,
        "gpus": 1,
        "max_total_tokens": 10_000_000,  # the most the simulator takes (perfgate._limits.LENGTH_MAX)
        "max_running_requests": max(counts),
    }
    spec = ServerSpec(kind="simulator", sim=sim, startup_timeout_s=60.0, shutdown_timeout_s=10.0)
    load_before = os.getloadavg()[0]
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as logs, ExitStack() as stack:
        server = start_server(spec, log_dir=Path(logs), stack=stack)
        sim_pid = server.process.pid
        for streams in counts:
            for i in range(a.runs):
                r = _run_one(server.base_url, sim_pid, streams, a.output_len)
                runs.append(r)
                print(
                    f"{streams:>5} streams, run {i + 1}: {r['chunks_per_s']:8,.0f} chunks/s, "
                    f"{r['cpu_us_per_chunk']:5.1f} us CPU/chunk, lag p99 {r['loop_lag_p99_ms']:6.1f} ms, "
                    f"RSS {r['client_rss_mb']:5.0f} MB, {r['processes']} process(es), "
                    f"{'valid' if r['valid'] else 'INVALID: ' + r['reason']}, simulator CPU "
                    f"{r['server_cpu_share']:.0%}, "
                    f"client waited {r['client_cpu_wait_per_run_s']:.1f} s for a CPU per s it ran "
                    f"-> limit: {r['limit_by']}",
                    flush=True,
                )
    summary: dict[str, object] = {
        "load_average_1m_before": round(load_before, 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
        "output_len": a.output_len,
        "event_loop": runs[0]["event_loop"] if runs else "",
    }
    for streams in counts:
        mine = [r for r in runs if r["streams"] == streams]

        def spread(key: str, digits: int = 1, mine: list[dict] = mine) -> list[float]:
            values = [r[key] for r in mine]
            return [round(min(values), digits), round(max(values), digits)]

        summary[str(streams)] = {
            "chunks_per_s": spread("chunks_per_s", 0),
            "cpu_us_per_chunk": spread("cpu_us_per_chunk"),
            "loop_lag_p99_ms": spread("loop_lag_p99_ms"),
            "client_rss_mb": spread("client_rss_mb", 0),
            "processes": sorted({r["processes"] for r in mine}),
            "valid_runs": sum(r["valid"] for r in mine),
            "runs": len(mine),
            "server_cpu_share": spread("server_cpu_share", 2),
            "client_cpu_wait_per_run_s": spread("client_cpu_wait_per_run_s", 2),
            "limit_by": sorted({r["limit_by"] for r in mine}),
        }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
