"""The gate run end to end through pytest itself: perf_tests/ against the simulator.

Each case runs pytest in a subprocess (pytester) exactly as a user would, with a fast
simulator profile, and checks exit codes, the summary and the failure messages.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from tests.support import GATE_PYTEST_ARGS, PERF_TESTS, workload_baselines

PROFILE = """
name = "fast-sim"

[server]
kind = "simulator"
startup_timeout_s = 30
shutdown_timeout_s = 5

[server.sim]
gpus = 2
time_scale = 0.1
startup_delay_s = 0.2
{sim_extra}

[telemetry]
source = "dcgm"
dcgm_endpoints = ["{{base_url}}/dcgm/metrics"]
interval_s = 0.05

[correctness]
enabled = false
reason = "these cases are about the speed gate; tests/faults/test_correctness_faults.py gates the probe"

[gate]
repeats = 3
# The client shares 2 busy cores with the simulator and other tests: these cases are not about
# its timing (tests/faults checks the client's own validity).
client_max_lag_p99_ms = 5000
# Loose enough that a rerun on a noisy 2-core machine never trips (under `pytest -n 4` a rerun of the
# same simulator moved throughput by up to -29 % and mean TPOT by +27 %); a 2x slowdown (-50 % and
# +100 %) always does.
tolerance = {{ output_throughput = 0.35, total_throughput = 0.35, mean_tpot_ms = 0.5, p99_tpot_ms = 1.0 }}
{gate_extra}

