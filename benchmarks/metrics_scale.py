"""compute_metrics on a 100,000-request run: seconds and memory (RSS) it takes, numbers it gives.

Builds the records a 1024-stream run of ``--requests`` requests would leave (``--chunks`` chunks
each, a fixed seed: the same records every time; one chunk in ten carries 2-4 tokens, as a
server batching its stream does, one request in fifty fails), then times
perfgate.metrics.compute_metrics on them and samples the process's VmRSS every 50 ms. The
last stdout line is one JSON object; ``--dump FILE`` writes every metric value, to compare
two implementations (run this once per checkout and diff).

    python benchmarks/metrics_scale.py [--requests 100000] [--chunks 128] [--dump values.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _rss import PeakRss  # noqa: E402  (beside this script)

from perfgate.load import ClientStats, LoadRun, RequestRecord  # noqa: E402
from perfgate.metrics import compute_metrics  # noqa: E402

CONCURRENCY = 1024


def records(requests: int, chunks: int, seed: int = 1) -> tuple[list[RequestRecord], float]:
    """``requests`` records, CONCURRENCY at a time, and the time the last one ended."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    free_at = [100.0] * CONCURRENCY
    for i in range(requests):
        slot = i % CONCURRENCY
        rec = RequestRecord(index=i, input_tokens=256, requested_output_tokens=chunks, start_s=free_at[slot])
        t = rng.uniform(0.05, 0.3)
        offsets, tokens = array("f"), array("H")
        for _ in range(chunks):
            offsets.append(t)
            tokens.append(rng.randint(2, 4) if rng.random() < 0.1 else 1)
            t += rng.uniform(0.015, 0.03)
        rec.chunk_offsets_s, rec.chunk_tokens = offsets, tokens
        rec.ttft_s = float(offsets[0])
        rec.latency_s = float(offsets[-1])
        rec.output_tokens = sum(tokens)
        if rng.random() < 0.02:
            rec.error = "HTTP 500: injected"
        free_at[slot] = rec.start_s + rec.latency_s
        out.append(rec)
    return out, max(free_at)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--chunks", type=int, default=128)
    p.add_argument("--dump", type=Path, help="write every metric value to this JSON file")
    a = p.parse_args()
    recs, end_s = records(a.requests, a.chunks)
    client = ClientStats(
        cpu_s=1.0, wall_s=1.0, chunks=0, cpu_us_per_chunk=0.0, cpu_share=0.0, loop_lag_p99_ms=0.0, loop_lag_max_ms=0.0
    )
    run = LoadRun("scale", "sglang", 100.0, end_s, recs, client, 0, False)
    gc.collect()
    with PeakRss() as rss:
        t0 = time.perf_counter()
        metrics = compute_metrics(run, target_concurrency=CONCURRENCY)
        seconds = time.perf_counter() - t0
    if a.dump:
        a.dump.write_text(json.dumps(metrics.values, indent=1, sort_keys=True))
    res = {
        "requests": a.requests,
        "chunks_per_request": a.chunks,
        "tokens": int(metrics.values["total_output_tokens"]),
        "compute_s": round(seconds, 2),
        "records_rss_mb": round(rss.before_mb, 1),
        "peak_above_records_mb": round(rss.peak_mb - rss.before_mb, 1),
        "output_throughput": round(metrics.values["output_throughput"], 3),
        "p99_itl_ms": round(metrics.values["p99_itl_ms"], 6),
        "steady_mean_tpot_ms": round(metrics.values.get("steady_mean_tpot_ms", float("nan")), 6),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(res))


if __name__ == "__main__":
    main()
