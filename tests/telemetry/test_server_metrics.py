"""The server's own /metrics: SGLang 0.5.23's and vLLM's names, windows over a run, every failure named."""

from __future__ import annotations

import time

import httpx
import pytest

from perfgate.errors import TelemetryError
from perfgate.telemetry import ServerMonitor, open_server_monitor, parse_server_metrics
from tests.sim.conftest import start_sim

# SGLang 0.5.23 with --enable-metrics serves multiprocess metrics (srt/observability/
# metrics_collector.py): scheduler gauges labelled model_name, engine_type, tp_rank, pp_rank,
# moe_ep_rank (+ dp_rank with DP attention), tokenizer counters labelled model_name plus
# is_streaming or cache_source; a counter appears only once it has been incremented.
SGLANG = """\
# HELP sglang:num_running_reqs Multiprocess metric
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{engine_type="unified",model_name="tiny",moe_ep_rank="0",pp_rank="0",tp_rank="0"}} {running}
# HELP sglang:num_queue_reqs Multiprocess metric
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{engine_type="unified",model_name="tiny",moe_ep_rank="0",pp_rank="0",tp_rank="0"}} {queued}
# HELP sglang:token_usage Multiprocess metric
# TYPE sglang:token_usage gauge
sglang:token_usage{{engine_type="unified",model_name="tiny",moe_ep_rank="0",pp_rank="0",tp_rank="0"}} 0.25
# HELP sglang:gen_throughput Multiprocess metric
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{{engine_type="unified",model_name="tiny",moe_ep_rank="0",pp_rank="0",tp_rank="0"}} 1500.0
# HELP sglang:cache_hit_rate Multiprocess metric
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{engine_type="unified",model_name="tiny",moe_ep_rank="0",pp_rank="0",tp_rank="0"}} 0.9
# HELP sglang:prompt_tokens_total Multiprocess metric
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{is_streaming="true",model_name="tiny"}} {prompt}
sglang:prompt_tokens_total{{is_streaming="false",model_name="tiny"}} 10.0
# HELP sglang:generation_tokens_total Multiprocess metric
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{is_streaming="true",model_name="tiny"}} {generated}
{cached}"""
CACHED = """\
# HELP sglang:cached_tokens_total Multiprocess metric
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{{cache_source="device",model_name="tiny"}} {device}
sglang:cached_tokens_total{{cache_source="host",model_name="tiny"}} {host}
"""

BROKEN = '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="tiny" 3.0\n'