[[workload]]
num_prompts = 32
concurrency = 16
input_len = 32
output_len = 16
warmup_requests = 2
"""

pytest_plugins = ["pytester"]

WORKLOAD = "c16-in32-out16"
GATED = ("mean_tpot_ms", "output_throughput", "p99_tpot_ms", "total_throughput")
# Measured and shown in every summary, not gated by this profile.
INFO = (
    "mean_ttft_ms",
    "concurrency",
    "steady_output_throughput",
    "server_cache_hit_rate",
    "gpu_power_mean_w",
    "output_tokens_per_j",
)


def summary_verdicts(out: str) -> dict[tuple[str, str], str]:
    """(workload, metric) -> verdict, read from the rows of the terminal summary table.

    Columns are separated by two or more spaces (values such as "2,010.9 tok/s" hold one).
    """
    lines = out[out.index("perfgate summary") :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("workload ")) + 2
    verdicts: dict[tuple[str, str], str] = {}
    for line in lines[start:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) < 3:
            break
        verdicts[(cells[0], cells[1])] = cells[-1]
    return verdicts


@pytest.fixture
def gate(pytester: pytest.Pytester, tmp_path: Path):
    pytester.makepyfile(test_serving=PERF_TESTS)
    baselines = tmp_path / "baselines"

    def run(*args: str, sim_extra: str = "", gate_extra: str = "", env: dict[str, str] | None = None):
        profile = pytester.path / "profile.toml"
        profile.write_text(PROFILE.format(sim_extra=sim_extra, gate_extra=gate_extra))
        for k, v in (env or {}).items():
            pytester._monkeypatch.setenv(k, v)
        return pytester.runpytest_subprocess(
            *GATE_PYTEST_ARGS,
            "-rs",
            f"--perf-profile={profile}",
            f"--perf-baselines={baselines}",
            *args,
            timeout=240,
        )

    run.baselines = baselines
    return run


def test_first_run_has_no_baseline_and_says_how_to_record_one(gate, tmp_path):
    junit = tmp_path / "junit.xml"
    result = gate(f"--junitxml={junit}")
    result.assert_outcomes(passed=1, skipped=5)
    # Every test carries the workload's metrics as JUnit properties.
    xml = junit.read_text()
    assert '<property name="perf.output_throughput"' in xml and '<property name="perf.mean_tpot_ms"' in xml
    out = result.stdout.str()
    assert summary_verdicts(out) == {
        **{(WORKLOAD, m): "no-baseline" for m in GATED},
        **{(WORKLOAD, m): "info" for m in (*INFO, "gpu_power_min_w")},
    }
    assert "not gated: record one with `pytest perf_tests --perf-update-baselines`" in out
    # Which tests were skipped, and why, is in the summary, not only how many.
    skipped = [line for line in out.splitlines() if line.startswith("skipped: test_")]
    assert len(skipped) == 5, skipped
    assert any(line.startswith("skipped: test_correctness: correctness probe off") for line in skipped), skipped
    assert any(line.startswith(f"skipped: test_throughput[{WORKLOAD}]: ") for line in skipped), skipped
    # perfgate's progress starts on its own line, never after pytest's file name and dots.
    progress = [line for line in out.splitlines() if "[perfgate] " in line and " requests, " in line]
    assert progress and all(line.startswith("[perfgate] ") for line in progress), progress[:3]


@pytest.mark.long
def test_record_then_pass_then_catch_a_slowdown(gate):
    recorded = gate("--perf-update-baselines")
    recorded.assert_outcomes(passed=3, skipped=3)
    assert {k: v for k, v in summary_verdicts(recorded.stdout.str()).items() if v != "info"} == {
        (WORKLOAD, m): "recorded" for m in GATED
    }
    files = workload_baselines(gate.baselines)
    assert len(files) == 1 and "c16-in32-out16" in files[0].name
    doc = json.loads(files[0].read_text())
    assert len(doc["repeats"]) == 3 and doc["repeats"][0]["output_throughput"] > 0
    assert doc["provenance"]["date"] and "server" in doc["provenance"]

    same = gate()
    same.assert_outcomes(passed=3, skipped=3)
    assert summary_verdicts(same.stdout.str()) == {
        **{(WORKLOAD, m): "PASS" for m in GATED},
        **{(WORKLOAD, m): "info" for m in (*INFO, "gpu_power_min_w")},
    }

    slow = gate(env={"PERFGATE_SIM_SLOWDOWN": "2.0"})
    slow.assert_outcomes(passed=1, failed=2, skipped=3)
    out = slow.stdout.str()
    number = r"[\d,]+\.?\d*"
    assert re.search(
        rf"c16-in32-out16: output_throughput {number} tok/s < limit {number} tok/s "
        rf"\(baseline {number}, -[\d.]+%, tolerance 35%, Mann-Whitney p=0.05\)",
        out,
    )
    assert re.search(
        rf"c16-in32-out16: mean_tpot_ms {number} ms > limit {number} ms "
        rf"\(baseline {number}, \+[\d.]+%, tolerance 50%, Mann-Whitney p=0.05\)",
        out,
    )
    verdicts = summary_verdicts(out)
    assert verdicts[(WORKLOAD, "output_throughput")] == verdicts[(WORKLOAD, "mean_tpot_ms")] == "FAIL"

    refused = gate("--perf-update-baselines", env={"PERFGATE_SIM_SLOWDOWN": "2.0"})
    assert refused.ret != 0
    assert "refusing to replace the stored baseline with worse numbers" in refused.stdout.str()
    accepted = gate(
        "--perf-update-baselines",
        "--perf-accept-regression=moved to a slower GPU",
        env={"PERFGATE_SIM_SLOWDOWN": "2.0"},
    )
    accepted.assert_outcomes(passed=3, skipped=3)
    doc = json.loads(files[0].read_text())
    assert doc["provenance"]["accepted_regression"]["reason"] == "moved to a slower GPU"


def test_absolute_floor_fails_without_any_baseline(gate):
    result = gate(sim_extra="idle_gpus = 1", gate_extra="floors = { gpu_power_min_w = 150 }")
    result.assert_outcomes(passed=1, failed=1, skipped=4)
    out = result.stdout.str()
    assert re.search(r"c16-in32-out16: gpu_power_min_w [\d.]+ W < floor 150.0 W\n", out)
    assert summary_verdicts(out)[(WORKLOAD, "gpu_power_min_w")] == "FAIL"
    # The idle simulated GPU (the last of two; dcgm labels it with the simulator's host name) is
    # named, with the window its power was measured over. A run too short for a steady window
    # measures over the whole measured phase instead.
    host = re.escape(socket.gethostname())
    assert re.search(
        rf"weakest: GPU {host}:1 \(…[0-9a-f]{{8}}\) NVIDIA RTX PRO 6000 Blackwell Server Edition, "
        r"[\d.]+ W, over the [\d.]+ s (steady window|whole measured phase)\n",
        out,
    ), out


def test_bad_profile_stops_before_anything_boots(gate, pytester):
    profile = pytester.path / "bad.toml"
    profile.write_text(
        '[server]\nkind = "simulator"\n[[workload]]\nnum_prompts = 1\nconcurrency = 0\ninput_len = 1\noutput_len = 1\n'
    )
    result = pytester.runpytest_subprocess(f"--perf-profile={profile}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (
        f"perfgate: profile {profile}: [[workload]] #1 key 'concurrency': expected an integer >= 1, or a list of "
        "them in increasing order (a capacity sweep), got 0" in result.stdout.str()
    )
    out = result.stderr.str() + result.stdout.str()
    assert "Traceback" not in out and "perfgate summary" not in out


@pytest.mark.parametrize(
    ("gate_extra", "complaint"),
    [
        ("floors = { goodness = 3 }", "[gate].floors: metric 'goodness' is not one perfgate measures"),
        # A misspelling with a known suffix would otherwise be gated, never measured, and pass.
        (
            "ceilings = { mean_tpott_ms = 3 }",
            "[gate].ceilings: metric 'mean_tpott_ms' is not one perfgate measures; did you mean 'mean_tpot_ms'?",
        ),
    ],
)
def test_unknown_metric_stops_before_anything_boots(gate, gate_extra, complaint):
    result = gate(gate_extra=gate_extra)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert complaint in result.stdout.str()
    assert "ready in" not in result.stdout.str() and "Traceback" not in result.stdout.str()


def test_server_that_cannot_boot_fails_every_test_with_its_log(gate):
    result = gate(sim_extra="fail_at_startup = true")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "exited with code 1 before" in out and "Initialization failed" in out
    assert "Traceback" not in out


def test_ctrl_c_mid_run_stops_the_server_and_leaves_nothing(pytester, tmp_path):
    import signal
    import subprocess
    import sys
    import time
    import uuid

    from tests.support import processes_with

    marker = f"ctrlc-{uuid.uuid4().hex[:10]}"
    pytester.makepyfile(test_serving=PERF_TESTS)
    profile = pytester.path / "profile.toml"
    # A slow workload (time_scale 1: ~60 ms steps) so the interrupt lands mid-run.
    profile.write_text(
        PROFILE.format(sim_extra="", gate_extra="")
        .replace("time_scale = 0.1", "time_scale = 1.0")
        .replace("startup_timeout_s = 30", f'startup_timeout_s = 30\nmodel_path = "{marker}"')
        .replace("output_len = 16", "output_len = 2000")
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            *GATE_PYTEST_ARGS,
            f"--perf-profile={profile}",
            f"--perf-baselines={tmp_path}",
        ],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker), "the simulator never started"
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-2000:]
    assert "KeyboardInterrupt" in out
    deadline = time.monotonic() + 15
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker) == []


@pytest.mark.long
def test_results_files_and_compare_exit_code(gate, tmp_path, monkeypatch):
    from perfgate.cli import main as perfgate_main

    fast, slow = tmp_path / "fast", tmp_path / "slow"
    gate(f"--perf-results={fast}")
    gate(f"--perf-results={slow}", env={"PERFGATE_SIM_SLOWDOWN": "2.0"})
    (a,) = fast.glob("results-*.json")
    (b,) = slow.glob("results-*.json")
    doc = json.loads(a.read_text())
    wl = doc["workloads"][0]
    assert wl["workload"] == "c16-in32-out16" and len(wl["repeats"]) == 3
    rep = wl["repeats"][0]
    assert len(rep["requests"]) == 32 and rep["requests"][0]["chunk_offsets_s"]
    assert rep["timeline"]["in_flight"] and rep["telemetry"]["window"]["gpus"]
    # The run's other files are in the folder named like its JSON.
    summary = (a.with_suffix("") / "summary.md").read_text()
    assert re.search(
        r"^\| c16-in32-out16 \| output_throughput \| [\d,.]+ tok/s \| - \| - \| - \| no-baseline \|$",
        summary,
        re.MULTILINE,
    )
    # With matplotlib (the plots extra, installed for tests) each workload gets a PNG.
    png = a.with_suffix("") / "c16-in32-out16.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert perfgate_main(["compare", str(a), str(a)]) == 0
    assert perfgate_main(["compare", str(a), str(b)]) == 1
    assert perfgate_main(["compare", str(a), str(tmp_path / "missing.json")]) == 2


def test_repeats_are_pytest_benchmark_rounds(gate, tmp_path):
    out = tmp_path / "bench.json"
    result = gate(f"--benchmark-json={out}")
    result.assert_outcomes(passed=1, skipped=5)
    doc = json.loads(out.read_text())
    (bench,) = doc["benchmarks"]
    assert bench["stats"]["rounds"] == 3
    info = bench["extra_info"]["perfgate"]
    assert info["workload"] == "c16-in32-out16" and info["valid"] is True
    # Every repeat's gated and informative numbers, not only wall time.
    assert len(info["repeats"]) == 3
    assert all(r["output_throughput"] > 0 and r["mean_tpot_ms"] >= 0 and "mean_ttft_ms" in r for r in info["repeats"])
    assert info["medians"]["output_throughput"] == sorted(r["output_throughput"] for r in info["repeats"])[1]
    assert info["verdicts"] == dict.fromkeys(
        ("mean_tpot_ms", "output_throughput", "p99_tpot_ms", "total_throughput"), "no-baseline"
    )
    # pytest-benchmark's own table (wall seconds per repeat) is left out; perfgate's summary is the table.
    out_text = result.stdout.str()
    assert "perfgate summary" in out_text and "benchmark: 1 tests" not in out_text and "Min" not in out_text


def test_confirm_on_fail_reruns_before_failing(gate):
    assert gate("--perf-update-baselines").ret == 0
    slow = gate(gate_extra="confirm_on_fail = true", env={"PERFGATE_SIM_SLOWDOWN": "2.0"})
    slow.assert_outcomes(passed=1, failed=2, skipped=3)
    out = slow.stdout.str()
    # Six measured repeats (3 + 3 to confirm) against 3: complete separation gives p = 1/C(9,3).
    assert "Mann-Whitney p=0.012" in out


@pytest.mark.long
def test_the_summary_says_what_explain_stored_and_what_it_compared_with(gate):
    # The slice is the extra repeat's second wave of 16 requests, 17 steps: slowed down to 3-4 s, so
    # that it outlasts the progress tick (0.5 s) that starts the capture and holds the 2 steps profiled.
    slow, steps = {"PERFGATE_SIM_SLOWDOWN": "30"}, "[explain]\nnum_steps = 2"
    recorded = gate("--perf-update-baselines", "--perf-explain", gate_extra=steps, env=slow)
    recorded.assert_outcomes(passed=3, skipped=3)
    (reference,) = gate.baselines.rglob("explain/*.json")
    line = next(x for x in recorded.outlines if x.startswith(f"explain: {WORKLOAD}: "))
    # Further notes may follow on a loaded host (a load that ended before the capture did).
    assert line.startswith(f"explain: {WORKLOAD}: profiled 2 steps (kernel); stored as the reference profile"), line
    gated = gate("--perf-explain", gate_extra=steps, env=slow)
    gated.assert_outcomes(passed=3, skipped=3)
    compared = f"explain: {WORKLOAD}: compared with the reference profile {reference}"
    assert any(x.startswith(compared) for x in gated.outlines), gated.outlines[-30:]
