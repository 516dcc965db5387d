"""The load client's own cost: CPU microseconds per streamed chunk at 1024 concurrent streams.

Boots ``python -m perfgate.sim --zero-cost`` (steps take no simulated time, so the server
streams as fast as its CPU allows) and runs, one after another in fresh processes, three
clients against its native ``/generate`` endpoint with the same requests:

* ``perfgate``: perfgate.load.run_workload (its own HTTP/1.1 protocol on httptools, keep-alive
  connections opened before the measured phase, bytes-level meta_info parsing) on uvloop, and
  ``perfgate-asyncio``, the same on asyncio's own event loop (PERFGATE_EVENT_LOOP=asyncio);
* ``bench_serving``: a reference written from the description of sglang.bench_serving's
  native client (sglang 0.5.23, ``sglang/benchmark/serving.py``): a new aiohttp ClientSession
  per request, orjson.loads of every chunk (stdlib json when orjson is missing), cumulative text
  kept, TTFT and per-token ITL bookkeeping;
* ``httpx``: one httpx.AsyncClient with its default transport (pool limits raised to the stream
  count), doing the reference's per-chunk work: the HTTP stack is the only difference.

Each client reports its process CPU seconds over the run, the chunks that carried tokens, and
so CPU us per chunk; ``chunks_per_cpu_s`` (1e6 / CPU us per chunk) is the most chunks per
second that one client process sustains on one core, ``chunks_per_s`` what this run achieved
(bounded by the simulator sharing the machine). Last stdout line: one JSON object.

    python benchmarks/client_overhead.py [--streams 1024] [--chunks 64] [--httpx-chunks 64] \
        [--clients perfgate,bench_serving]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

CLIENTS = ("perfgate", "perfgate-asyncio", "bench_serving", "httpx")
INPUT_LEN = 16


def _payload(ids: list[int], output_len: int) -> dict:
    return {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0.0},
        "stream": True,
    }


def _prompts(count: int) -> list[list[int]]:
    return [[1000 + (i * 31 + j) % 20000 for j in range(INPUT_LEN)] for i in range(count)]


class _BenchServingLike:
    """Per-chunk work of bench_serving's native client, reimplemented: parse, keep text, TTFT, ITLs."""

    def __init__(self) -> None:
        try:
            import orjson

            self.loads = orjson.loads
            self.parser = "orjson"
        except ImportError:
            self.loads = json.loads
            self.parser = "json"
        self.chunks = 0

    def new_request(self) -> dict:
        start = time.perf_counter()
        return {"start": start, "last": start, "ttft": 0.0, "itl": [], "text": "", "prev_tokens": 0, "tokens": 0}

    def on_line(self, out: dict, raw: bytes) -> None:
        raw = raw.strip()
        if not raw:
            return
        data = raw[6:] if raw.startswith(b"data: ") else raw
        out["latency"] = time.perf_counter() - out["start"]
        if data == b"[DONE]":
            return
        obj = self.loads(data)
        meta = obj.get("meta_info") or {}
        out["prompt_tokens"] = meta.get("prompt_tokens")
        if not obj.get("text"):
            return
        now = time.perf_counter()
        out["text"] = obj["text"]
        tokens = obj["meta_info"]["completion_tokens"]
        out["tokens"] = tokens
        self.chunks += 1
        if out["ttft"] == 0.0:
            out["ttft"] = now - out["start"]
        else:
            new = tokens - out["prev_tokens"]
            if new == 0:
                return
            out["itl"].extend([(now - out["last"]) / new] * new)
        out["last"] = now
        out["prev_tokens"] = tokens


async def _bench_serving_client(
    url: str, prompts: list[list[int]], output_len: int, streams: int
) -> tuple[int, int, str]:
    import aiohttp

    work = _BenchServingLike()
    sem = asyncio.Semaphore(streams)

    async def one(ids: list[int]) -> dict:
        # bench_serving opens a session per request, with a 10 MB read buffer and a 6 h timeout.
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=6 * 3600), read_bufsize=10 * 2**20)
        async with sem, session:
            out = work.new_request()
            async with session.post(url + "/generate", json=_payload(ids, output_len)) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"HTTP {resp.status}: {await resp.text()}")
                async for line in resp.content:
                    work.on_line(out, line)
            return out

    outs = await asyncio.gather(*(one(ids) for ids in prompts))
    return work.chunks, sum(o["tokens"] for o in outs), work.parser


async def _httpx_client(url: str, prompts: list[list[int]], output_len: int, streams: int) -> tuple[int, int, str]:
    import httpx

    work = _BenchServingLike()
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:

        async def one(ids: list[int]) -> dict:
            out = work.new_request()
            async with client.stream("POST", url + "/generate", json=_payload(ids, output_len)) as resp:
                if resp.status_code != 200:
                    raise RuntimeError(f"HTTP {resp.status_code}: {(await resp.aread())[:200]!r}")
                async for line in resp.aiter_lines():
                    work.on_line(out, line.encode())
            return out

        outs = await asyncio.gather(*(one(ids) for ids in prompts))
    return work.chunks, sum(o["tokens"] for o in outs), f"{work.parser}, httpx {httpx.__version__}"


