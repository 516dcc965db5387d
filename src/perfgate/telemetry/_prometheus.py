"""The server's own Prometheus metrics (SGLang's ``sglang:*``, vLLM's ``vllm:*``), read in windows.

It lives in telemetry, beside the GPU sources, because it is the same kind of thing: a source
outside the load client, sampled on a thread while the load runs and summarised over windows
the session picks afterwards. It knows nothing of the client; the session compares the two.

Counters (tokens prompted, generated and served from the prefix cache) are differenced
between the scrapes that bracket the measured phase; the session scrapes at its edges
(:meth:`ServerMonitor.scrape_now`), so the difference holds exactly the measured requests
(SGLang counts a request's tokens when it finishes). Gauges (requests running and queued, KV
use, SGLang's own generation throughput) are averaged over the samples inside a window.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from perfgate import catalogue
from perfgate.errors import TelemetryError
from perfgate.telemetry._scrape import ScrapeBound, ScrapeLimits, bounded_get, check_read_series, metric_lines

SERVER_METRICS = catalogue.names("server")
"""Every gateable name :meth:`ServerWindow.metrics` can produce, as the catalogue declares them."""

# Sample name -> (our quantity, how series combine). Counters always add up; for gauges, series
# that differ only in a replica label (the same numbers reported by several ranks) count once,
# and the rest (data-parallel ranks, engines, priorities) add up ("sum") or average ("mean").
_COUNTERS: Mapping[str, str] = {
    "sglang:prompt_tokens_total": "prompt_tokens",
    "sglang:generation_tokens_total": "generation_tokens",
    "sglang:cached_tokens_total": "cached_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prefix_cache_hits_total": "cached_tokens",
    "vllm:prefix_cache_queries_total": "cache_queries",
}
_GAUGES: Mapping[str, tuple[str, str]] = {
    "sglang:num_running_reqs": ("running", "sum"),
    "sglang:num_queue_reqs": ("queued", "sum"),
    "sglang:token_usage": ("token_usage", "mean"),
    "sglang:gen_throughput": ("gen_throughput", "sum"),
    "sglang:cache_hit_rate": ("cache_hit_rate", "mean"),
    "vllm:num_requests_running": ("running", "sum"),
    "vllm:num_requests_waiting": ("queued", "sum"),
    "vllm:kv_cache_usage_perc": ("token_usage", "mean"),
    "vllm:gpu_cache_usage_perc": ("token_usage", "mean"),
    "vllm:avg_generation_throughput_toks_per_s": ("gen_throughput", "sum"),
}
# A server's /metrics may take a moment under load; past 5 s a scrape would hold up the run's edges.
SERVER_LIMITS = ScrapeLimits(deadline_s=5.0)

_REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "attn_cp_rank"})
_GAUGE_METRICS = {
    "running": "server_running_reqs_mean",
    "queued": "server_queue_reqs_mean",
    "token_usage": "server_token_usage_mean",
    "gen_throughput": "server_reported_gen_throughput",
}


@dataclass(frozen=True)
class ServerReading:
    """One scrape: the engine whose names it carried ("sglang", "vllm" or "" for neither), counters
    and gauges by quantity, the counter families the server declared (present, maybe empty), and
    the counters it reported as NaN or infinite (no reading: not zero)."""

    engine: str
    counters: Mapping[str, float]
    gauges: Mapping[str, float]
    declared: frozenset[str] = frozenset()
    not_finite: frozenset[str] = frozenset()


_NAMES = frozenset({*_COUNTERS, *(n.removesuffix("_total") for n in _COUNTERS), *_GAUGES})


_ENGINE_LINE = re.compile(r"^# TYPE (?:sglang|vllm):.*$", re.MULTILINE)


def _relevant(text: str) -> list[str]:
    """The lines of ``text`` about the metrics perfgate reads, after one line that tells the
    engine where none of those is there (a server that has not counted anything yet)."""
    keep = metric_lines(text, _NAMES)
    engine = None if keep else _ENGINE_LINE.search(text)
    return [engine.group(0) if engine else "", *keep]


def parse_server_metrics(text: str) -> ServerReading:
    """Parse a server's Prometheus text; ValueError for text the Prometheus parser rejects."""
    text = "\n".join(_relevant(text)) + "\n"
    counters: dict[str, float] = {}
    gauge_series: dict[str, dict[frozenset[tuple[str, str]], float]] = {}
    declared: set[str] = set()
    not_finite: set[str] = set()
    engines: set[str] = set()
    for family in text_string_to_metric_families(text):
        prefix = family.name.split(":", 1)[0]
        if prefix in ("sglang", "vllm"):
            engines.add(prefix)
        if family.type == "counter" and family.name + "_total" in _COUNTERS:
            declared.add(_COUNTERS[family.name + "_total"])
        for s in family.samples:
            if not math.isfinite(s.value):
                # NaN or inf (SGLang's cache_hit_rate before any request, a broken exporter): no reading.
                if s.name in _COUNTERS:
                    not_finite.add(_COUNTERS[s.name])
                continue
            if s.name in _COUNTERS:
                counters[_COUNTERS[s.name]] = counters.get(_COUNTERS[s.name], 0.0) + s.value
            elif s.name in _GAUGES:
                what = _GAUGES[s.name][0]
                key = frozenset((k, v) for k, v in s.labels.items() if k not in _REPLICA_LABELS)
                series = gauge_series.setdefault(what, {})
                series[key] = max(series.get(key, s.value), s.value)
    gauges = {}
    for what, series in gauge_series.items():
        how = next(h for name, (w, h) in _GAUGES.items() if w == what)
        values = list(series.values())
        gauges[what] = sum(values) if how == "sum" else sum(values) / len(values)
    engine = "sglang" if "sglang" in engines else "vllm" if "vllm" in engines else ""
    return ServerReading(engine, counters, gauges, frozenset(declared | set(counters)), frozenset(not_finite))


