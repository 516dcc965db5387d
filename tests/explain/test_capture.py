"""capture_profile over real HTTP on 127.0.0.1: every answer a server can give is a trace or one note."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from perfgate._redact import SECRETS
from perfgate.explain import NO_ENDPOINT, capture_profile, read_trace
from perfgate.explain._capture import _EXTRAS_S, _SETTLED_S
from tests.support import loopback_http


def handler(
    status: int,
    *,
    write: bool = False,
    delay_s: float = 0.0,
    seen: list[str] | None = None,
    error: bytes = b"Internal Server Error: boom",
) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if seen is not None:
                seen.append(self.path)
            if self.path == "/start_profile":
                time.sleep(delay_s)
                if write:
                    out = Path(json.loads(body)["output_dir"])
                    (out / "perfgate-TP-0.trace.json").write_text('{"traceEvents": []}')
            text = b"Start profiling.\n" if status == 200 else error
            self.send_response(status)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def url(server: http.server.ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_a_trace_the_server_wrote_is_found(tmp_path: Path) -> None:
    with loopback_http(handler(200, write=True)) as server:
        cap = capture_profile(url(server), tmp_path / "p", num_steps=3, activities=["CPU"], timeout_s=5)
    assert [p.name for p in cap.traces] == ["perfgate-TP-0.trace.json"] and not cap.note
    assert cap.ended_s >= cap.started_s and cap.capture_s >= cap.request_s


def test_no_endpoint_is_one_note(tmp_path: Path) -> None:
    for status in (404, 405):
        with loopback_http(handler(status)) as server:
            cap = capture_profile(url(server), tmp_path / "p", num_steps=3, activities=["CPU"], timeout_s=5)
        assert cap.traces == () and cap.note == f"{NO_ENDPOINT} (/start_profile answered {status})"


def test_an_error_answer_is_quoted(tmp_path: Path) -> None:
    with loopback_http(handler(500)) as server:
        cap = capture_profile(url(server), tmp_path / "p", num_steps=3, activities=["CPU"], timeout_s=5)
    assert cap.note == "/start_profile answered 500: Internal Server Error: boom"


def test_an_error_answer_quoting_a_key_past_the_cut_shows_none_of_it(tmp_path: Path) -> None:
    # The answer is quoted up to 200 characters: a key at 180 is redacted before the cut.
    key = "sk-explain-" + "9d8c7b6a5f4e3d2c1b0a9d8c7b6a5f4e"
    SECRETS.add(key)
    with loopback_http(handler(500, error=("y" * 180 + key).encode())) as server:
        cap = capture_profile(url(server), tmp_path / "p", num_steps=3, activities=["CPU"], timeout_s=5)
    assert cap.note == "/start_profile answered 500: " + "y" * 180 + "<redacted>"


def test_no_file_is_a_note_after_stop_profile(tmp_path: Path) -> None:
    seen: list[str] = []
    with loopback_http(handler(200, seen=seen)) as server:
        cap = capture_profile(url(server), tmp_path / "p", num_steps=3, activities=["CPU"], timeout_s=1)
    assert cap.traces == () and "no trace file appeared" in cap.note
    assert seen == ["/start_profile", "/stop_profile"]


def test_a_server_that_does_not_answer_in_time_is_stopped(tmp_path: Path) -> None:
    seen: list[str] = []
    with loopback_http(handler(200, delay_s=3, seen=seen)) as server:
        cap = capture_profile(url(server), tmp_path / "p", num_steps=3, activities=["CPU"], timeout_s=1)
    assert "/stop_profile" in seen and "no trace file appeared" in cap.note


def test_nothing_listening(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cap = capture_profile(f"http://127.0.0.1:{port}", tmp_path / "p", num_steps=3, activities=["CPU"], timeout_s=2)
    assert cap.traces == () and cap.note.startswith("/start_profile failed")


class AnswersAtOnce(http.server.BaseHTTPRequestHandler):
    """vLLM's profile endpoints: an empty 200 at once, then what the server does (``after``)."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.after(json.loads(body) if body else {})

    def after(self, body: dict) -> None:
        raise NotImplementedError

    def log_message(self, *args: object) -> None:
        pass


def vllm_like(trace_dir: Path, seen: list[dict]) -> type:
    """vLLM's way: the folder was fixed at start; /start_profile answers at once, the worker writes
    `{prefix}_{rank}` once it has stepped max_iterations times, the front end's trace on /stop_profile."""

    class Handler(AnswersAtOnce):
        def after(self, body: dict) -> None:
            seen.append({"path": self.path, **body})
            prefix = next(s["profile_prefix"] for s in seen if s["path"] == "/start_profile")
            if self.path == "/start_profile":
                # Hostile names with the prefix: a FIFO (moving it would block) and a link out.
                os.mkfifo(trace_dir / f"{prefix}_fifo.pt.trace.json")
                (trace_dir / f"{prefix}_link.pt.trace.json.gz").symlink_to("/etc/hostname")
                time.sleep(0.3)
                (trace_dir / f"{prefix}_dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz").write_bytes(b"worker")
            elif self.path == "/stop_profile":
                (trace_dir / f"{prefix}_async_llm.2.pt.trace.json.gz").write_bytes(b"front end")
                time.sleep(0.3)
                (trace_dir / f"{prefix}_dp0_pp0_tp0_dcp0_ep0_rank0.profiler_out.txt").write_text("table")

    return Handler