VLLM = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 7.0
vllm:num_requests_running{engine="1",model_name="tiny"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0
vllm:num_requests_waiting{engine="1",model_name="tiny"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.3
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 800.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 200.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 800.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 300.0
"""


def sglang(running=3.0, queued=5.0, prompt=1000.0, generated=400.0, device=None, host=0.0) -> str:
    cached = CACHED.format(device=device, host=host) if device is not None else ""
    return SGLANG.format(running=running, queued=queued, prompt=prompt, generated=generated, cached=cached)


def test_sglang_names_are_read_and_series_combined():
    r = parse_server_metrics(sglang(device=300.0, host=20.0))
    assert r.engine == "sglang"
    assert r.counters == {"prompt_tokens": 1010.0, "generation_tokens": 400.0, "cached_tokens": 320.0}
    assert r.gauges == {
        "running": 3.0,
        "queued": 5.0,
        "token_usage": 0.25,
        "gen_throughput": 1500.0,
        "cache_hit_rate": 0.9,
    }


def test_nan_and_inf_samples_are_no_reading():
    text = sglang(device=300.0).replace("sglang:cache_hit_rate{engine_type", 'sglang:cache_hit_rate{x="1",engine_type')
    text = text.replace("} 0.9\n", "} NaN\n").replace("} 0.25\n", "} +Inf\n")
    r = parse_server_metrics(text)
    assert "cache_hit_rate" not in r.gauges and "token_usage" not in r.gauges and r.gauges["running"] == 3.0


def test_replicas_count_once_and_data_parallel_ranks_add_up():
    line = 'sglang:num_running_reqs{{dp_rank="{dp}",model_name="m",tp_rank="{tp}"}} {n}\n'
    usage = 'sglang:token_usage{{dp_rank="{dp}",model_name="m",tp_rank="{tp}"}} {n}\n'
    text = "# TYPE sglang:num_running_reqs gauge\n" + "".join(
        line.format(dp=dp, tp=tp, n=n) for dp, tp, n in ((0, 0, 4), (0, 1, 4), (1, 2, 6), (1, 3, 6))
    )
    text += "# TYPE sglang:token_usage gauge\n" + "".join(
        usage.format(dp=dp, tp=tp, n=n) for dp, tp, n in ((0, 0, 0.2), (0, 1, 0.2), (1, 2, 0.6), (1, 3, 0.6))
    )
    assert parse_server_metrics(text).gauges == {"running": 10.0, "token_usage": pytest.approx(0.4)}


def test_vllm_names_are_read():
    r = parse_server_metrics(VLLM)
    assert r.engine == "vllm"
    assert r.gauges == {"running": 12.0, "queued": 2.0, "token_usage": 0.4}
    assert r.counters == {
        "cache_queries": 800.0,
        "cached_tokens": 200.0,
        "prompt_tokens": 800.0,
        "generation_tokens": 300.0,
    }


def test_text_of_another_exporter_has_no_engine():
    assert (
        parse_server_metrics("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 3.0\n").engine == ""
    )
    # Lines perfgate does not read are not even parsed; a broken one it reads is an error.
    assert parse_server_metrics("not prometheus {{{\n" + sglang()).gauges["running"] == 3.0
    with pytest.raises(ValueError):
        parse_server_metrics(BROKEN)


class FakeServer:
    """Serves ``texts`` in turn (the last one forever) and keeps the clock: each scrape is one second."""

    def __init__(self, texts: list[str], status: int = 200) -> None:
        self.texts = texts
        self.status = status
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.now += 1.0
        text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        return httpx.Response(self.status, text=text)

    def monitor(self) -> ServerMonitor:
        return ServerMonitor(
            "http://sim/metrics", interval_s=60, clock=self.clock, transport=httpx.MockTransport(self.handler)
        )


def test_counters_are_differenced_between_the_scrapes_that_bracket_the_run():
    fake = FakeServer(
        [
            sglang(prompt=1000, generated=400),  # t 0 -> 1: before
            sglang(running=8, queued=2, prompt=1500, generated=500),  # t 1 -> 2: inside
            sglang(running=6, queued=0, prompt=3000, generated=900, device=1200),  # t 2 -> 3: after
        ]
    )
    m = fake.monitor()
    for _ in range(3):
        m.scrape_now()
    w = m.summarize(1.0, 2.0, 0.5, 1.5)
    # SGLang creates its cache-hit counter at the first hit: absent before means none yet.
    assert (w.prompt_tokens, w.generation_tokens, w.cached_tokens) == (2000.0, 500.0, 1200.0)
    assert w.metrics() == {
        "server_cache_hit_rate": 0.6,
        "server_gen_throughput": 500.0,
        "server_running_reqs_mean": 8.0,
        "server_queue_reqs_mean": 2.0,
        "server_token_usage_mean": 0.25,
        "server_reported_gen_throughput": 1500.0,
    }
    assert w.cache_hit_source == "cached_tokens / prompt_tokens over the measured run"
    assert (w.counter_start_s, w.counter_end_s, w.gauge_samples) == (1.0, 2.0, 1)
    m.stop()


def test_without_prefix_hits_the_rate_is_zero_not_unknown_and_a_reset_is_not_used():
    fake = FakeServer([sglang(prompt=1000, generated=400), sglang(prompt=1500, generated=100)])
    m = fake.monitor()
    m.scrape_now()
    m.scrape_now()
    w = m.summarize(1.0, 1.0, 0.0, 1.0)
    assert w.metrics()["server_cache_hit_rate"] == 0.0
    assert "server_gen_throughput" not in w.metrics() and w.generation_tokens is None
    assert any("went backwards (generation_tokens)" in n for n in w.notes)


def test_vllm_hit_rate_is_hits_over_queries():
    queried = VLLM.replace(
        'queries_total{engine="0",model_name="tiny"} 800.0', 'queries_total{engine="0",model_name="tiny"} 1800.0'
    )
    hit = queried.replace(
        'hits_total{engine="0",model_name="tiny"} 200.0', 'hits_total{engine="0",model_name="tiny"} 450.0'
    )
    fake = FakeServer([VLLM, hit])
    m = fake.monitor()
    m.scrape_now()
    m.scrape_now()
    w = m.summarize(1.0, 1.0, 0.0, 1.0)
    assert w.metrics()["server_cache_hit_rate"] == 0.25
    assert w.cache_hit_source.startswith("prefix_cache_hits / prefix_cache_queries")


def test_a_run_that_no_scrape_brackets_is_a_telemetry_error():
    fake = FakeServer([sglang()])
    m = fake.monitor()
    m.scrape_now()
    with pytest.raises(TelemetryError, match="no scrape after the measured run"):
        m.summarize(1.0, 5.0, 1.0, 5.0)
    with pytest.raises(TelemetryError, match="no scrape before the measured run"):
        m.summarize(0.0, 0.5, 0.0, 0.5)


def test_a_scrape_that_does_not_parse_is_skipped_and_named():
    fake = FakeServer([sglang(), BROKEN, sglang(prompt=1500), sglang(prompt=1500)])
    m = fake.monitor()
    for _ in range(3):
        m.scrape_now()
    w = m.summarize(1.0, 2.0, 0.5, 2.5)
    assert w.prompt_tokens == 500.0 and w.counter_end_s == 2.0
    assert any("answered text that is not Prometheus text" in n for n in w.notes)


def test_gauges_without_a_sample_in_the_window_are_not_measured_and_say_why():
    fake = FakeServer([sglang(), sglang(prompt=2000)])
    m = fake.monitor()
    m.scrape_now()
    m.scrape_now()
    w = m.summarize(1.0, 1.0, 1.1, 1.9)
    assert "server_running_reqs_mean" not in w.metrics() and "server_cache_hit_rate" in w.metrics()
    assert any("gauges (requests running and queued, KV use) not measured" in n for n in w.notes)


@pytest.mark.parametrize(
    "status, text, sglang, message",
    [
        (
            404,
            "Not Found",
            True,
            r"^GET http://sim/metrics answered HTTP 404 \(SGLang serves /metrics only with --enable-metrics\)$",
        ),
        # Another engine gets no SGLang advice, but the profile key that names the path.
        (
            404,
            "Not Found",
            False,
            r"^GET http://sim/metrics answered HTTP 404 \(no Prometheus metrics at /metrics: set \[telemetry\] "
            r'server_metrics_path to the path this server serves them on, or "" not to read them\)$',
        ),
        (500, "boom", True, r"^GET http://sim/metrics answered HTTP 500$"),
        (500, "boom", False, r"^GET http://sim/metrics answered HTTP 500$"),
        (200, "# TYPE up gauge\nup 1\n", False, r"^http://sim/metrics serves Prometheus text"),
        (200, "{{{ not prometheus", False, r"serves Prometheus text without sglang:\* or vllm:\* metrics"),
        (200, BROKEN, False, r"^GET http://sim/metrics failed: ValueError"),
    ],
)
def test_open_names_why_the_metrics_cannot_be_read(status, text, sglang, message):
    fake = FakeServer([text], status=status)
    with pytest.raises(TelemetryError, match=message):
        open_server_monitor("http://sim", "/metrics", sglang=sglang, transport=httpx.MockTransport(fake.handler))


def test_the_simulators_metrics_give_exact_counts_over_a_bracketed_run(tmp_path):
    sim = start_sim(tmp_path, "--time-scale", "0.01", "--startup-delay-s", "0.1")
    try:
        sim.wait_ready()
        monitor = open_server_monitor(sim.url, "/metrics", interval_s=60)
        try:
            start = time.monotonic()
            for prompt in ([5, 6, 7, 8], [5, 6, 7, 9]):
                httpx.post(sim.url + "/generate", json={"input_ids": prompt, "sampling_params": {"max_new_tokens": 3}})
            end = time.monotonic()
            monitor.scrape_now()
            w = monitor.summarize(start, end, start, end)
        finally:
            monitor.stop()
    finally:
        sim.stop()
    assert w.engine == "sglang"
    assert (w.prompt_tokens, w.generation_tokens, w.cached_tokens) == (8.0, 6.0, 3.0)
    assert w.metrics()["server_cache_hit_rate"] == 3 / 8