class _Sample:
    """One scrape: the lines of it perfgate reads, parsed on first use (after the run, off the
    client's clock)."""

    __slots__ = ("_reading", "received_s", "sent_s", "text")

    def __init__(self, sent_s: float, received_s: float, text: str) -> None:
        self.sent_s = sent_s
        self.received_s = received_s
        self.text = text
        self._reading: ServerReading | None = None

    @property
    def reading(self) -> ServerReading:
        if self._reading is None:
            self._reading = parse_server_metrics(self.text)
        return self._reading


@dataclass(frozen=True)
class ServerWindow:
    """The server's own view of one measured run.

    ``counter_*_s``: the scrapes whose counters were differenced (they bracket the measured
    phase); ``gauge_*_s``: the window whose ``gauge_samples`` were averaged (the steady window,
    as for GPU power). Token fields are counter differences (None where the server exports no
    such counter); ``cache_hit_source`` says how ``server_cache_hit_rate`` was computed.
    """

    engine: str
    counter_start_s: float
    counter_end_s: float
    gauge_start_s: float
    gauge_end_s: float
    gauge_samples: int
    prompt_tokens: float | None
    generation_tokens: float | None
    cached_tokens: float | None
    cache_hit_source: str
    values: Mapping[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def metrics(self) -> dict[str, float]:
        """Flat values for the verdict (names in SERVER_METRICS); absent where not measured."""
        return dict(self.values)


class ServerMonitor:
    """Scrapes ``url`` (the server's /metrics) every ``interval_s`` on a thread, keeping every reading.

    Open with :func:`open_server_monitor`, which scrapes once and fails with the reason when the
    URL does not serve SGLang's or vLLM's metrics.
    """

    def __init__(
        self,
        url: str,
        *,
        interval_s: float = 0.5,
        limits: ScrapeLimits = SERVER_LIMITS,
        clock: Callable[[], float] = time.monotonic,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self._interval_s = interval_s
        self._limits = limits
        self._clock = clock
        self._client = httpx.Client(transport=transport)
        self._http_lock = threading.Lock()
        self._lock = threading.Lock()
        self._samples: list[_Sample] = []
        self._failures: list[tuple[float, str]] = []
        self._dropped = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def dropped(self) -> str:
        """Why scraping stopped for good (an answer past a bound of ``limits``); "" while it goes on."""
        return self._dropped

    def _get(self) -> str:
        """The lines of one answer that perfgate reads, joined; ScrapeBound past a bound."""
        with self._http_lock:
            text = bounded_get(self._client, self.url, self._limits)
        lines = _relevant(text)
        check_read_series(self.url, lines[1:], self._limits)  # after the engine line
        return "\n".join(lines) + "\n"

    def scrape_now(self) -> None:
        """Scrape once now (the session calls this at the edges of each measured phase); the lines
        read are kept and parsed when a window is summarised. After an answer past a bound, does
        nothing: the source is dropped, and :attr:`dropped` says why."""
        if self._dropped:
            return
        sent = self._clock()
        try:
            text = self._get()
        except ScrapeBound as err:
            self._dropped = str(err)
            self._stop.set()
            return
        except httpx.HTTPError as err:
            with self._lock:
                self._failures.append((sent, f"GET {self.url} failed: {type(err).__name__}: {err}"))
            return
        with self._lock:
            self._samples.append(_Sample(sent, self._clock(), text))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="perfgate-server-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.scrape_now()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._client.close()

    def summarize(self, run_start_s: float, run_end_s: float, gauge_start_s: float, gauge_end_s: float) -> ServerWindow:
        """The measured run ``[run_start_s, run_end_s]``: counters between the last scrape that
        finished before it and the first that began after it, gauges over ``[gauge_start_s,
        gauge_end_s]``. TelemetryError when no scrape brackets the run."""
        with self._lock:
            samples = list(self._samples)
        samples = [s for s in samples if self._parses(s)]
        with self._lock:
            failures = [m for t, m in self._failures if run_start_s <= t <= run_end_s]
        before = [s for s in samples if s.received_s <= run_start_s]
        after = [s for s in samples if s.sent_s >= run_end_s]
        if not before or not after:
            why = self._dropped or (failures[-1] if failures else "")
            raise TelemetryError(
                f"server metrics at {self.url}: no scrape {'before' if not before else 'after'} the measured run"
                + (f" ({why})" if why else "")
            )
        a, b = before[-1].reading, after[0].reading
        inside = [s.reading for s in samples if gauge_start_s <= s.sent_s <= gauge_end_s]
        notes = list(dict.fromkeys(failures))
        values: dict[str, float] = {}
        # A counter absent from a scrape has counted nothing yet (a new series starts at 0).
        keys = set(b.counters) | (a.declared & b.declared)
        delta = {k: b.counters.get(k, 0.0) - a.counters.get(k, 0.0) for k in keys}
        if b.engine == "sglang" and "prompt_tokens" in delta:
            # SGLang (0.5.x, multiprocess metrics) creates sglang:cached_tokens_total at its first hit.
            delta.setdefault("cached_tokens", 0.0)
        # A series of a counter that reads NaN leaves its sum unknown, not zero.
        unreadable = sorted(k for k in delta if k in a.not_finite or k in b.not_finite)
        if unreadable:
            notes.append(
                f"{self.url} reported NaN or infinite counters ({', '.join(unreadable)}) at the run's edges: "
                "not measured; the server's exporter is broken"
            )
            for k in unreadable:
                del delta[k]
        resets = sorted(k for k, v in delta.items() if v < 0)
        if resets:
            notes.append(
                f"server counters went backwards ({', '.join(resets)}): the server restarted or reset them; not used"
            )
            for k in resets:
                del delta[k]
        if "generation_tokens" in delta and run_end_s > run_start_s:
            values["server_gen_throughput"] = delta["generation_tokens"] / (run_end_s - run_start_s)
        source = self._cache_hit_rate(delta, inside, values)
        for what, name in _GAUGE_METRICS.items():
            got = [r.gauges[what] for r in inside if what in r.gauges]
            if got:
                values[name] = sum(got) / len(got)
        if not inside:
            notes.append(
                f"no scrape of {self.url} fell inside the {gauge_end_s - gauge_start_s:.1f} s window: "
                "gauges (requests running and queued, KV use) not measured; lower [telemetry] server_metrics_interval_s"
            )
        return ServerWindow(
            engine=b.engine,
            counter_start_s=before[-1].received_s,
            counter_end_s=after[0].sent_s,
            gauge_start_s=gauge_start_s,
            gauge_end_s=gauge_end_s,
            gauge_samples=len(inside),
            prompt_tokens=delta.get("prompt_tokens"),
            generation_tokens=delta.get("generation_tokens"),
            cached_tokens=delta.get("cached_tokens"),
            cache_hit_source=source,
            values=values,
            notes=tuple(notes),
        )

    def _parses(self, sample: _Sample) -> bool:
        try:
            _ = sample.reading  # parsed (and cached) here, so a bad answer is reported once
        except ValueError as err:
            with self._lock:
                self._failures.append((sample.sent_s, f"{self.url} answered text that is not Prometheus text: {err}"))
            return False
        return True

    @staticmethod
    def _cache_hit_rate(delta: Mapping[str, float], inside: Iterable[ServerReading], values: dict[str, float]) -> str:
        """Put ``server_cache_hit_rate`` in ``values`` from the best source; return which one it was."""
        cached = delta.get("cached_tokens")
        queried = delta.get("cache_queries", delta.get("prompt_tokens"))
        if cached is not None and queried:
            values["server_cache_hit_rate"] = cached / queried
            what = (
                "prefix_cache_hits / prefix_cache_queries"
                if "cache_queries" in delta
                else "cached_tokens / prompt_tokens"
            )
            return f"{what} over the measured run"
        rates = [r.gauges["cache_hit_rate"] for r in inside if "cache_hit_rate" in r.gauges]
        if rates:
            values["server_cache_hit_rate"] = sum(rates) / len(rates)
            return "mean of the sglang:cache_hit_rate gauge (the last prefill batch's rate) over the window"
        return ""


def open_server_monitor(
    base_url: str,
    path: str,
    *,
    interval_s: float = 0.5,
    sglang: bool = False,
    limits: ScrapeLimits = SERVER_LIMITS,
    clock: Callable[[], float] = time.monotonic,
    transport: httpx.BaseTransport | None = None,
) -> ServerMonitor:
    """A started monitor of ``base_url + path``, or TelemetryError saying why the server's metrics
    cannot be read there (an answer past one of ``limits`` included). ``sglang``: the server is
    SGLang, which serves them only with --enable-metrics (a 404 then says so; another server gets
    the profile key to set). The message does not say "server metrics" itself: its reader puts it
    under that label. ``transport`` replaces the network (tests)."""
    monitor = ServerMonitor(
        base_url.rstrip("/") + path, interval_s=interval_s, limits=limits, clock=clock, transport=transport
    )
    try:
        reading = parse_server_metrics(monitor._get())
    except ScrapeBound:
        monitor.stop()
        raise
    except httpx.HTTPStatusError as err:
        monitor.stop()
        status = err.response.status_code
        if status != 404:
            hint = ""
        elif sglang:
            hint = " (SGLang serves /metrics only with --enable-metrics)"
        else:
            hint = (
                f" (no Prometheus metrics at {path}: set [telemetry] server_metrics_path to the path this server"
                ' serves them on, or "" not to read them)'
            )
        raise TelemetryError(f"GET {monitor.url} answered HTTP {status}{hint}") from None
    except (httpx.HTTPError, ValueError) as err:
        monitor.stop()
        raise TelemetryError(f"GET {monitor.url} failed: {type(err).__name__}: {err}") from None
    if not reading.engine:
        monitor.stop()
        raise TelemetryError(f"{monitor.url} serves Prometheus text without sglang:* or vllm:* metrics")
    monitor.scrape_now()
    monitor.start()
    return monitor
