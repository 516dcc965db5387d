from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.profile import GateSpec, Workload, parse_profile
from perfgate.profile._model import DEFAULT_TOLERANCE
from perfgate.verdict import MetricRule, rules_for

WL = Workload(name="w", num_prompts=8, concurrency=8, input_len=16, output_len=16)


def test_default_gate_gates_the_default_tolerances() -> None:
    rules = rules_for(GateSpec(), WL)
    assert [r.metric for r in rules] == sorted(DEFAULT_TOLERANCE)
    assert all(r.tolerance == DEFAULT_TOLERANCE[r.metric] and r.floor is None and r.ceiling is None for r in rules)
    assert {r.metric: r.direction for r in rules}["mean_tpot_ms"] == "lower"


def test_union_of_tolerances_floors_ceilings_with_workload_overrides() -> None:
    gate = GateSpec(tolerance={"output_throughput": 0.05}, floors={"output_throughput": 100.0}, ceilings={"p99_ttft_ms": 900.0})
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
    with pytest.raises(ValueError, match=r"\[\[workload\]\] 'big' floors: metric 'completed': perfgate does not know"):
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