def test_a_server_that_writes_where_it_was_started_to_is_asked_by_prefix_and_stopped(tmp_path: Path) -> None:
    trace_dir, out = tmp_path / "server-traces", tmp_path / "run" / "p"
    trace_dir.mkdir()
    # Another capture's file is none of this capture's.
    (trace_dir / "perfgate-0123456789ab_dp0.pt.trace.json.gz").write_bytes(b"old")
    seen: list[dict] = []
    with loopback_http(vllm_like(trace_dir, seen)) as server:
        cap = capture_profile(url(server), out, num_steps=4, activities=["CPU"], timeout_s=10, server_dir=trace_dir)
    start, stop = seen
    assert start["path"] == "/start_profile" and start["max_iterations"] == 4 and "output_dir" not in start
    assert stop["path"] == "/stop_profile", "the front end profiles until it is told to stop"
    prefix = start["profile_prefix"]
    assert prefix.startswith("perfgate-") and prefix != "perfgate-0123456789ab"
    assert [p.name for p in cap.traces] == [f"{prefix}_dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz"]
    assert cap.traces[0].parent == out and cap.traces[0].read_bytes() == b"worker" and not cap.note
    # Everything of this capture's moved with it: the front end's trace and vLLM's operator table,
    # written after the worker's trace; the hostile names stayed, as did the older capture's file.
    assert sorted(p.name for p in out.iterdir()) == [
        f"{prefix}_async_llm.2.pt.trace.json.gz",
        f"{prefix}_dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz",
        f"{prefix}_dp0_pp0_tp0_dcp0_ep0_rank0.profiler_out.txt",
    ]
    assert {p.name for p in trace_dir.iterdir()} == {
        f"{prefix}_fifo.pt.trace.json",
        f"{prefix}_link.pt.trace.json.gz",
        "perfgate-0123456789ab_dp0.pt.trace.json.gz",
    }
    # The slice ends when the worker's file appeared, not when /start_profile answered.
    assert cap.ended_s - cap.started_s >= 0.25 and cap.request_s < cap.ended_s - cap.started_s


def paused_writer(trace_dir: Path, whole: bytes, pause_s: float) -> type:
    """vLLM's worker on a loaded host: it writes the first half of its gzip trace, is descheduled
    for ``pause_s`` (the CI's client saw its loop late by up to 8.8 s), then writes the rest; its
    operator table, which would follow the trace, never comes."""

    class Handler(AnswersAtOnce):
        def after(self, body: dict) -> None:
            if self.path == "/start_profile":
                with open(trace_dir / f"{body['profile_prefix']}_rank0.1.pt.trace.json.gz", "wb") as f:
                    f.write(whole[: len(whole) // 2])
                    f.flush()
                    time.sleep(pause_s)
                    f.write(whole[len(whole) // 2 :])

    return Handler


def test_a_trace_whose_writer_pauses_is_taken_whole(tmp_path: Path) -> None:
    trace_dir, out = tmp_path / "server-traces", tmp_path / "run" / "p"
    trace_dir.mkdir()
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "ts": i, "dur": 1} for i in range(5000)]
    whole = gzip.compress(json.dumps({"traceEvents": events}).encode())
    with loopback_http(paused_writer(trace_dir, whole, pause_s=_EXTRAS_S + 2 * _SETTLED_S)) as server:
        cap = capture_profile(url(server), out, num_steps=4, activities=["CPU"], timeout_s=10, server_dir=trace_dir)
        # Read while the server runs, as the slice does (closing it would wait for the writer).
        (trace,) = cap.traces
        assert not cap.note and trace.read_bytes() == whole
        assert read_trace(trace, root=out)[0] == events


@pytest.mark.parametrize(("failing", "what"), [("rank0.1.pt", "the trace"), ("profiler_out", "the capture's file")])
def test_a_file_that_cannot_be_moved_is_a_note_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str, what: str
) -> None:
    trace_dir, out = tmp_path / "server-traces", tmp_path / "run" / "p"
    trace_dir.mkdir()
    move = shutil.move

    def full_disk(src: Path, dst: Path) -> object:
        if failing in Path(src).name:
            raise OSError(28, "No space left on device")
        return move(src, dst)

    monkeypatch.setattr(shutil, "move", full_disk)
    seen: list[dict] = []
    with loopback_http(vllm_like(trace_dir, seen)) as server:
        cap = capture_profile(url(server), out, num_steps=4, activities=["CPU"], timeout_s=10, server_dir=trace_dir)
    (stuck,) = trace_dir.glob(f"*{failing}*")
    assert cap.note == f"{what} {stuck} could not be moved into {out} ([Errno 28] No space left on device)"
    # The worker's trace is reduced when it moved; when it did not, nothing is.
    assert [p.name for p in cap.traces] == [p.name for p in out.glob("*rank0.1.pt.trace.json.gz")]
    assert bool(cap.traces) == (what != "the trace")


def test_a_server_folder_that_gets_no_file_is_a_note_naming_it(tmp_path: Path) -> None:
    trace_dir = tmp_path / "server-traces"
    trace_dir.mkdir()
    with loopback_http(handler(200)) as server:
        cap = capture_profile(
            url(server), tmp_path / "p", num_steps=3, activities=["CPU"], timeout_s=1, server_dir=trace_dir
        )
    assert cap.traces == () and f"no trace file appeared in {trace_dir} within 1 s" in cap.note
    with loopback_http(handler(404)) as server:
        cap = capture_profile(
            url(server), tmp_path / "p", num_steps=3, activities=["CPU"], timeout_s=1, server_dir=trace_dir
        )
    assert cap.note == (
        f"{NO_ENDPOINT} (/start_profile answered 404); vLLM serves it only when started with "
        "--profiler-config.profiler torch"
    )
