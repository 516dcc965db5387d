"""Simulator CPU cost per streamed chunk at 1024 concurrent streams (--zero-cost).

Starts ``python -m perfgate.sim --zero-cost true`` on 127.0.0.1, drives 1024 concurrent
/generate streams of 128 tokens from this process (aiohttp), and reads the server's CPU time
from /proc before and after. The figure includes everything the server does (HTTP parsing,
headers, the engine, JSON, writes) divided by the chunks it streamed.

Run from the repository root: ``python benchmarks/sim_chunk_cost.py``; the last stdout line
is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY = 1024
TOKENS = 128
ENDPOINTS = {
    "generate": ("/generate", lambda: {"input_ids": [1] * 256, "stream": True,
                                       "sampling_params": {"max_new_tokens": TOKENS, "ignore_eos": True}}),
    "completions": ("/v1/completions", lambda: {"prompt": [1] * 256, "max_tokens": TOKENS, "ignore_eos": True,
                                                "stream": True, "stream_options": {"include_usage": True}}),
}


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def drive(url: str, path: str, make_body) -> int:
    chunks = 0
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as session:
        async def one() -> int:
            n = 0
            async with session.post(url + path, json=make_body()) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: ") and line != b"data: [DONE]\n":
                        n += 1
            return n

        for n in await asyncio.gather(*(one() for _ in range(CONCURRENCY))):
            chunks += n
    return chunks


def wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"simulator exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health_generate", timeout=1) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.05)
    raise SystemExit("simulator not ready in 30 s")


def main() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfgate.sim", "--host", "127.0.0.1", "--port", str(port),
         "--zero-cost", "true", "--startup-delay-s", "0"],
        env=env, stdout=subprocess.DEVNULL,
    )
    results: dict[str, object] = {"concurrency": CONCURRENCY, "tokens_per_stream": TOKENS}
    try:
        wait_ready(url, proc)
        asyncio.run(drive(url, "/generate", ENDPOINTS["generate"][1]))  # warm up imports and tapes
        for name, (path, make_body) in ENDPOINTS.items():
            before = cpu_s(proc.pid)
            t0 = time.monotonic()
            chunks = asyncio.run(drive(url, path, make_body))
            wall = time.monotonic() - t0
            used = cpu_s(proc.pid) - before
            results[f"{name}_chunks"] = chunks
            results[f"{name}_server_cpu_us_per_chunk"] = round(used / chunks * 1e6, 2)
            results[f"{name}_wall_s"] = round(wall, 2)
            print(f"{name}: {chunks} chunks, server CPU {used:.2f} s = {used / chunks * 1e6:.1f} us/chunk, "
                  f"wall {wall:.1f} s", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
