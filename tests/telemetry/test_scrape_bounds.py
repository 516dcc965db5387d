"""What one scrape of a metrics endpoint may cost (bytes, series, time), and what happens past it:
the source is said to be dropped, once, and the run goes on without it."""

from __future__ import annotations

import http.server
import math
import time
import tracemalloc
from collections.abc import Iterator
from typing import ClassVar

import pytest

from perfgate.errors import TelemetryError
from perfgate.telemetry import DcgmSource, ServerMonitor, open_server_monitor, parse_dcgm_text, parse_server_metrics
from perfgate.telemetry._scrape import ScrapeLimits
from tests.support import loopback_http
from tests.telemetry.test_server_metrics import FakeServer, sglang

MIB = 2**20
SMALL = ScrapeLimits(max_bytes=MIB, max_series=1_000, max_read_series=100, deadline_s=0.5)


class _Endpoint(http.server.BaseHTTPRequestHandler):
    """Serves ``answers`` in turn (the last one forever): (body, announce its length, seconds between 4 KiB chunks)."""

    answers: ClassVar[list[tuple[bytes, bool, float]]] = []
    served: ClassVar[list[int]] = []

    def do_GET(self) -> None:
        self.served.append(1)
        data, announce, every_s = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.send_response(200)
        if announce:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            for i in range(0, len(data), 4096):
                self.wfile.write(data[i : i + 4096])
                if every_s:
                    self.wfile.flush()
                    time.sleep(every_s)
        except OSError:
            pass  # the client stopped reading: what a bound does

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[tuple[str, type[_Endpoint]]]:
    handler = type("Handler", (_Endpoint,), {"answers": [], "served": []})
    with loopback_http(handler) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler


