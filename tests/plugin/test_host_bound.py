"""Host-bound runs named: a simulator whose engine spins a process at a whole core while it has
work (``spin_process``), run through pytest as a user would."""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from pathlib import Path

import pytest

from perfgate.server import start_server
from tests.support import GATE_PYTEST_ARGS, PERF_TESTS, sim_spec

PROFILE = """
name = "spin-sim"

[server]
kind = "simulator"
startup_timeout_s = 30
shutdown_timeout_s = 5

[server.sim]
gpus = 1
time_scale = 0.1
startup_delay_s = 0.2
spin_process = {spin}

[telemetry]
source = "none"

[correctness]
enabled = false
reason = "these cases are about the host-CPU check"

[gate]
repeats = 2
client_max_lag_p99_ms = 5000

[[workload]]
num_prompts = 32
concurrency = 8
input_len = 32
output_len = 64
warmup_requests = 2
{workload_extra}
"""

pytest_plugins = ["pytester"]

WORKLOAD = "c8-in32-out64"
# The spinner holds a whole core only while the machine lets it: niced beside a CI run (load 15 on
# 2 cores) it got under a fifth of one. Always runnable while the engine works, it is still the
# busiest process of the simulator's tree, so these cases ask only a twentieth of a core of it.
LOOSE_BOUND = "host_bound_cpu_share = 0.05"
FINDING = (
    rf"{WORKLOAD}: host-bound: server process sim::scheduler -I \S+_spin\.py \d+ \(pid \d+\) ran at "
    r"\d+% of a core while GPU busy not measured: this run measures the host CPU, not the GPU stack"
)


@pytest.fixture
def gate(pytester: pytest.Pytester, tmp_path: Path):
    pytester.makepyfile(test_serving=PERF_TESTS)

    def run(*args: str, spin: bool = True, workload_extra: str = LOOSE_BOUND) -> pytest.RunResult:
        profile = pytester.path / "profile.toml"
        profile.write_text(PROFILE.format(spin=str(spin).lower(), workload_extra=workload_extra))
        return pytester.runpytest_subprocess(
            *GATE_PYTEST_ARGS,
            f"--perf-profile={profile}",
            f"--perf-baselines={tmp_path / 'baselines'}",
            f"--perf-results={tmp_path / 'results'}",
            *args,
            timeout=240,
        )

    run.results = tmp_path / "results"  # type: ignore[attr-defined]
    return run


def results_doc(results: Path) -> dict:
    (path,) = results.glob("results-*.json")
    return json.loads(path.read_text())


def test_a_host_bound_run_is_named_in_one_line_and_its_processes_cpu_is_kept(gate):
    result = gate()
    out = result.stdout.str()
    assert re.search(FINDING + r" \([12] of 2 repeats\)\n", out), out
    doc = results_doc(gate.results)
    # A note, not a reason to refuse the run (a load of 15 on 2 cores may refuse it for its client).
    assert not [why for why in doc["workloads"][0]["invalid_reasons"] if "host-bound" in why]
    repeats = doc["workloads"][0]["repeats"]
    assert len(repeats) == 2
    for rep in repeats:
        titles = [p["title"] for p in rep["host_cpu"]["processes"]]
        # The simulator as launched: its interpreter's name is the venv's (python, python3, python3.11).
        assert any(re.match(r"python[\d.]* -m perfgate\.sim ", t) for t in titles), titles
        spinner = next(p for p in rep["host_cpu"]["processes"] if p["title"].startswith("sim::scheduler"))
        assert spinner["cpu_share"] > 0.0
    assert any(rep["host_cpu"]["host_bound"] for rep in repeats)
    host = doc["server"]["host"]
    assert host["cpu"] and host["cpu_governor"]
    assert any(k.split(" ", 1)[1].startswith("sim::scheduler") for k in host["affinity"])
    assert re.fullmatch(r"[\d,-]+", next(iter(host["affinity"].values())))
    assert doc["host_cpu_note"] == ""


def test_host_bound_invalid_makes_the_run_invalid_with_that_reason(gate):
    result = gate(workload_extra=f'{LOOSE_BOUND}\nhost_bound = "invalid"')
    assert result.ret != 0
    out = result.stdout.str()
    assert re.search(rf"repeat [12]: {FINDING.split(': ', 1)[1]} \(host_bound = \"invalid\"\)", out), out
    assert re.search(rf"{WORKLOAD}\s+run validity\s+INVALID", out)


def test_a_server_that_spins_nothing_is_not_named(gate):
    out = gate(spin=False, workload_extra="").stdout.str()
    assert "perfgate summary" in out
    assert "host-bound" not in out and "host CPU:" not in out


def test_an_attached_server_is_not_checked_said_once(gate, tmp_path):
    with ExitStack() as stack:
        server = start_server(sim_spec(spin_process=True), log_dir=tmp_path / "logs", stack=stack)
        out = gate(f"--perf-base-url={server.base_url}").stdout.str()
    assert out.count("host CPU: not checked") == 1
    assert "host-bound" not in out
    doc = results_doc(gate.results)
    assert "affinity" not in doc["server"]["host"]
    assert doc["workloads"][0]["repeats"][0]["host_cpu"] == {"not_checked": doc["host_cpu_note"]}
