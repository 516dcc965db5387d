"""run_slice, keep_trace, read_table and tokens_between: each way the slice can come up empty is a note."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import re
import threading
import time
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from perfgate.explain import (
    NO_ENDPOINT,
    ExplainError,
    KernelRow,
    ProfileTable,
    compare,
    keep_trace,
    read_table,
    run_slice,
    tokens_between,
)
from perfgate.explain._run import ExplainResult
from perfgate.load import Progress
from perfgate.load._records import RequestRecord
from perfgate.profile import ExplainSpec
from tests.support import loopback_http

SPEC = ExplainSpec(enabled=True, num_steps=3, timeout_s=2.0)


def progress(done: int, total: int = 10, warmup: bool = False) -> Progress:
    return Progress(done=done, total=total, in_flight=1, errors=0, output_tokens=0, elapsed_s=0.1, warmup=warmup)


def repeat(steps: list[int], records: list[RequestRecord] | None = None, pause_s: float = 0.0) -> Any:
    def run(on_progress: Any) -> Any:
        for done in steps:
            on_progress(progress(done))
            time.sleep(pause_s)
        return SimpleNamespace(records=records or [], end_s=time.monotonic())

    return run


class Writes(http.server.BaseHTTPRequestHandler):
    """A server that profiles as SGLang does: the trace is written before /start_profile answers."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        events = [{"ph": "X", "cat": "kernel", "name": "void gemm<1>()", "ts": i * 10, "dur": 5} for i in range(6)]
        Path(body["output_dir"], "perfgate-TP-0.trace.json").write_text(json.dumps({"traceEvents": events}))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class Missing(Writes):
    def do_POST(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


def url(server: http.server.ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_a_slice_is_captured_reduced_and_kept_compressed(tmp_path: Path) -> None:
    with loopback_http(Writes) as server:
        res = run_slice(repeat([0, 1, 5, 10]), base_url=url(server), spec=SPEC, folder=tmp_path, activities=["CPU"])
    assert res.table is not None and not res.note
    assert res.table.rows[0].key == "gemm" and res.table.rows[0].calls == 6 and res.table.steps == 3
    assert res.trace_path.endswith(".trace.json.gz") and not (tmp_path / "perfgate-TP-0.trace.json").exists()
    assert json.loads(gzip.decompress(Path(res.trace_path).read_bytes()))["traceEvents"][0]["name"] == "void gemm<1>()"
    assert res.capture_s is not None and res.reduce_s is not None
    assert "in no gated metric" in res.excluded


class WritesHostile(Writes):
    """A trace with a NaN and an Infinity duration (the profiler's JSON allows neither)."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        events = [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": i * 10, "dur": 5} for i in range(4)]
        text = json.dumps({"traceEvents": events}).replace('"dur": 5}', '"dur": NaN}', 1)
        Path(body["output_dir"], "perfgate-TP-0.trace.json").write_text(
            text.replace('"dur": 5}', '"dur": Infinity}', 1)
        )
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_events_without_a_measured_time_are_left_out_with_a_note(tmp_path: Path) -> None:
    with loopback_http(WritesHostile) as server:
        res = run_slice(repeat([0, 1, 5, 10]), base_url=url(server), spec=SPEC, folder=tmp_path, activities=["CPU"])
    assert res.table is not None and res.table.rows[0].calls == 2
    assert (
        "2 kernel events of perfgate-TP-0.trace.json left out: their ts or dur is NaN, infinite, a negative "
        "duration or beyond any measured time"
    ) in res.notes
    json.dumps(res.to_dict(), allow_nan=False)


class VllmWrites(http.server.BaseHTTPRequestHandler):
    """vLLM's way, into the folder it was started with: the front end's trace (host operators of
    the HTTP server, no steps) sorts first; the worker's holds the annotated steps."""

    trace_dir: Path

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/start_profile":
            prefix = body["profile_prefix"]
            front = [{"ph": "X", "cat": "cpu_op", "name": "uvicorn::recv", "ts": 0, "dur": 50}]
            steps = [
                {"ph": "X", "cat": "user_annotation", "name": f"execute_context_0(0)_generation_8({8})", "ts": i * 10}
                for i in range(4)
            ]
            worker = [
                *steps,
                *({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": i * 10, "dur": 6} for i in range(4)),
            ]
            (self.trace_dir / f"{prefix}_async_llm.pt.trace.json").write_text(json.dumps({"traceEvents": front}))
            (self.trace_dir / f"{prefix}_dp0_pp0_tp0.pt.trace.json").write_text(json.dumps({"traceEvents": worker}))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_of_a_server_that_writes_into_its_own_folder_the_stepped_trace_is_reduced(tmp_path: Path) -> None:
    trace_dir = tmp_path / "vllm-traces"
    trace_dir.mkdir()
    handler = type("Handler", (VllmWrites,), {"trace_dir": trace_dir})
    spec = ExplainSpec(enabled=True, num_steps=4, timeout_s=5.0, server_trace_dir=str(trace_dir))
    folder = tmp_path / "run"
    with loopback_http(handler) as server:
        res = run_slice(repeat([0, 1, 5, 10]), base_url=url(server), spec=spec, folder=folder, activities=["CPU"])
    assert res.table is not None and not res.note, res.note
    assert res.table.source == "cpu_op" and res.table.rows[0].key == "aten::mm"
    assert res.table.step_kinds == {"DECODE": 4} and res.table.step_tokens == {"DECODE": 32}
    assert any("2 trace files" in n and "_dp0_pp0_tp0.pt.trace.json is reduced" in n for n in res.notes), res.notes
    assert Path(res.trace_path).parent == folder and not list(trace_dir.iterdir())


def test_a_server_without_the_endpoint_gets_one_note(tmp_path: Path) -> None:
    with loopback_http(Missing) as server:
        res = run_slice(repeat([1, 5]), base_url=url(server), spec=SPEC, folder=tmp_path, activities=["CPU"])
    assert res.table is None and res.note == f"{NO_ENDPOINT} (/start_profile answered 404)"
    assert res.lines() == [f"explain: {NO_ENDPOINT} (/start_profile answered 404)"]


class NeverWrites(Writes):
    """vLLM started after its load ended (a CI run of 2026-12-03): it answers, and no step comes."""

    def do_POST(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_load_that_ends_before_the_capture_says_so(tmp_path: Path) -> None:
    trace_dir = tmp_path / "vllm-traces"
    trace_dir.mkdir()
    spec = ExplainSpec(enabled=True, num_steps=4, timeout_s=1.0, server_trace_dir=str(trace_dir))
    with loopback_http(NeverWrites) as server:
        res = run_slice(repeat([5]), base_url=url(server), spec=spec, folder=tmp_path / "run", activities=["CPU"])
    assert res.table is None and res.note.startswith("no trace file appeared"), res.note
    (hint,) = res.notes
    assert re.fullmatch(
        r"the extra repeat's load ended \d+\.\d s before the capture did: the server may have profiled fewer "
        r"than 4 steps, or none; give the workload more requests \(the capture starts once a tenth of them "
        r"completed\) or ask for fewer \[explain\] num_steps",
        hint,
    )
    assert hint in res.status()


def test_the_load_ends_where_its_requests_end_not_where_the_repeat_returns(tmp_path: Path) -> None:
    """The repeat goes on after its load (the sampled answers are scored): a capture that outlasted
    the load itself is still named, however long the repeat took to return."""
    trace_dir = tmp_path / "vllm-traces"
    trace_dir.mkdir()
    spec = ExplainSpec(enabled=True, num_steps=4, timeout_s=1.0, server_trace_dir=str(trace_dir))

    def run(on_progress: Any) -> Any:
        on_progress(progress(5))
        ended = time.monotonic()
        time.sleep(spec.timeout_s * 2.5)  # scoring the load's answers, after the load
        return SimpleNamespace(records=[], end_s=ended)

    with loopback_http(NeverWrites) as server:
        res = run_slice(run, base_url=url(server), spec=spec, folder=tmp_path / "run", activities=["CPU"])
    assert any(n.startswith("the extra repeat's load ended") for n in res.notes), res.notes


def test_a_load_that_outlasts_the_capture_adds_no_note(tmp_path: Path) -> None:
    with loopback_http(Writes) as server:
        res = run_slice(
            repeat([1, 5, 10], pause_s=0.5), base_url=url(server), spec=SPEC, folder=tmp_path, activities=["CPU"]
        )
    assert res.table is not None and not res.note and not res.notes, res.notes


def test_a_repeat_that_ends_before_its_load_holds_profiles_nothing(tmp_path: Path) -> None:
    res = run_slice(repeat([0]), base_url="http://127.0.0.1:9", spec=SPEC, folder=tmp_path, activities=["CPU"])
    assert res.note == "the extra repeat finished before its load held; nothing was profiled"


def test_the_warmup_never_triggers(tmp_path: Path) -> None:
    def run(on_progress: Any) -> Any:
        on_progress(progress(10, warmup=True))
        return SimpleNamespace(records=[], end_s=time.monotonic())

    res = run_slice(run, base_url="http://127.0.0.1:9", spec=SPEC, folder=tmp_path, activities=["CPU"])
    assert "nothing was profiled" in res.note


def test_an_unwritable_folder_is_a_note(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    res = run_slice(repeat([5]), base_url="http://127.0.0.1:9", spec=SPEC, folder=blocker / "p", activities=["CPU"])
    assert "cannot be made" in res.note


def test_tokens_between_counts_chunks_in_the_window() -> None:
    r = RequestRecord(index=0, input_tokens=1, requested_output_tokens=4, start_s=100.0)
    r.chunk_offsets_s, r.chunk_tokens = array("f", [0.5, 1.5, 2.5]), array("H", [1, 2, 3])
    assert tokens_between(SimpleNamespace(records=[r]), 101.0, 102.9) == 5  # type: ignore[arg-type]


def test_keep_trace(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text("x" * 100)
    assert keep_trace(big, max_bytes=10) == (
        "",
        "the trace (0.0 MB) was larger than [explain] max_trace_mb and was not kept",
    )
    assert not big.exists()
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(b"{}"))
    assert keep_trace(gz, max_bytes=1000) == (str(gz), "")
    gone = keep_trace(tmp_path / "none.json", max_bytes=1000)
    assert gone[0] == "" and "was not kept" in gone[1]


def table(step_ms: float) -> ProfileTable:
    return ProfileTable(
        "kernel", 1, step_ms, step_ms, None, 1, 1, (KernelRow("k", "k", "", 1, step_ms, step_ms, None, 1.0),)
    )


def test_read_table(tmp_path: Path) -> None:
    assert read_table(tmp_path / "none.json") is None
    good = tmp_path / "good.json"
    good.write_text(json.dumps(table(2.0).to_dict()))
    assert read_table(good) == table(2.0)
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ExplainError, match="not valid JSON"):
        read_table(bad)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(ExplainError, match="FIFO"):
        read_table(fifo)


def test_compare() -> None:
    res = ExplainResult(table=table(4.0))
    compare(res, None, "")
    assert res.diff is None and "no reference profile" in res.note
    res = ExplainResult(table=table(4.0))
    compare(res, table(2.0), "ref.json")
    assert res.diff is not None and res.diff.rows[0].change_ms_per_step == 2.0 and res.reference_path == "ref.json"
    assert res.lines()[0] == "explain: step 2 -> 4 ms (+100 %) over the profiled steps"
    assert json.loads(json.dumps(res.to_dict()))["diff"]["rows"][0]["change_ratio"] == 1.0


def test_status_is_one_line_of_what_the_slice_gave_or_why_not() -> None:
    stored = "stored as the reference profile of the baseline"
    assert ExplainResult(table=table(4.0), notes=[stored]).status() == f"profiled 1 step (kernel); {stored}"
    compared = ExplainResult(table=table(4.0))
    compare(compared, table(2.0), "ref.json")
    assert compared.status() == "compared with the reference profile ref.json"
    why = "not stored as the reference profile: the baseline was not recorded"
    assert ExplainResult(note="the gzip stream is truncated", notes=[why]).status() == (
        f"the gzip stream is truncated; {why}"
    )
    assert ExplainResult().status() == "nothing profiled"


def test_no_thread_is_left_behind(tmp_path: Path) -> None:
    # By name: the loopback server's handler threads are daemons that it does not join, so a
    # count of all threads raced with their exit (seen once in 1,300 tests).
    with loopback_http(Missing) as server:
        run_slice(repeat([5]), base_url=url(server), spec=SPEC, folder=tmp_path, activities=["CPU"])
    assert [t for t in threading.enumerate() if t.name == "perfgate-explain"] == []
