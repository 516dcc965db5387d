"""The simulator server: its CPU cost per streamed chunk, and its timing fidelity.

1. Cost: ``python -m perfgate.sim --zero-cost true``, 1024 concurrent streams of 128 tokens
   (/generate and /v1/completions) driven from this process with aiohttp; the server's CPU
   time from /proc before and after, divided by the chunks it streamed (HTTP parsing,
   headers, engine, JSON and writes all included).
2. Fidelity: the scenario's workload (1024 x 256/128, all at once) against a server at
   ``--time-scale 0.25``; the server's /sim/truth aggregates and the client's own figures,
   converted back to model time, next to :func:`perfgate.sim.simulate` for the same config.

Run from the repository root: ``python benchmarks/sim_server.py``; the last stdout line is
one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from perfgate.sim import SimConfig, simulate  # noqa: E402 - after the path setup

CONCURRENCY = 1024
INPUT, OUTPUT = 256, 128
FIDELITY_TIME_SCALE = 0.25
ENDPOINTS: dict[str, tuple[str, dict[str, object]]] = {
    "generate": (
        "/generate",
        {"input_ids": [1] * INPUT, "stream": True, "sampling_params": {"max_new_tokens": OUTPUT, "ignore_eos": True}},
    ),
    "completions": (
        "/v1/completions",
        {
            "prompt": [1] * INPUT,
            "max_tokens": OUTPUT,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    ),
}


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def simulator(*args: str) -> Iterator[tuple[str, int]]:
    """A ready simulator on 127.0.0.1: yields (base URL, pid)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "perfgate.sim",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--startup-delay-s",
            "0",
            *args,
        ],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"simulator did not become ready (exit status {proc.poll()})")
            try:
                with urllib.request.urlopen(url + "/health_generate", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.05)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=60)


async def drive(url: str, path: str, body: dict[str, object]) -> list[tuple[float, float, float, int]]:
    """All streams at once; per stream (sent, first chunk, last chunk, chunks) in monotonic s."""
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=900)) as session:

        async def one() -> tuple[float, float, float, int]:
            chunks = 0
            sent = time.monotonic()
            first = 0.0
            async with session.post(url + path, json=body) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: {") and b'"choices":[]' not in line:
                        chunks += 1
                        if chunks == 1:
                            first = time.monotonic()
            return sent, first, time.monotonic(), chunks

        return await asyncio.gather(*(one() for _ in range(CONCURRENCY)))


def chunk_cost() -> dict[str, float]:
    """The server's CPU per chunk on each endpoint; ``generate_tape``: /generate answered from the
    fixed tape (``--tape-answers``, as the client benchmarks run it) instead of the toy model."""
    out: dict[str, float] = {}
    runs = [((), tuple(ENDPOINTS)), (("--tape-answers", "true"), ("generate",))]
    for extra, names in runs:
        with simulator("--zero-cost", "true", *extra) as (url, pid):
            asyncio.run(drive(url, *ENDPOINTS["generate"]))  # warm up: imports, token tapes
            for name in names:
                path, body = ENDPOINTS[name]
                before = cpu_s(pid)
                chunks = sum(r[3] for r in asyncio.run(drive(url, path, body)))
                used = cpu_s(pid) - before
                label = name + ("_tape" if extra else "")
                out[f"{label}_server_cpu_us_per_chunk"] = round(used / chunks * 1e6, 2)
                print(
                    f"{label}: {chunks} chunks, server CPU {used:.2f} s = {used / chunks * 1e6:.1f} us/chunk",
                    flush=True,
                )
    return out


def fidelity() -> dict[str, float]:
    scale = FIDELITY_TIME_SCALE
    # Every stream sends the same prompt: with the prefix cache, 255 of its 256 tokens would come
    # from the cache, while simulate() models no cache.
    with simulator("--time-scale", str(scale), "--disable-radix-cache") as (url, _):
        t0 = time.monotonic()
        streams = asyncio.run(drive(url, *ENDPOINTS["generate"]))
        wall = max(r[2] for r in streams) - t0
        with urllib.request.urlopen(url + "/sim/truth") as resp:
            report = json.load(resp)
        truth = report["aggregates"]
    model = simulate(SimConfig(), [(0.0, INPUT, OUTPUT)] * CONCURRENCY)
    client_tpot = [(last - first) / (OUTPUT - 1) for _, first, last, _ in streams]
    out = {
        "simulate_total_tok_s": round(model.total_throughput, 1),
        "simulate_mean_tpot_ms": round(model.mean_tpot_ms, 1),
        "simulate_mean_ttft_ms": round(model.mean_ttft_ms, 1),
        "server_engine_lost_s": round(report["engine"]["lost_s"] / scale, 1),
        "server_truth_mean_tpot_ms": round(truth["mean_tpot_ms"] / scale, 1),
        "server_truth_mean_ttft_ms": round(truth["mean_ttft_ms"] / scale, 1),
        "client_total_tok_s": round(CONCURRENCY * (INPUT + OUTPUT) / wall * scale, 1),
        "client_mean_tpot_ms": round(sum(client_tpot) / len(client_tpot) * 1e3 / scale, 1),
        "client_mean_ttft_ms": round(sum(f - s for s, f, _, _ in streams) / CONCURRENCY * 1e3 / scale, 1),
    }
    for key, value in out.items():
        print(f"{key}: {value}", flush=True)
    return out


def main() -> None:
    results: dict[str, object] = {"concurrency": CONCURRENCY, "input_tokens": INPUT, "output_tokens": OUTPUT}
    results.update(chunk_cost())
    results.update(fidelity())
    print(json.dumps(results))


if __name__ == "__main__":
    main()
