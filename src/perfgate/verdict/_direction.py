"""Which way is worse, and in what unit, for every metric perfgate gates.

A gate that does not know a metric's direction cannot gate it: guessing would fail a run for
getting faster. Exact names come first, then name suffixes; anything else raises ValueError.
"""

from __future__ import annotations

from typing import Literal

Direction = Literal["higher", "lower"]
"""``"higher"``: higher is better, gated from below. ``"lower"``: gated from above."""

# Exact names whose direction the suffix rules would get wrong or cannot tell.
_EXACT: dict[str, Direction] = {
    # Mean requests in flight (sum of E2E latencies / duration). At a fixed client
    # concurrency, fewer in flight means the server admits fewer (e.g. a lower
    # --max-running-requests), which is what the scenario's "concurrency 633 of 1024" showed.
    "concurrency": "higher",
    "request_throughput": "higher",
    "max_output_tokens_per_s": "higher",
    "gpu_limit_share_min": "higher",
    # Spread between the busiest and idlest GPU: lower is better.
    "gpu_imbalance": "lower",
    # Energy for the same fixed workload: less is better.
    "energy_j": "lower",
    # Requests per second that met every SLO target (bench_serving's request goodput).
    "goodput": "higher",
    # The highest load of a sweep that meets the SLO.
    "capacity": "higher",
    # The server's own metrics: a cache that stops hitting, fewer requests admitted at the same
    # load (as "concurrency"), more waiting, a fuller KV pool at the same load (less headroom).
    "server_cache_hit_rate": "higher",
    "server_running_reqs_mean": "higher",
    "server_queue_reqs_mean": "lower",
    "server_token_usage_mean": "lower",
}

# Checked in order: "_per_j" must win over "_j", "_per_s" over "_s".
_SUFFIXES: tuple[tuple[str, Direction], ...] = (
    ("_throughput", "higher"),
    ("_per_j", "higher"),
    ("_per_s", "higher"),
    ("_w", "higher"),
    ("_pct", "higher"),
    ("_ms", "lower"),
    ("_s", "lower"),
    ("_j", "lower"),
)

_UNITS: tuple[tuple[str, str], ...] = (
    ("request_throughput", "req/s"),
    ("goodput", "req/s"),
    ("_throughput", "tok/s"),
    ("tokens_per_s", "tok/s"),
    ("tokens_per_j", "tok/J"),
    ("_ms", "ms"),
    ("_s", "s"),
    ("_w", "W"),
    ("_j", "J"),
    ("_pct", "%"),
)


def direction_of(metric: str) -> Direction:
    """Return whether higher or lower values of ``metric`` are better.

    Raises ValueError naming the metric and the rules when neither an exact name nor a suffix
    rule applies.
    """
    if metric in _EXACT:
        return _EXACT[metric]
    for suffix, direction in _SUFFIXES:
        if metric.endswith(suffix):
            return direction
    higher = ", ".join(s for s, d in _SUFFIXES if d == "higher")
    lower = ", ".join(s for s, d in _SUFFIXES if d == "lower")
    raise ValueError(
        f"metric {metric!r}: perfgate does not know whether higher or lower is better, so it cannot gate it; "
        f"use a metric named in the README's metric table, or one ending in {higher} (higher is better) "
        f"or {lower} (lower is better)"
    )


def unit_of(metric: str) -> str:
    """The unit a metric's value is in, for messages ("" when it has none, e.g. a ratio)."""
    for suffix, unit in _UNITS:
        if metric.endswith(suffix):
            return unit
    return ""


def may_be_zero(metric: str) -> bool:
    """Whether 0 is a real measurement of ``metric``: for failures, queue lengths, imbalance and
    spreads it is, and for a sweep's capacity (no load met the SLO: below the lowest load); any
    other higher-is-better metric at 0 measured nothing (and a baseline of 0 passes every run),
    and so does a time (a latency of 0 ms), its standard deviation excepted."""
    if metric == "capacity":
        return True
    if direction_of(metric) == "higher":
        return False
    timed = unit_of(metric) in ("ms", "s")
    return not timed or metric.startswith("std_")