def padded(text: str, series: int = 0, size: int = 0) -> bytes:
    """``text`` plus ``series`` series of an unrelated metric, or padding comments up to ``size`` bytes."""
    extra = "".join(f'other_metric{{i="{i}"}} 1\n' for i in range(series))
    pad = "" if not size else "# " + "x" * 1000 + "\n"
    return (text + extra + pad * (size // len(pad) if pad else 0)).encode()


@pytest.mark.parametrize("announce", [True, False], ids=["content-length", "streamed"])
def test_a_5_mib_answer_is_refused_at_1_mib_without_holding_it(endpoint, announce):
    url, handler = endpoint
    handler.answers.append((padded(sglang(), size=5 * MIB), announce, 0.0))
    tracemalloc.start()
    try:
        with pytest.raises(TelemetryError) as err:
            open_server_monitor(url, "/metrics", limits=SMALL)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(err.value).startswith(f"{url}/metrics ")
    assert "more than the 1 MiB perfgate reads from a metrics endpoint; not read again this run" in str(err.value)
    assert peak < 2 * MIB, f"{peak / MIB:.1f} MiB held for a 5 MiB answer"


def test_too_many_series_are_refused(endpoint):
    url, handler = endpoint
    handler.answers.append((padded(sglang(), series=5_000), True, 0.0))
    with pytest.raises(TelemetryError, match=r"answered 5,0\d\d series, more than the 1,000 perfgate reads"):
        open_server_monitor(url, "/metrics", limits=SMALL)
    # Series of the very metrics perfgate reads have a bound of their own (it parses and keeps them).
    many = "".join(f'sglang:num_running_reqs{{dp_rank="{i}"}} 1\n' for i in range(500))
    handler.answers[0] = (("# TYPE sglang:num_running_reqs gauge\n" + many).encode(), True, 0.0)
    with pytest.raises(TelemetryError, match=r"answered 500 series of the metrics perfgate reads, more than 100"):
        open_server_monitor(url, "/metrics", limits=SMALL)


def test_an_answer_that_trickles_is_cut_at_the_deadline(endpoint):
    url, handler = endpoint
    # 4 KiB every 0.1 s: each read well within any read timeout, the whole answer 2.5 s.
    handler.answers.append((padded(sglang(), size=100_000), False, 0.1))
    t0 = time.monotonic()
    with pytest.raises(TelemetryError, match=r"did not answer within 0.5 s; not read again this run"):
        open_server_monitor(url, "/metrics", limits=SMALL)
    assert time.monotonic() - t0 < 1.5


def test_past_a_bound_mid_run_the_source_is_dropped_once_and_named(endpoint):
    url, handler = endpoint
    small = (sglang().encode(), True, 0.0)
    handler.answers += [small, small, (padded(sglang(), size=5 * MIB), True, 0.0), small]
    now = [0.0]
    monitor = open_server_monitor(url, "/metrics", interval_s=3600, limits=SMALL, clock=lambda: now[0])
    try:
        now[0] = 1.0
        monitor.scrape_now()  # the oversized answer
        monitor.scrape_now()
        monitor.scrape_now()
    finally:
        monitor.stop()
    # open + its first scrape, then the oversized one; nothing asked after it.
    assert len(handler.served) == 3
    assert monitor.dropped.startswith(f"{url}/metrics announced 5.0 MiB, more than the 1 MiB")
    with pytest.raises(TelemetryError) as err:
        monitor.summarize(0.5, 0.9, 0.5, 0.9)
    assert str(err.value) == f"server metrics at {url}/metrics: no scrape after the measured run ({monitor.dropped})"


def test_a_dcgm_exporter_past_a_bound_at_open_is_named(endpoint):
    url, handler = endpoint
    handler.answers.append((padded("", series=5_000), True, 0.0))
    with pytest.raises(TelemetryError, match=rf"dcgm-exporter endpoint .*: {url}/metrics answered 5,000 series"):
        DcgmSource([url + "/metrics"], [], limits=SMALL)


def test_unread_lines_are_not_parsed():
    # 20,000 series of metrics perfgate does not read: filtered by name, never given to the parser.
    text = padded(sglang(), series=20_000).decode().replace("other_metric", "not prometheus {{{")
    t0 = time.process_time()
    assert parse_server_metrics(text).gauges["running"] == 3.0
    assert parse_dcgm_text(text) == []
    assert time.process_time() - t0 < 1.0


@pytest.mark.parametrize("counted", ["NaN", "+Inf"])
def test_a_counter_that_reads_nan_is_not_measured_not_zero(counted):
    broken = sglang(generated=400).replace(
        'sglang:generation_tokens_total{is_streaming="true",model_name="tiny"} 400',
        f'sglang:generation_tokens_total{{is_streaming="true",model_name="tiny"}} {counted}',
    )
    fake = FakeServer([sglang(generated=400), broken])
    m: ServerMonitor = fake.monitor()
    m.scrape_now()
    m.scrape_now()
    w = m.summarize(1.0, 1.0, 0.0, 1.0)
    m.stop()
    assert w.generation_tokens is None and "server_gen_throughput" not in w.metrics()
    assert any("reported NaN or infinite counters (generation_tokens)" in n for n in w.notes)
    assert not math.isnan(w.prompt_tokens or 0.0)


def test_an_endpoint_without_a_monitored_gpu_is_not_polled(endpoint):
    url, handler = endpoint
    other = type("Other", (_Endpoint,), {"answers": [], "served": []})
    gpu = 'DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-{}",Hostname="{}"}} 100\n'
    handler.answers.append((gpu.format("a", "h1").encode(), True, 0.0))
    other.answers.append((gpu.format("b", "h2").encode(), True, 0.0))
    with loopback_http(other) as server:
        source = DcgmSource([url + "/metrics", f"http://127.0.0.1:{server.server_address[1]}/metrics"], ["GPU-a"])
        batch = source.poll(time.monotonic, full=True, counters=True)
        source.close()
    assert len(batch.samples) == 1 and batch.events == ()
    assert (len(handler.served), len(other.served)) == (2, 1)
