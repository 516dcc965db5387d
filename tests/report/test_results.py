"""The results JSON: every request's record in the file, written in the memory of one request."""

from __future__ import annotations

import gc
import json
import tracemalloc
from array import array
from pathlib import Path

from perfgate import _json
from perfgate.load import ClientStats, LoadRun, RequestRecord
from perfgate.metrics import compute_metrics
from perfgate.report import results_document, write_results
from perfgate.session import RepeatResult, RunSummary, WorkloadResult

CHUNKS = 64


def _record(i: int) -> RequestRecord:
    rec = RequestRecord(index=i, input_tokens=32, requested_output_tokens=CHUNKS, start_s=100.0 + i * 1e-3)
    rec.chunk_offsets_s = array("f", [0.05 + 0.01 * k for k in range(CHUNKS)])
    rec.chunk_tokens = array("H", [1] * CHUNKS)
    rec.ttft_s, rec.latency_s, rec.output_tokens = 0.05, 0.05 + 0.01 * (CHUNKS - 1), CHUNKS
    return rec


def _summary(requests: int) -> RunSummary:
    client = ClientStats(
        cpu_s=1.0,
        wall_s=10.0,
        chunks=requests * CHUNKS,
        cpu_us_per_chunk=1.0,
        cpu_share=0.1,
        loop_lag_p99_ms=1.0,
        loop_lag_max_ms=2.0,
    )
    records = [_record(i) for i in range(requests)]
    load = LoadRun("w", "sglang", 100.0, 100.0 + requests * 1e-3 + 1.0, records, client, 0, False)
    metrics = compute_metrics(load, target_concurrency=64)
    result = WorkloadResult(
        workload="w", repeats=[RepeatResult(load, metrics, None, "telemetry disabled")], invalid_reasons=[]
    )
    return RunSummary("p", "p.toml", None, (), "", "", (result,), {"w": ()}, {"w": 0.0})


def _peak_while_writing(summary: RunSummary, out: Path) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        write_results(summary, out)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_every_request_is_in_the_file_as_a_list_of_objects(tmp_path):
    summary = _summary(50)
    (path, *_) = write_results(summary, tmp_path).written
    doc = json.loads(path.read_text())
    requests = doc["workloads"][0]["repeats"][0]["requests"]
    assert len(requests) == 50 and requests[3]["start_s"] == summary.workloads[0].repeats[0].load.records[3].start_s
    assert requests[0]["chunk_tokens"] == [1] * CHUNKS and len(requests[0]["chunk_offsets_s"]) == CHUNKS
    # The document in memory reads the same as the file, made at once or request by request.
    assert results_document(summary)["workloads"][0]["repeats"][0]["requests"] == requests
    streamed = results_document(summary, stream_requests=True)["workloads"][0]["repeats"][0]["requests"]
    assert (
        len(streamed) == 50
        and list(streamed) == requests
        and streamed[3] == requests[3]
        and streamed[:2] == requests[:2]
    )
    assert path.read_text().startswith('{\n "correctness": null,\n "created": ')


def test_writing_the_results_takes_the_memory_of_a_request_not_of_the_run(tmp_path):
    write_results(_summary(10), tmp_path / "imports")  # the plots' first import is not the writer's
    small = _peak_while_writing(_summary(300), tmp_path / "small")
    large = _peak_while_writing(_summary(3_000), tmp_path / "large")
    # Built at once, each request's 64 offsets would add ~15 KB to the peak; streamed, only the
    # plots keep anything per request (its TTFT and TPOT).
    per_request = (large - small) / 2_700
    print(f"peak while writing: {small:,} B for 300 requests, {large:,} B for 3,000 ({per_request:.0f} B per request)")
    assert per_request < 300, (small, large)


def test_nan_and_infinity_are_written_as_null_never_as_invalid_json(tmp_path):
    # NaN or Infinity in a results file made perfgate compare refuse it.
    summary = _summary(3)
    summary.workloads[0].repeats[0].metrics.values.update(p99_ttft_ms=float("nan"), output_throughput=float("inf"))
    assert write_results(summary, tmp_path).failed == []
    (path,) = tmp_path.glob("results-*.json")
    values = _json.loads(path.read_text())["workloads"][0]["repeats"][0]["values"]
    assert values["p99_ttft_ms"] is None and values["output_throughput"] is None
