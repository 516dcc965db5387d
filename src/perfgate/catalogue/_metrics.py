"""The metric catalogue: one declaration per metric that any stage of perfgate can report.

Each :class:`Metric` holds what the rest of perfgate used to spell in six places: its unit,
which way is better (or that it is reported and never gated), its category, which gate test
judges it, whether zero is a sane value, whether the summary table shows it when it is not
gated, and its default tolerance. The stages that compute metrics (``metrics``,
``telemetry``, the sweeps) list their names from here, so a name they produce that is not
declared is a test failure, not a metric that is silently never gated.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower"]
"""``"higher"``: higher is better, gated from below. ``"lower"``: gated from above."""

Category = Literal["throughput", "latency", "power", "server", "capacity", "count", "correctness"]
"""What a metric measures, for the docs and for :attr:`Metric.test`."""

Source = Literal["client", "telemetry", "server", "sweep", "correctness"]
"""Which stage measures it: the load client's records (``perfgate.metrics``), GPU telemetry,
the server's own Prometheus metrics, a capacity sweep, or the correctness probe."""

GateTest = Literal["throughput", "latency", "power", "capacity", "correctness"]
"""The perf test (``test_throughput``, ``test_latency``, ``test_gpu_power``, ``test_capacity``,
``test_correctness``) that reports a gated metric's verdict."""


@dataclass(frozen=True)
class Metric:
    """One metric: ``name`` is its key in results, baselines and profiles."""

    name: str
    unit: str
    """``"tok/s"``, ``"ms"``, ``"W"``, ... ("" for a count or a ratio)."""
    direction: Direction | None
    """None: reported for information and refused by the gate (no way is better)."""
    category: Category
    source: Source
    summary: str
    zero_ok: bool = False
    """Whether a baseline may hold 0: a real run can measure it and it still gates (no spread,
    nothing queued, a sweep below its lowest load). A throughput or a time of 0 is a run that
    measured nothing, and as a baseline it would pass every later run."""
    needs_slo: bool = False
    """Measured only for a workload with an ``slo``."""
    shown: bool = False
    """In the summary table for every workload, gated or not."""
    default_tolerance: float | None = None
    """The relative worsening ``[gate] tolerance`` allows when a profile does not say."""
    default_limit: float | None = None
    """An absolute bound held with or without a baseline when a profile does not say (a ceiling
    for "lower", a floor for "higher"); the correctness probe's metrics are judged this way,
    through ``[correctness] limits``."""

    @property
    def gateable(self) -> bool:
        return self.direction is not None

    @property
    def test(self) -> GateTest | None:
        """The perf test that reports this metric's verdict (None for an ungateable one)."""
        if self.direction is None:
            return None
        # The server's own numbers: more admitted or cached is throughput, more queued is latency.
        return _TESTS.get(self.category) or ("throughput" if self.direction == "higher" else "latency")


_TESTS: Mapping[str, GateTest] = {
    "throughput": "throughput",
    "latency": "latency",
    "power": "power",
    "capacity": "capacity",
    "correctness": "correctness",
}


# bench_serving's latency families, each as six statistics.
_DESCRIBED = {
    "ttft": "time to first token",
    "tpot": "time per output token after the first, per request",
    "itl": "inter-token latency (each chunk's gap split over its tokens)",
    "e2e_latency": "end-to-end request latency",
}
_STATS = {"mean": "mean", "median": "median", "std": "standard deviation", "p90": "p90", "p95": "p95", "p99": "p99"}
SLO_TARGETS = ("ttft", "tpot", "e2e")
"""The ``slo`` table's targets (``ttft_ms``, ``tpot_ms``, ``e2e_ms``), each with an attainment."""


