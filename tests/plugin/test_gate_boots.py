"""The boot as the unit of replication ([gate] boots), end to end through pytest on the simulator.

PERFGATE_SIM_BOOT_EFFECT = 0.10 draws each boot's speed in [0.9, 1.1]; the seed file fixes the
draws (random.Random(n).uniform(0.9, 1.1) for the n-th boot: 1.069, 0.927, 1.091, 0.948, 0.947,
1.025, 1.059, 0.965, 0.945, ...). The workload's steps are slept, time_scale 1 and noise 0, so
that mean TPOT follows the boot's speed and not the 2 busy cores this runs on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.report import read_results
from tests.plugin.test_gate_run import summary_verdicts
from tests.support import GATE_PYTEST_ARGS, PERF_TESTS, workload_baselines

PROFILE = """
name = "boots-sim"

[server]
kind = "simulator"
startup_timeout_s = 30
shutdown_timeout_s = 5

[server.sim]
time_scale = 1.0
noise = 0.0
drift = 0.0
startup_delay_s = 0.1

[telemetry]
source = "none"

[correctness]
enabled = false
reason = "these cases are about boots"

[gate]
repeats = 3
client_max_lag_p99_ms = 5000
# mean TPOT is what the boots move here (a boot's speed, 0.9x to 1.1x); the others are loose
# because the client shares 2 busy cores with the simulator.
tolerance = {{ mean_tpot_ms = 0.08, output_throughput = 0.6, total_throughput = 0.6, p99_tpot_ms = 2.0 }}
{gate_extra}

[[workload]]
num_prompts = 16
concurrency = 8
input_len = 32
output_len = 16
warmup_requests = 2
"""

pytest_plugins = ["pytester"]

WORKLOAD = "c8-in32-out16"
GATED = ("mean_tpot_ms", "output_throughput", "p99_tpot_ms", "total_throughput")


@pytest.fixture
def gate(pytester: pytest.Pytester, tmp_path: Path):
    pytester.makepyfile(test_serving=PERF_TESTS)
    baselines = tmp_path / "baselines"
    seed_file = tmp_path / "boot-seed"
    seed_file.write_text("0\n")
    pytester._monkeypatch.setenv("PERFGATE_SIM_BOOT_EFFECT", "0.10")
    pytester._monkeypatch.setenv("PERFGATE_SIM_BOOT_SEED_FILE", str(seed_file))

    def run(*args: str, gate_extra: str = "", env: dict[str, str] | None = None):
        profile = pytester.path / "profile.toml"
        profile.write_text(PROFILE.format(gate_extra=gate_extra))
        for k, v in (env or {}).items():
            pytester._monkeypatch.setenv(k, v)
        return pytester.runpytest_subprocess(
            *GATE_PYTEST_ARGS, f"--perf-profile={profile}", f"--perf-baselines={baselines}", *args, timeout=240
        )

    run.baselines = baselines
    run.seed_file = seed_file
    return run


def gated(out: str) -> dict[str, str]:
    return {m: v for (w, m), v in summary_verdicts(out).items() if w == WORKLOAD and m in GATED}


@pytest.mark.long
def test_one_boot_each_fails_an_unchanged_server(gate):
    # Recorded on a boot at 1.069x, gated on one at 0.927x: mean TPOT +15 % past the 8 % tolerance,
    # and the three repeats of one boot cannot see that the boot, not the server, changed.
    assert gate("--perf-update-baselines").ret == 0
    same = gate()
    assert gated(same.stdout.str())["mean_tpot_ms"] == "FAIL", same.stdout.str()[-3000:]
    assert gate.seed_file.read_text().strip() == "2"


@pytest.mark.long
def test_three_boots_do_not_fail_an_unchanged_server_and_catch_a_35_percent_slowdown(gate):
    recorded = gate("--perf-update-baselines", "--perf-boots=3")
    out = recorded.stdout.str()
    assert gate.seed_file.read_text().strip() == "3", out[-3000:]
    (path,) = workload_baselines(gate.baselines)
    doc = json.loads(path.read_text())
    assert doc["boots"] == [1, 1, 1, 2, 2, 2, 3, 3, 3] and len(doc["repeats"]) == 9
    # The recorded boots (1.069x, 0.927x, 1.091x) spread 15 %: wider than the 8 % tolerance.
    assert "the baseline's boots spread" in out and "record and gate with more boots" in out

    # Boots at 0.948x, 0.947x and 1.025x: the boot medians interleave with the recorded ones.
    same = gate(gate_extra="boots = 3")
    verdicts = gated(same.stdout.str())
    assert set(verdicts) == set(GATED) and "FAIL" not in verdicts.values(), same.stdout.str()[-3000:]
    assert verdicts["mean_tpot_ms"] == "INCONCLUSIVE"
    spread = summary_verdicts(same.stdout.str())[(WORKLOAD, "mean_tpot_ms spread")]
    assert spread == "info"

    slow = gate(gate_extra="boots = 3", env={"PERFGATE_SIM_SLOWDOWN": "1.35"})
    out = slow.stdout.str()
    assert gated(out)["mean_tpot_ms"] == "FAIL", out[-3000:]
    assert "Mann-Whitney p=0.05 on 3 vs 3 boots" in out
    assert gate.seed_file.read_text().strip() == "9"


@pytest.mark.long
def test_results_json_keeps_each_metrics_boot_spreads(gate, tmp_path):
    results = tmp_path / "results"
    assert gate("--perf-update-baselines", "--perf-boots=2", f"--perf-results={results}").ret in (0, 1)
    (doc_path,) = results.glob("*.json")
    doc = json.loads(doc_path.read_text())
    (workload,) = doc["workloads"]
    tpot = next(m for m in workload["verdict"]["metrics"] if m["metric"] == "mean_tpot_ms")
    assert tpot["replicate"] == "boot" and tpot["n_measured"] == 2
    assert tpot["within_boot_spread"] >= 0 and tpot["between_boot_spread"] > 0
    # Each repeat says its boot, which perfgate compare reads back to judge by boots too.
    boots = [rep["boot"] for rep in workload["repeats"]]
    assert boots == sorted(boots) and set(boots) == {1, 2}, boots
    assert read_results(doc_path).workloads[workload["workload"]].boots == tuple(boots)


def test_boots_refused_with_an_attached_server(gate):
    result = gate("--perf-base-url=http://127.0.0.1:9", "--perf-boots=3")
    assert result.ret == 2
    out = result.stdout.str() + result.stderr.str()
    assert "--perf-base-url attaches to a server perfgate cannot restart" in out, out[-3000:]


@pytest.mark.parametrize(("value", "expected"), [("0", "an integer >= 1"), ("101", "an integer from 1 to 100")])
def test_bad_boots_option_is_refused(gate, value: str, expected: str):
    result = gate(f"--perf-boots={value}")
    assert result.ret == 4
    assert f"argument --perf-boots: expected {expected}, got '{value}'" in result.stderr.str()
