"""Fault cases of telemetry that cannot be true (issue #34, items 4 and 5), through the whole gate:
the simulator's dcgm-exporter and /metrics broken from the environment (sim._telemetry_faults).

Each case asserts the exit code and the message the user sees; the ``gate`` fixture checks that
no process is left and nothing was written outside the run's folders.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.faults.conftest import Gate
from tests.support import workload_baselines

FAILED = int(pytest.ExitCode.TESTS_FAILED)
DCGM = 'source = "dcgm"\ndcgm_endpoints = ["{base_url}/dcgm/metrics"]'
FLOOR = "floors = { gpu_power_min_w = 10 }"


def dcgm_profile(gate: Gate) -> Path:
    """The fault profile with power from the simulator's dcgm-exporter and a gated power floor."""
    path = gate.profile(gate=FLOOR)
    text = path.read_text()
    assert '[telemetry]\nsource = "none"' in text
    return gate.write(path.name, text.replace('source = "none"', DCGM))


def no_traceback(out: str) -> None:
    assert "Traceback" not in out and "INTERNALERROR" not in out and "ZeroDivisionError" not in out


def test_nan_power_fails_a_gated_floor_naming_why_and_records_nothing(gate: Gate) -> None:
    # Before: "GPU power not measured: " with nothing after the colon, exit 0.
    outcome = gate.run("--perf-update-baselines", profile=dcgm_profile(gate), env={"PERFGATE_SIM_DCGM_FAULT": "nan"})
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert "repeat 1: gated gpu_power_min_w not measured (GPU " in outcome.out, outcome.out[-3000:]
    assert "/dcgm/metrics: power_avg_w nan is not a finite number; such readings are not used" in outcome.out
    assert "not measured: \n" not in outcome.out and "not measured:\n" not in outcome.out
    assert workload_baselines(gate.baselines) == []
    no_traceback(outcome.out)


def test_an_energy_counter_that_jumps_is_not_recorded_as_power(gate: Gate) -> None:
    # Before: gpu_power_min_w in the hundreds of kW, PASS, and recorded as the baseline.
    outcome = gate.run("--perf-update-baselines", profile=dcgm_profile(gate), env={"PERFGATE_SIM_DCGM_FAULT": "jump"})
    assert outcome.ret == 0, outcome.out[-3000:]
    (baseline,) = workload_baselines(gate.baselines)
    powers = [r["gpu_power_min_w"] for r in json.loads(baseline.read_text())["repeats"]]
    # The simulator's GPUs are limited to their enforced power limit (a few hundred W at most).
    assert powers and all(0 < p < 1000 for p in powers), powers
    jumps = [line for line in outcome.out.splitlines() if "energy counter rose" in line]
    # Named once per GPU (two simulated GPUs), however many steps jumped.
    assert len(jumps) == 2 and all("such steps are not used" in line for line in jumps), jumps
    no_traceback(outcome.out)


def test_an_exporter_that_hangs_is_dropped_and_a_gated_floor_fails_naming_it(gate: Gate) -> None:
    # Before: every scrape waited out its 2 s timeout, and the floor was "not measured:" with exit 0.
    t0 = time.monotonic()
    outcome = gate.run(profile=dcgm_profile(gate), env={"PERFGATE_SIM_DCGM_FAULT": "hang"})
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert "gated gpu_power_min_w not measured (" in outcome.out, outcome.out[-3000:]
    assert "/dcgm/metrics did not answer within 2 s; not read again this run" in outcome.out
    assert time.monotonic() - t0 < 120
    no_traceback(outcome.out)


def test_a_server_that_counts_zero_output_tokens_is_invalid_not_a_crash(gate: Gate) -> None:
    # Before: ZeroDivisionError in the summary, no results.
    outcome = gate.run("--perf-update-baselines", env={"PERFGATE_SIM_METRICS_FAULT": "zero-tokens"})
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert "the server's /metrics counted -100.0% output tokens against the client's" in outcome.out
    assert workload_baselines(gate.baselines) == []
    no_traceback(outcome.out)
