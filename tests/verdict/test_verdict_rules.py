from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.profile import GateSpec, Slo, Workload, parse_profile
from perfgate.profile._model import DEFAULT_TOLERANCE
from perfgate.verdict import (
    DEFAULT_CAPACITY_TOLERANCE,
    MetricRule,
    capacity_rule,
    check_metric_name,
    direction_of,
    rules_for,
)

WL = Workload(name="w", num_prompts=8, concurrency=8, input_len=16, output_len=16)


def test_default_gate_gates_the_default_tolerances() -> None:
    rules = rules_for(GateSpec(), WL)
    assert [r.metric for r in rules] == sorted(DEFAULT_TOLERANCE)
    assert all(r.tolerance == DEFAULT_TOLERANCE[r.metric] and r.floor is None and r.ceiling is None for r in rules)
    assert {r.metric: r.direction for r in rules}["mean_tpot_ms"] == "lower"


def test_union_of_tolerances_floors_ceilings_with_workload_overrides() -> None:
    gate = GateSpec(
        tolerance={"output_throughput": 0.05}, floors={"output_throughput": 100.0}, ceilings={"p99_ttft_ms": 900.0}
    )
    wl = Workload(
        name="w",
        num_prompts=8,
        concurrency=8,
        input_len=16,
        output_len=16,
        tolerance={"output_throughput": 0.02},
        floors={"gpu_power_min_w": 200.0},
        ceilings={"p99_ttft_ms": 500.0},
    )
    assert rules_for(gate, wl) == [
        MetricRule("gpu_power_min_w", "higher", None, floor=200.0),
        MetricRule("output_throughput", "higher", 0.02, floor=100.0),
        MetricRule("p99_ttft_ms", "lower", None, ceiling=500.0),
    ]


def test_unknown_metric_names_where_it_was_set() -> None:
    wl = Workload(name="big", num_prompts=8, concurrency=8, input_len=16, output_len=16, floors={"completed": 8.0})
    reason = r"floors: metric 'completed' is reported for information .* cannot be gated"
    with pytest.raises(ValueError, match=r"\[\[workload\]\] 'big' " + reason):
        rules_for(GateSpec(), wl)
    with pytest.raises(ValueError, match=r"\[gate\]\.tolerance: metric 'speed'"):
        rules_for(GateSpec(tolerance={"speed": 0.1}), WL)


def test_rules_from_a_parsed_profile() -> None:
    text = """
[server]
kind = "simulator"
[gate]
tolerance = { p99_tpot_ms = 0.2 }
floors = { output_tokens_per_j = 1.5 }
[[workload]]
num_prompts = 64
concurrency = 64
input_len = 128
output_len = 128
ceilings = { gpu_imbalance = 0.1 }
"""
    profile = parse_profile(text, Path("p.toml"))
    rules = {r.metric: r for r in rules_for(profile.gate, profile.workloads[0])}
    assert rules["p99_tpot_ms"].tolerance == 0.2
    assert rules["output_tokens_per_j"] == MetricRule("output_tokens_per_j", "higher", floor=1.5)
    assert rules["gpu_imbalance"] == MetricRule("gpu_imbalance", "lower", ceiling=0.1)
    assert rules["output_throughput"].tolerance == DEFAULT_TOLERANCE["output_throughput"]


def test_slo_metrics_apply_where_there_is_an_slo_and_fail_loudly_where_set_without_one() -> None:
    gate = GateSpec(tolerance={**DEFAULT_TOLERANCE, "goodput": 0.05})
    with_slo = Workload(name="s", num_prompts=8, concurrency=8, input_len=16, output_len=16, slo=Slo(ttft_ms=500))
    assert "goodput" in {r.metric for r in rules_for(gate, with_slo)}
    # [gate] rules reach the workloads that can measure them; the others measure no goodput.
    assert "goodput" not in {r.metric for r in rules_for(gate, WL)}
    own = Workload(
        name="plain", num_prompts=8, concurrency=8, input_len=16, output_len=16, floors={"slo_attainment_pct": 90.0}
    )
    with pytest.raises(
        ValueError,
        match=r"\[\[workload\]\] 'plain' floors: slo_attainment_pct counts the requests that "
        r"meet the workload's SLO, and 'plain' has none; add e.g. slo = ",
    ):
        rules_for(GateSpec(), own)


def test_capacity_is_a_sweeps_rule_never_a_workloads() -> None:
    point = Workload(
        name="s@c8",
        num_prompts=8,
        concurrency=8,
        input_len=16,
        output_len=16,
        slo=Slo(tpot_ms=50),
        floors={"capacity": 64.0},
    )
    assert "capacity" not in {r.metric for r in rules_for(GateSpec(), point, in_sweep=True)}
    assert capacity_rule(GateSpec(), point) == MetricRule("capacity", "higher", DEFAULT_CAPACITY_TOLERANCE, floor=64.0)
    assert capacity_rule(GateSpec(tolerance={"capacity": 0.0}), WL).tolerance == 0.0
    with pytest.raises(ValueError, match=r"'s@c8' floors: capacity is measured by sweeps only"):
        rules_for(GateSpec(), point)


@pytest.mark.parametrize(
    "metric, direction",
    [
        ("goodput", "higher"),
        ("slo_attainment_pct", "higher"),
        ("slo_ttft_attainment_pct", "higher"),
        ("capacity", "higher"),
        ("server_cache_hit_rate", "higher"),
        ("server_gen_throughput", "higher"),
        ("server_reported_gen_throughput", "higher"),
        ("server_running_reqs_mean", "higher"),
        ("server_queue_reqs_mean", "lower"),
        ("server_token_usage_mean", "lower"),
    ],
)
def test_every_new_gateable_name_is_known_with_its_direction(metric, direction) -> None:
    check_metric_name(metric)
    assert direction_of(metric) == direction