def _declare() -> Iterator[Metric]:
    # Declaration order is the summary table's order for the shown metrics.
    yield Metric(
        "output_throughput",
        "tok/s",
        "higher",
        "throughput",
        "client",
        "output tokens / measured duration",
        shown=True,
        default_tolerance=0.03,
    )
    yield Metric(
        "total_throughput",
        "tok/s",
        "higher",
        "throughput",
        "client",
        "input + output tokens / measured duration",
        shown=True,
        default_tolerance=0.03,
    )
    yield Metric("request_throughput", "req/s", "higher", "throughput", "client", "completed requests / duration")
    yield Metric("input_throughput", "tok/s", "higher", "throughput", "client", "input tokens / measured duration")
    yield Metric(
        "max_output_tokens_per_s", "tok/s", "higher", "throughput", "client", "output tokens in the busiest 1-s bucket"
    )
    for family, what in _DESCRIBED.items():
        for stat, stat_text in _STATS.items():
            name = f"{stat}_{family}_ms"
            yield Metric(
                name,
                "ms",
                "lower",
                "latency",
                "client",
                f"{stat_text} {what}",
                zero_ok=stat == "std",
                shown=name in ("mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms"),
                default_tolerance={"mean_tpot_ms": 0.03, "p99_tpot_ms": 0.10}.get(name),
            )
    yield Metric(
        "goodput",
        "req/s",
        "higher",
        "throughput",
        "client",
        "requests per second that met every SLO target",
        needs_slo=True,
        shown=True,
    )
    yield Metric(
        "slo_attainment_pct",
        "%",
        "higher",
        "throughput",
        "client",
        "share of requests that met every SLO target",
        needs_slo=True,
        shown=True,
    )
    for target in SLO_TARGETS:
        yield Metric(
            f"slo_{target}_attainment_pct",
            "%",
            "higher",
            "throughput",
            "client",
            f"share of requests that met the {target}_ms target",
            needs_slo=True,
        )
    yield Metric(
        "concurrency",
        "",
        "higher",
        "throughput",
        "client",
        "mean requests in flight (sum of E2E latencies / duration); fewer at the same load = fewer admitted",
        shown=True,
    )
    yield Metric(
        "steady_output_throughput",
        "tok/s",
        "higher",
        "throughput",
        "client",
        "output throughput inside the steady window (in flight >= 90 % of the target concurrency)",
        shown=True,
    )
    yield Metric("steady_mean_tpot_ms", "ms", "lower", "latency", "client", "mean token gap inside the steady window")
    yield Metric("duration_s", "s", "lower", "latency", "client", "measured phase, first request sent to last answer")
    yield Metric(
        "steady_window_s",
        "s",
        None,
        "count",
        "client",
        "length of the steady window (describes the measurement, not the server)",
        zero_ok=True,
    )
    yield Metric("completed", "", None, "count", "client", "requests that completed", zero_ok=True)
    yield Metric("failed", "", None, "count", "client", "requests that failed", zero_ok=True)
    yield Metric("total_input_tokens", "", None, "count", "client", "input tokens of the completed requests")
    yield Metric("total_output_tokens", "", None, "count", "client", "output tokens of the completed requests")

    yield Metric(
        "server_cache_hit_rate",
        "",
        "higher",
        "server",
        "server",
        "prompt tokens served from the server's prefix cache / prompt tokens",
        shown=True,
    )
    yield Metric(
        "server_gen_throughput", "tok/s", "higher", "server", "server", "generated tokens per second, server counters"
    )
    yield Metric(
        "server_reported_gen_throughput",
        "tok/s",
        "higher",
        "server",
        "server",
        "the server's own generation-throughput gauge, mean",
    )
    yield Metric("server_running_reqs_mean", "", "higher", "server", "server", "requests running on the server, mean")
    yield Metric(
        "server_queue_reqs_mean", "", "lower", "server", "server", "requests queued on the server, mean", zero_ok=True
    )
    yield Metric(
        "server_token_usage_mean",
        "",
        "lower",
        "server",
        "server",
        "share of the KV pool in use, mean (fuller at the same load = less headroom)",
        zero_ok=True,
    )

    yield Metric(
        "gpu_power_min_w",
        "W",
        "higher",
        "power",
        "telemetry",
        "mean power of the weakest GPU over the window (an idle GPU shows here)",
        shown=True,
    )
    yield Metric(
        "gpu_power_mean_w", "W", "higher", "power", "telemetry", "mean power over the window, GPU mean", shown=True
    )
    yield Metric("gpu_power_total_w", "W", "higher", "power", "telemetry", "mean power over the window, all GPUs")
    yield Metric(
        "gpu_imbalance",
        "",
        "lower",
        "power",
        "telemetry",
        "(max - min) / mean of the GPUs' mean power",
        zero_ok=True,
    )
    yield Metric("gpu_limit_share_min", "", "higher", "power", "telemetry", "mean power / power limit, weakest GPU")
    yield Metric("energy_j", "J", "lower", "power", "telemetry", "energy of all GPUs over the window")
    yield Metric(
        "output_tokens_per_j",
        "tok/J",
        "higher",
        "power",
        "telemetry",
        "output tokens in the window / energy_j",
        shown=True,
    )
    for name, what in (
        ("tensor_util_min_pct", "tensor-pipe activity (GPM), weakest GPU"),
        ("sm_util_min_pct", "SM activity (GPM), weakest GPU"),
        ("dram_util_mean_pct", "DRAM bandwidth use (GPM), GPU mean"),
        ("util_gpu_mean_pct", "NVML utilization.gpu (a kernel was running), GPU mean"),
    ):
        yield Metric(name, "%", "higher", "power", "telemetry", what)

    yield Metric(
        "capacity",
        "",
        "higher",
        "capacity",
        "sweep",
        "the highest load of a sweep that meets the SLO (concurrency or req/s)",
        zero_ok=True,
    )
    yield from _correctness()


