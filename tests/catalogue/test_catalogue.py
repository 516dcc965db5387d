"""The metric catalogue: one declaration per metric, and every metric a run produces is declared."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfgate import catalogue
from perfgate.catalogue import METRICS, SHOWN, direction_of, metric, names, unit_of
from perfgate.catalogue.__main__ import main as catalogue_main
from perfgate.catalogue._reference import SECTION, reference_markdown
from perfgate.profile import SLO_KEYS, parse_profile
from perfgate.session import Session, SessionOptions
from perfgate.telemetry import GpuWindow, TelemetryWindow
from perfgate.verdict import check_metric_name

PAGE = Path(__file__).resolve().parents[2] / SECTION.page

# The gate's directions, spelled out here so a changed declaration is a reviewed change.
DIRECTIONS = {
    "request_throughput": "higher",
    "input_throughput": "higher",
    "output_throughput": "higher",
    "total_throughput": "higher",
    "steady_output_throughput": "higher",
    "max_output_tokens_per_s": "higher",
    "concurrency": "higher",
    "goodput": "higher",
    "slo_attainment_pct": "higher",
    "capacity": "higher",
    "gpu_power_min_w": "higher",
    "gpu_power_mean_w": "higher",
    "gpu_limit_share_min": "higher",
    "tensor_util_min_pct": "higher",
    "output_tokens_per_j": "higher",
    "server_cache_hit_rate": "higher",
    "server_running_reqs_mean": "higher",
    "server_queue_reqs_mean": "lower",
    "server_token_usage_mean": "lower",
    "energy_j": "lower",
    "gpu_imbalance": "lower",
    "steady_mean_tpot_ms": "lower",
    "duration_s": "lower",
    **{
        f"{stat}_{lat}_ms": "lower"
        for stat in ("mean", "median", "std", "p90", "p95", "p99")
        for lat in ("ttft", "tpot", "itl", "e2e_latency")
    },
}


@pytest.mark.parametrize(("name", "direction"), sorted(DIRECTIONS.items()))
def test_direction_table(name: str, direction: str) -> None:
    assert direction_of(name) == direction


@pytest.mark.parametrize("name", ["completed", "failed", "total_output_tokens", "steady_window_s"])
def test_reported_metrics_are_refused_by_the_gate_with_the_reason(name: str) -> None:
    with pytest.raises(ValueError, match=rf"metric '{name}' is reported for information .* cannot be gated"):
        check_metric_name(name)


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("mean_tpott_ms", "did you mean 'mean_tpot_ms'?"),
        ("gpu_temperature", r"the metric reference \(docs/metrics.md\) lists the names"),
    ],
)
def test_unknown_names_are_refused_with_the_closest_one(name: str, hint: str) -> None:
    with pytest.raises(ValueError, match=rf"metric '{name}' is not one perfgate measures; {hint}"):
        direction_of(name)


@pytest.mark.parametrize(
    ("name", "unit"),
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
        ("no_such_metric", ""),
    ],
)
def test_units(name: str, unit: str) -> None:
    assert unit_of(name) == unit


def test_units_agree_with_the_name_suffixes() -> None:
    # The house rule (units in names) and the declarations cannot drift apart.
    suffix_units = {"_ms": "ms", "_w": "W", "_j": "J", "_pct": "%", "_per_j": "tok/J"}
    for m in METRICS.values():
        for suffix, unit in suffix_units.items():
            if m.name.endswith(suffix) and not (suffix == "_j" and m.name.endswith("_per_j")):
                assert m.unit == unit, m


def test_each_gate_test_judges_its_category() -> None:
    assert metric("output_throughput").test == "throughput"
    assert metric("p99_tpot_ms").test == "latency"
    assert metric("output_tokens_per_j").test == "power"
    assert metric("gpu_imbalance").test == "power"
    assert metric("server_cache_hit_rate").test == "throughput"
    assert metric("server_queue_reqs_mean").test == "latency"
    assert metric("capacity").test == "capacity"
    assert metric("completed").test is None


def test_the_defaults_and_the_table_order_are_declared_once() -> None:
    assert catalogue.DEFAULT_TOLERANCE == {
        "output_throughput": 0.03,
        "total_throughput": 0.03,
        "mean_tpot_ms": 0.03,
        "p99_tpot_ms": 0.10,
    }
    assert SHOWN[:5] == ("output_throughput", "total_throughput", "mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms")
    assert all(metric(n).gateable for n in catalogue.DEFAULT_TOLERANCE)


def test_slo_attainments_are_declared_for_every_slo_target() -> None:
    declared = {n for n in names("client") if metric(n).needs_slo}
    assert declared == {
        "goodput",
        "slo_attainment_pct",
        *(f"slo_{k.removesuffix('_ms')}_attainment_pct" for k in SLO_KEYS),
    }


PROFILE = """
name = "catalogue"
[server]
kind = "simulator"
startup_timeout_s = 30
shutdown_timeout_s = 5
[server.sim]
gpus = 2
time_scale = 0.2
startup_delay_s = 0.2
[telemetry]
source = "dcgm"
dcgm_endpoints = ["{base_url}/dcgm/metrics"]
interval_s = 0.05
server_metrics_interval_s = 0.1
[gate]
repeats = 1
client_max_lag_p99_ms = 5000
[[workload]]
name = "w"
num_prompts = 96
concurrency = 12
input_len = 64
output_len = 32
warmup_requests = 4
slo = { ttft_ms = 60000, tpot_ms = 60000, e2e_ms = 60000 }
"""


def test_every_metric_a_run_produces_is_declared_and_every_declared_one_is_produced(tmp_path: Path) -> None:
    profile = parse_profile(PROFILE, tmp_path / "catalogue.toml")
    session = Session(profile, SessionOptions(baselines_dir=tmp_path / "baselines", log_dir=tmp_path / "logs"))
    try:
        result = session.run(profile.workload("w"))
    finally:
        session.stack.close()
    (repeat,) = result.repeats
    produced = set(repeat.flat_metrics())
    assert produced <= set(METRICS), f"produced but not declared: {sorted(produced - set(METRICS))}"
    # The simulator's /metrics serves every server field; only a sweep measures capacity.
    expected = names("client") | names("server") | {"gpu_power_min_w", "energy_j", "output_tokens_per_j"}
    assert produced >= expected, f"declared but never produced: {sorted(expected - produced)}"


def test_a_window_where_every_gpu_field_was_measured_produces_every_telemetry_metric() -> None:
    fields = {f.name: 1.0 for f in dataclasses.fields(GpuWindow) if f.type == "float | None"}
    gpu = GpuWindow(index=0, uuid="GPU-0", name="sim", **fields)
    window = TelemetryWindow(0.0, 1.0, "test", (gpu, gpu))
    # Tokens per joule is the session's (the window's tokens over its energy).
    assert set(window.metrics()) | {"output_tokens_per_j"} == names("telemetry")


def test_the_docs_metric_reference_is_the_generated_one() -> None:
    assert SECTION.read(PAGE) == reference_markdown(), (
        f"{SECTION.page}'s metric reference differs from the declarations; regenerate it with: {SECTION.regenerate}"
    )


def test_reference_command_prints_and_updates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert catalogue_main(["--reference"]) == 0
    assert capsys.readouterr().out == reference_markdown()
    stale = tmp_path / "metrics.md"
    stale.write_text(PAGE.read_text().replace("| `output_throughput` | tok/s |", "| `output_throughput` | t/s |"))
    assert catalogue_main(["--reference", "--update", str(stale)]) == 0
    assert "metric reference updated" in capsys.readouterr().out
    assert stale.read_text() == PAGE.read_text()
    assert catalogue_main(["--reference", "--update", str(tmp_path / "missing.md")]) == 2
    assert "missing.md" in capsys.readouterr().err
