"""SGLang's Prometheus series, accumulated cheaply and rendered by prometheus_client.

prometheus_client's own Histogram takes a lock per observation; the engine observes one
inter-token latency per token, so the simulator keeps plain counts and hands them to a
custom collector at scrape time.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

# SGLang 0.5.23's default buckets (srt/observability/metrics_collector.py).
TTFT_BUCKETS_S = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS_S = (*TTFT_BUCKETS_S, 600, 1200, 1800, 2400)
ITL_BUCKETS_S = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.010,
    0.015,
    0.020,
    0.025,
    0.030,
    0.035,
    0.040,
    0.060,
    0.080,
    0.100,
    0.200,
    0.400,
    0.600,
    0.800,
    1.000,
    2.000,
    4.000,
    6.000,
    8.000,
)


class Hist:
    """Counts per bucket (upper bounds inclusive, as Prometheus' ``le``) plus sum."""

    __slots__ = ("bounds", "counts", "sum", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = array("q", [0] * (len(bounds) + 1))
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts[:-1], strict=True):
            running += count
            out.append((repr(float(bound)), running))
        out.append(("+Inf", self.total))
        return out


class ServerMetrics:
    """Counters and histograms, split by ``is_streaming`` like SGLang's."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.prompt_tokens = {True: 0, False: 0}
        self.generation_tokens = {True: 0, False: 0}
        self.cached_tokens = 0
        self.ttft = {True: Hist(TTFT_BUCKETS_S), False: Hist(TTFT_BUCKETS_S)}
        self.e2e = {True: Hist(E2E_BUCKETS_S), False: Hist(E2E_BUCKETS_S)}
        self.itl = Hist(ITL_BUCKETS_S)


class _Collector(Collector):
    def __init__(self, metrics: ServerMetrics, gauges: Callable[[], dict[str, float]]) -> None:
        self._m = metrics
        self._gauges = gauges

    def collect(self) -> Iterator[Metric]:
        m = self._m
        model = m.model_name
        docs = {
            "sglang:num_running_reqs": "The number of running requests.",
            "sglang:num_queue_reqs": "The number of requests in the waiting queue.",
            "sglang:gen_throughput": "The generation throughput (token/s).",
            "sglang:token_usage": "The token usage.",
            "sglang:cache_hit_rate": "The prefix cache hit rate.",
        }
        for name, value in self._gauges().items():
            g = GaugeMetricFamily(name, docs[name], labels=["model_name"])
            g.add_metric([model], value)
            yield g
        for name, doc, values in (
            ("sglang:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens),
            ("sglang:generation_tokens", "Number of generation tokens processed.", m.generation_tokens),
        ):
            c = CounterMetricFamily(name, doc, labels=["model_name", "is_streaming"])
            for streaming, value in values.items():
                c.add_metric([model, str(streaming).lower()], value)
            yield c
        # SGLang counts cache hits by source; the simulator's cache is on the device.
        c = CounterMetricFamily(
            "sglang:cached_tokens",
            "Number of cached prompt tokens by source (device/host/storage).",
            labels=["model_name", "cache_source"],
        )
        c.add_metric([model, "device"], m.cached_tokens)
        yield c
        for name, doc, hists in (
            ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft),
            ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", m.e2e),
        ):
            h = HistogramMetricFamily(name, doc, labels=["model_name", "is_streaming"])
            for streaming, hist in hists.items():
                h.add_metric([model, str(streaming).lower()], hist.buckets(), hist.sum)
            yield h
        h = HistogramMetricFamily(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labels=["model_name"],
        )
        h.add_metric([model], m.itl.buckets(), m.itl.sum)
        yield h


def render_metrics(metrics: ServerMetrics, gauges: Callable[[], dict[str, float]]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(metrics, gauges))
    return generate_latest(registry)