def _correctness() -> Iterator[Metric]:
    """The correctness probe's (docs/correctness.md): every one is 0 for the same model, and each
    default limit is what an unchanged simulator and real CPU engines never reached, with margin."""

    def probe(name: str, unit: str, direction: Direction, summary: str, limit: float | None) -> Metric:
        return Metric(name, unit, direction, "correctness", "correctness", summary, zero_ok=True, default_limit=limit)

    yield probe(
        "correctness_logprob_delta_mean",
        "nats",
        "lower",
        "mean |logprob difference| of the reference's output tokens, teacher-forced on this server",
        0.05,
    )
    yield probe(
        "correctness_logprob_delta_max",
        "nats",
        "lower",
        "largest |logprob difference| at any position of any prompt, teacher-forced",
        0.5,
    )
    yield probe(
        "correctness_argmax_mismatch",
        "",
        "lower",
        "share of positions where the reference's token is no longer this server's most likely token",
        0.02,
    )
    yield probe(
        "correctness_greedy_match",
        "",
        "higher",
        "share of prompts whose greedy output equals the reference's token for token (info by default)",
        None,
    )
    yield probe("correctness_nonfinite", "", "lower", "NaN or infinite logprobs in any answer", 0.0)
    yield probe(
        "correctness_repeated",
        "",
        "lower",
        "prompts whose whole output is one token repeated (not in the reference)",
        0.0,
    )
    yield probe("correctness_zero_logprobs", "", "lower", "prompts whose every output logprob is 0", 0.0)
    yield probe(
        "correctness_batch_disagreements",
        "",
        "lower",
        "identical requests in one batch whose answers part (other than at a near-tie)",
        0.0,
    )


METRICS: Mapping[str, Metric] = {m.name: m for m in _declare()}
"""Every metric perfgate reports, by name, in declaration order."""

CAPACITY = "capacity"
"""A sweep's gated number: the highest load within the SLO."""

SHOWN: tuple[str, ...] = tuple(m.name for m in METRICS.values() if m.shown)
"""The metrics the summary table shows for every workload, in order."""

DEFAULT_LIMITS: Mapping[str, float] = {m.name: m.default_limit for m in METRICS.values() if m.default_limit is not None}
"""``[correctness] limits`` where a profile does not say."""

DEFAULT_TOLERANCE: Mapping[str, float] = {
    m.name: m.default_tolerance for m in METRICS.values() if m.default_tolerance is not None
}
"""``[gate] tolerance`` where a profile does not say. 3 % on throughput and mean TPOT: with 3
repeats and ~1 % run-to-run noise the verdict catches 98.9 % of 5 % throughput drops with
0.05 % false alarms; at 5 % it caught 60 % (benchmarks/detection.py)."""


def names(source: Source) -> frozenset[str]:
    """The names one stage can report."""
    return frozenset(m.name for m in METRICS.values() if m.source == source)


def metric(name: str) -> Metric:
    """The declaration of ``name``; ValueError naming it (and the closest known name) when perfgate
    does not report such a metric."""
    try:
        return METRICS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(METRICS), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "the metric reference (docs/metrics.md) lists the names"
        raise ValueError(f"metric {name!r} is not one perfgate measures; {hint}") from None


def gateable(name: str) -> Metric:
    """The declaration of ``name`` when the gate can judge it; ValueError otherwise."""
    m = metric(name)
    if m.direction is None:
        raise ValueError(
            f"metric {name!r} is reported for information ({m.summary}); no way of it is better, so it cannot "
            "be gated; gate a metric that the metric reference (docs/metrics.md) marks higher or lower"
        )
    return m


def direction_of(name: str) -> Direction:
    """Whether higher or lower values of ``name`` are better; ValueError for an unknown or
    ungateable metric."""
    direction = gateable(name).direction
    assert direction is not None
    return direction


def unit_of(name: str) -> str:
    """The unit a metric's value is in, for messages ("" for a count, a ratio or an unknown name)."""
    m = METRICS.get(name)
    return m.unit if m else ""


def fmt_value(value: float, unit: str) -> str:
    """A metric value for people: thousands separators, sensible precision, unit."""
    a = abs(value)
    text = f"{value:,.1f}" if a >= 100 else f"{value:,.2f}" if a >= 1 else f"{value:.3g}"
    if not unit:
        return text
    return f"{text}{unit}" if unit == "%" else f"{text} {unit}"
