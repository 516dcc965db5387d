"""benchmarks/gpu_sglang.sh on CPU: its stages against the simulator, its refusals, its report.

The script is written for a GPU host with SGLang; everything but the model build and the server
kind is the same against perfgate's simulator (GPU_SGLANG_PROFILE, GPU_SGLANG_MODEL=0), so its stage logic,
the attached slower server and the expectations it reads from JUnit and the results JSON are
checked here, where CI runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfgate._cpus import format_cpu_list

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_sglang.sh"

# The profile's workload names (the script's expectations name them), on the simulator. light-c1's
# floor is out of reach on purpose: it is the negative control that must fail; gen-c256's passes.
# These tests check the script's stages and report, not a number: the workloads are as small as
# keeps them apart. gen-c256 runs 128 streams, so the regress stage's --max-running-requests 32
# leaves a quarter of them running (about a third of the throughput, far past its 30 % tolerance).
SIM_PROFILE = """
name = "gpu-sglang-sim"
[server]
kind = "simulator"
model_path = "sim/llama"
startup_timeout_s = 60
shutdown_timeout_s = 10
[server.sim]
gpus = 1
time_scale = 0.1
startup_delay_s = 0.2
max_running_requests = 256
[telemetry]
source = "dcgm"
dcgm_endpoints = ["{base_url}/dcgm/metrics"]
interval_s = 0.2
require_power = true
[gate]
repeats = 2
max_repeats = 2
tolerance = { output_throughput = 0.3, total_throughput = 0.3, mean_tpot_ms = 1.0, p99_tpot_ms = 2.0 }
client_max_lag_p99_ms = 2000
[correctness]
prompts = 8
output_len = 16
[[workload]]
name = "gen-c256-in512-out128"
num_prompts = 256
concurrency = 128
input_len = 64
output_len = 32
warmup_requests = 8
[workload.floors]
gpu_power_min_w = 50
[[workload]]
name = "light-c1"
num_prompts = 4
concurrency = 1
input_len = 64
output_len = 16
warmup_requests = 1
repeats = 1
tolerance = { output_throughput = 1.0, total_throughput = 1.0, mean_tpot_ms = 3.0, p99_tpot_ms = 5.0 }
[workload.floors]
gpu_power_min_w = 100000
[[workload]]
name = "oai-c1024-in128-out64"
backend = "openai-completions"
num_prompts = 128
concurrency = 128
input_len = 64
output_len = 16
warmup_requests = 8
repeats = 1
tolerance = { output_throughput = 1.0, total_throughput = 1.0, mean_tpot_ms = 3.0, p99_tpot_ms = 5.0 }
"""


def run_script(tmp_path: Path, profile_text: str = SIM_PROFILE, **env: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "sim.toml"
    profile.write_text(profile_text)
    full = {
        **os.environ,
        "PYTHON": sys.executable,
        "GPU_SGLANG_MODEL": "0",
        "GPU_SGLANG_PROFILE": str(profile),
        "PERFGATE_LOCK_DIR": str(tmp_path / "locks"),
        **env,
    }
    return subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "work")], capture_output=True, text=True, env=full, timeout=400
    )


@pytest.mark.long
def test_every_stage_on_the_simulator_over_two_calls(tmp_path: Path) -> None:
    """Record in one call, gate and regress in a later one against its baselines (a profile with
    boots = 3 on a GPU does not fit one 10-minute device call)."""
    first = run_script(tmp_path, GPU_SGLANG_STAGES="record")
    report = json.loads(first.stdout.strip().splitlines()[-1])
    assert first.returncode == 0, (report["problems"], first.stdout[-3000:], first.stderr[-2000:])
    assert set(report["stages"]) == {"record"} and report["stages_run"] == ["record"]
    assert report["stages"]["record"]["tests"]["test_gpu_power[light-c1]"] == "failure"
    proc = run_script(tmp_path, GPU_SGLANG_STAGES="gate regress")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, (report["problems"], proc.stdout[-3000:], proc.stderr[-2000:])
    assert report["ok"] and report["problems"] == []
    # The gate used the first call's baselines.
    stages = report["stages"]
    assert set(stages) == {"gate", "regress"} and report["stages_run"] == ["gate", "regress"]
    assert stages["gate"]["workloads"]["gen-c256-in512-out128"]["baseline"].startswith(str(tmp_path / "work"))
    assert stages["gate"]["tests"]["test_throughput[oai-c1024-in128-out64]"] == "passed"
    message = stages["regress"]["messages"]["test_throughput[gen-c256-in512-out128]"]
    assert "output_throughput" in message and "< limit" in message
    # The slower server was attached: the regress stage ran only the c256 workload.
    assert set(stages["regress"]["workloads"]) == {"gen-c256-in512-out128"}
    assert report["regression"] == {"server_args": "--max-running-requests 32", "attached": True}
    assert report["explain"] is False and "explain" not in stages["gate"]["workloads"]["gen-c256-in512-out128"]


@pytest.mark.long
def test_explain_mode_on_the_simulator(tmp_path: Path) -> None:
    """GPU_SGLANG_EXPLAIN=1: gen-c256 alone in every stage; record stores its reference profile,
    gate and regress are diffed against it, and the report carries each slice in brief."""
    proc = run_script(tmp_path, GPU_SGLANG_EXPLAIN="1")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, (report["problems"], proc.stdout[-3000:], proc.stderr[-2000:])
    assert report["explain"] is True
    stages = report["stages"]
    assert {set(e["workloads"]) == {"gen-c256-in512-out128"} for e in stages.values()} == {True}
    assert "test_gpu_power[light-c1]" not in stages["record"]["tests"]
    recorded = stages["record"]["workloads"]["gen-c256-in512-out128"]["explain"]
    assert recorded["source"] == "kernel" and recorded["rows"] and "diff" not in recorded
    assert recorded["capture_s"] > 0 and recorded["trace_bytes"] > 0
    for stage in ("gate", "regress"):
        diff = stages[stage]["workloads"]["gen-c256-in512-out128"]["explain"]["diff"]
        assert diff["rows"] and diff["ranked_by"] in ("ms_per_step", "step_share"), diff


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"GPU_SGLANG_BUNDLE": "/nonexistent"},
            "GPU_SGLANG_BUNDLE=/nonexistent holds no env.sh and site/: run the bundle's join.sh",
        ),
        ({"GPU_SGLANG_SLOW_ARGS": ""}, "GPU_SGLANG_SLOW_ARGS is empty"),
        ({"GPU_SGLANG_STAGES": "record gaet"}, "GPU_SGLANG_STAGES: unknown stage 'gaet' (record, gate, regress)"),
        ({"GPU_SGLANG_WORKLOAD": "gen-c265"}, "GPU_SGLANG_WORKLOAD is not its workload"),
        ({"GPU_SGLANG_NOISE_FIRST": "pined"}, "GPU_SGLANG_NOISE_FIRST: unknown side 'pined' (unpinned, pinned)"),
        ({"GPU_SGLANG_PROFILE": "/nonexistent.toml"}, "no profile /nonexistent.toml (GPU_SGLANG_PROFILE)"),
    ],
)
def test_refusals_before_anything_runs(tmp_path: Path, env: dict[str, str], message: str) -> None:
    proc = run_script(tmp_path, **env)
    assert proc.returncode == 2
    assert message in proc.stdout
    assert not (tmp_path / "work" / "record").exists()


def _report_module() -> object:
    spec = importlib.util.spec_from_file_location("gpu_report", REPO / "benchmarks" / "_gpu_report.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_report_names_each_expectation_that_did_not_hold(tmp_path: Path) -> None:
    stage = tmp_path / "gate"
    stage.mkdir()
    (stage / "junit.xml").write_text(
        '<testsuites><testsuite><testcase name="test_throughput[a]"/>'
        '<testcase name="test_gpu_power[b]"><failure message="b: gpu_power_min_w 10 W &lt; floor"/></testcase>'
        '<testcase name="test_throughput[c]"><failure message="c: mean_tpot_ms worse"/></testcase>'
        "</testsuite></testsuites>"
    )
    report = _report_module().check(  # type: ignore[attr-defined]
        str(tmp_path),
        {
            "gate": {"test_throughput[a]": "failure", "test_gpu_power[b]": "failure", "test_missing[x]": "passed"},
            "_messages": {"gate": {"test_throughput[c]": "output_throughput"}},
        },
        {},
    )
    assert report["ok"] is False
    assert report["problems"] == [
        "gate: no results JSON (the stage did not finish)",
        "gate: test_throughput[a] is passed, expected failure",
        "gate: test_missing[x] is missing, expected passed",
        "gate: test_throughput[c] failed without 'output_throughput' in its message: c: mean_tpot_ms worse",
    ]


def _spread_module() -> object:
    spec = importlib.util.spec_from_file_location("boot_spread", REPO / "benchmarks" / "boot_spread.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up by name.
    sys.modules.setdefault("boot_spread", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.long
def test_noise_boots_on_the_simulator_report_their_spread(tmp_path: Path) -> None:
    # A profile that boots 3 times a side (as the GPU-bound reference does): each noise stage is
    # still one boot, so each boot-N holds that boot's repeats alone.
    booted = SIM_PROFILE.replace("[gate]\nrepeats = 2", "[gate]\nboots = 3\nrepeats = 2")
    assert booted != SIM_PROFILE
    proc = run_script(tmp_path, booted, GPU_SGLANG_NOISE_BOOTS="2", GPU_SGLANG_NOISE_REPEATS="2")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, (report["problems"], proc.stdout[-3000:], proc.stderr[-2000:])
    spread = json.loads((tmp_path / "work" / "boot-spread.json").read_text())
    assert spread["ok"] and spread["boots"] == 2 and spread["valid"] == [True, True]
    assert [len(values) for values in spread["per_boot"]] == [2, 2]
    assert spread["low"] <= spread["median"] <= spread["high"]
    # The floor is the worst record-then-gate drop of these boots, rounded up to a whole percent.
    assert spread["tolerance_floor"] >= -spread["worst_change"] > spread["tolerance_floor"] - 0.01
    assert spread["within_boot"] is not None
    assert "boot spread of output_throughput over 2 boots" in proc.stdout


@pytest.mark.long
def test_noise_boots_alternate_pinned_and_unpinned_on_the_simulator(tmp_path: Path) -> None:
    # Every CPU this test may use: one CPU of a loaded 2-core machine left the simulator's DCGM
    # endpoint unanswered for 2 s (the boot invalid, as it should be), and placement is all this checks.
    cpus = format_cpu_list(os.sched_getaffinity(0))
    proc = run_script(
        tmp_path, GPU_SGLANG_NOISE_BOOTS="2", GPU_SGLANG_NOISE_AFFINITY=cpus, GPU_SGLANG_NOISE_FIRST="pinned"
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, (report["problems"], proc.stdout[-3000:], proc.stderr[-2000:])
    assert report["pinned_cpus"] == cpus
    # One machine, the sides alternating: a drift over the call moves both alike.
    started = re.findall(r"\] ((?:un)?pinned/boot-\d): \(at most", proc.stdout)
    assert started == ["pinned/boot-1", "unpinned/boot-1", "pinned/boot-2", "unpinned/boot-2"]
    work = tmp_path / "work"
    assert not list(work.glob("boot-*")) and set(report["stages"]) == set(started)
    for side, placed in (("unpinned", ""), ("pinned", cpus)):
        spread = json.loads((work / side / "boot-spread.json").read_text())
        assert spread["ok"] and spread["boots"] == 2 and spread["valid"] == [True, True], spread
        for boot in ("boot-1", "boot-2"):
            (doc,) = (json.loads(p.read_text()) for p in (work / side / boot).glob("results-*.json"))
            assert doc["server"]["cpu_affinity"] == placed, (side, boot, doc["server"])


def test_noise_study_refuses_a_profile_that_pins_already(tmp_path: Path) -> None:
    pinned = SIM_PROFILE.replace("[server]\n", '[server]\ncpu_affinity = "0"\n')
    assert pinned != SIM_PROFILE
    proc = run_script(tmp_path, pinned, GPU_SGLANG_NOISE_BOOTS="2", GPU_SGLANG_NOISE_AFFINITY="0")
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "pins its server already ([server] cpu_affinity)" in proc.stderr + proc.stdout
    assert "cannot write the pinned profile" in proc.stdout and "boot-1" not in proc.stdout


def test_boot_spread_arithmetic_and_too_few_boots() -> None:
    mod: Any = _spread_module()
    boots = [mod.Boot(f"boot-{i}", v, True, [], [], []) for i, v in enumerate([[100.0], [80.0, 84.0], [90.0]])]
    s = mod.spread(boots)
    assert (s.low, s.high, s.median) == (82.0, 100.0, 90.0)
    assert s.worst_change == pytest.approx(-0.18) and s.tolerance_floor == 0.18
    assert s.within_boot == pytest.approx(0.05)
    with pytest.raises(ValueError, match="1 boot"):
        mod.spread(boots[:1])


def test_boot_spread_says_when_there_is_nothing_to_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mod: Any = _spread_module()
    assert mod.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "0 boot(s) with results" in out and json.loads(out.splitlines()[-1])["ok"] is False