def _perfgate_client(url: str, model: str, requests: int, output_len: int, streams: int) -> dict:
    from perfgate.load import ClientLimits, run_workload
    from perfgate.profile import Workload

    w = Workload(
        name="overhead",
        num_prompts=requests,
        concurrency=streams,
        input_len=INPUT_LEN,
        output_len=output_len,
        warmup_requests=0,
    )
    # The whole call, as for the other clients: opening connections and preparing included,
    # not only the measured phase that perfgate's self-check covers (reported beside it).
    cpu0, t0 = time.process_time(), time.monotonic()
    run = run_workload(url, w, model=model, limits=ClientLimits(max_lag_p99_ms=1e9, max_cpu_share=1e9))
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    failed = [r.error for r in run.records if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} perfgate requests failed; first: {failed[0]}")
    c = run.client
    return {
        "cpu_s": cpu,
        "wall_s": wall,
        "chunks": c.chunks,
        "output_tokens": sum(r.output_tokens or 0 for r in run.records),
        "loop_lag_p99_ms": c.loop_lag_p99_ms,
        "notes": f"httptools protocol, {c.event_loop}; measured phase alone {c.cpu_us_per_chunk:.1f} us/chunk",
    }


def worker(client: str, url: str, model: str, requests: int, output_len: int, streams: int) -> dict:
    if client.startswith("perfgate"):
        os.environ["PERFGATE_EVENT_LOOP"] = "asyncio" if client == "perfgate-asyncio" else "uvloop"
        return _perfgate_client(url, model, requests, output_len, streams)
    prompts = _prompts(requests)
    run = _bench_serving_client if client == "bench_serving" else _httpx_client
    cpu0, t0 = time.process_time(), time.monotonic()
    chunks, tokens, notes = asyncio.run(run(url, prompts, output_len, streams))
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    return {"cpu_s": cpu, "wall_s": wall, "chunks": chunks, "output_tokens": tokens, "notes": notes}


def _run_worker(client: str, url: str, model: str, requests: int, output_len: int, streams: int) -> dict:
    argv = [
        sys.executable,
        __file__,
        "--worker",
        client,
        "--url",
        url,
        "--model",
        model,
        "--requests",
        str(requests),
        "--chunks",
        str(output_len),
        "--streams",
        str(streams),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{client} client failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = requests * output_len
    if res["chunks"] != expected or res["output_tokens"] != expected:
        raise SystemExit(f"{client}: {res['chunks']} chunks / {res['output_tokens']} tokens, expected {expected}")
    res["cpu_us_per_chunk"] = res["cpu_s"] / res["chunks"] * 1e6
    res["chunks_per_cpu_s"] = res["chunks"] / res["cpu_s"]
    res["chunks_per_s"] = res["chunks"] / res["wall_s"]
    res["cpu_share"] = res["cpu_s"] / res["wall_s"]
    res["requests"], res["chunks_per_request"], res["streams"] = requests, output_len, streams
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, default=1024, help="concurrent streams (= requests per client)")
    p.add_argument("--chunks", type=int, default=64, help="streamed chunks (tokens) per request")
    p.add_argument("--httpx-chunks", type=int, default=64, help="chunks per request for the (slow) httpx client")
    p.add_argument("--clients", default=",".join(CLIENTS), help="comma-separated subset of " + ", ".join(CLIENTS))
    p.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--model", default="", help=argparse.SUPPRESS)
    p.add_argument("--requests", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.url, a.model, a.requests, a.chunks, a.streams)))
        return

    from perfgate.profile import ServerSpec
    from perfgate.server import start_server

    sim = {
        "zero_cost": True,
        # The client alone: the toy model's answers would add the server's cost per token.
        "tape_answers": True,
        "startup_delay_s": 0.1,
        "gpus": 1,
        "max_total_tokens": 10_000_000,
        "max_running_requests": max(a.streams, 1),
    }
    spec = ServerSpec(kind="simulator", sim=sim, startup_timeout_s=60.0, shutdown_timeout_s=10.0)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as logs, ExitStack() as stack:
        server = start_server(spec, log_dir=Path(logs), stack=stack)
        for client in a.clients.split(","):
            chunks = a.httpx_chunks if client == "httpx" else a.chunks
            results[client] = r = _run_worker(client, server.base_url, server.model, a.streams, chunks, a.streams)
            print(
                f"{client:>13}: {r['cpu_us_per_chunk']:7.1f} CPU us/chunk, {r['chunks_per_cpu_s']:9,.0f} chunks/CPU-s, "
                f"{r['chunks_per_s']:9,.0f} chunks/s achieved ({r['chunks']:,} chunks in {r['wall_s']:.1f} s, "
                f"CPU {r['cpu_share']:.0%}) [{r['notes']}]",
                flush=True,
            )
    summary: dict[str, object] = {"streams": a.streams, "load_average_1m": round(os.getloadavg()[0], 2)}
    for ours in ("perfgate", "perfgate-asyncio"):
        if ours in results and "bench_serving" in results:
            ratio = results[ours]["cpu_us_per_chunk"] / results["bench_serving"]["cpu_us_per_chunk"]
            print(f"{ours} / bench_serving CPU per chunk: {ratio:.2f} (target <= 0.5)")
            key = ours.replace("-", "_")
            summary.update({f"{key}_vs_bench_serving_cpu_ratio": round(ratio, 3), f"{key}_target_met": ratio <= 0.5})
    for c, r in results.items():
        key = c.replace("-", "_")
        summary.update(
            {
                f"{key}_{k}": round(r[k], 2)
                for k in ("cpu_us_per_chunk", "chunks_per_cpu_s", "chunks_per_s", "cpu_share", "chunks")
            }
        )
    if "httpx" in results:
        summary["httpx_chunks_per_request"] = a.httpx_chunks
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
