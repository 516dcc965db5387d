from __future__ import annotations

import pytest

from perfgate.verdict import direction_of, unit_of

# Every metric perfgate's load and telemetry stages report, with the direction the gate uses.
DIRECTIONS = {
    "request_throughput": "higher",
    "input_throughput": "higher",
    "output_throughput": "higher",
    "total_throughput": "higher",
    "steady_output_throughput": "higher",
    "max_output_tokens_per_s": "higher",
    "concurrency": "higher",
    "gpu_power_min_w": "higher",
    "gpu_power_mean_w": "higher",
    "gpu_limit_share_min": "higher",
    "tensor_util_min_pct": "higher",
    "output_tokens_per_j": "higher",
    "energy_j": "lower",
    "gpu_imbalance": "lower",
    "steady_mean_tpot_ms": "lower",
    **{
        f"{stat}_{lat}_ms": "lower"
        for stat in ("mean", "median", "p90", "p99")
        for lat in ("ttft", "tpot", "itl", "e2e_latency")
    },
}


@pytest.mark.parametrize(("metric", "direction"), sorted(DIRECTIONS.items()))
def test_direction_table(metric: str, direction: str) -> None:
    assert direction_of(metric) == direction


@pytest.mark.parametrize(
    ("metric", "direction"),
    [
        ("prefill_throughput", "higher"),
        ("decode_tokens_per_s", "higher"),
        ("input_tokens_per_j", "higher"),
        ("gpu3_power_w", "higher"),
        ("sm_util_pct", "higher"),
        ("p95_ttft_ms", "lower"),
        ("duration_s", "lower"),
        ("idle_energy_j", "lower"),
    ],
)
def test_suffix_rules(metric: str, direction: str) -> None:
    assert direction_of(metric) == direction


@pytest.mark.parametrize("metric", ["completed", "gpu_temperature", "output_tokens", "throughput_ratio"])
def test_unknown_direction_fails_loudly(metric: str) -> None:
    with pytest.raises(ValueError, match=rf"metric '{metric}'.*higher or lower.*_throughput.*_ms"):
        direction_of(metric)


@pytest.mark.parametrize(
    ("metric", "unit"),
    [
        ("request_throughput", "req/s"),
        ("output_throughput", "tok/s"),
        ("max_output_tokens_per_s", "tok/s"),
        ("output_tokens_per_j", "tok/J"),
        ("p99_tpot_ms", "ms"),
        ("gpu_power_min_w", "W"),
        ("energy_j", "J"),
        ("tensor_util_min_pct", "%"),
        ("gpu_imbalance", ""),
    ],
)
def test_units(metric: str, unit: str) -> None:
    assert unit_of(metric) == unit
