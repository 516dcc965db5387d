"""``perfgate ab`` and ``pytest --perf-ab`` end to end: real simulators booted in turn on 127.0.0.1.

The profile's tolerances are wide and the candidate's slowdown large (4x): these cases are
about exit codes, messages, records and cleanup, not sensitivity (benchmarks/detection.py
measures that), so a loaded 2-core machine cannot flip them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from perfgate.cli import main
from tests.support import GATE_PYTEST_ARGS, PERF_TESTS, processes_with, workload_baselines

PROFILE = """
name = "ab-fast"

[server]
kind = "simulator"
model_path = "sim/{marker}"
startup_timeout_s = 30
shutdown_timeout_s = 5

[server.sim]
gpus = 2
time_scale = 0.05
startup_delay_s = 0.1

[telemetry]
source = "dcgm"
dcgm_endpoints = ["{{base_url}}/dcgm/metrics"]
interval_s = 0.05

[gate]
client_max_lag_p99_ms = 5000
tolerance = {{ output_throughput = 0.5, total_throughput = 0.5, mean_tpot_ms = 0.5, p99_tpot_ms = 1.0 }}

[[workload]]
num_prompts = 32
concurrency = 16
input_len = 32
output_len = 16
warmup_requests = 2

[[workload]]
num_prompts = 8
concurrency = 4
input_len = 16
output_len = 8
"""

SLOW = "PERFGATE_SIM_SLOWDOWN=4"


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "ab-fast.toml"
    path.write_text(PROFILE.format(marker=f"ab-e2e-{uuid.uuid4().hex[:12]}"))
    return path


def _marker(profile: Path) -> str:
    """The profile's unique model path: under pytest-xdist, two workers' tmp_path names can be alike."""
    (marker,) = re.findall(r'model_path = "sim/(ab-e2e-[0-9a-f]+)"', profile.read_text())
    return marker


def ab(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``perfgate ab`` in its own process, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_SIM_")}
    return subprocess.run(
        [sys.executable, "-m", "perfgate.cli", "ab", str(profile), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=profile.parent,
        check=False,
    )


def row(out: str, name: str) -> list[str]:
    """The cells after ``name`` in the side-by-side table of the report."""
    (line,) = [x for x in out.splitlines() if re.match(rf"{re.escape(name)}\s{{2,}}", x)]
    return line[len(name) :].split()


def assert_nothing_left(profile: Path) -> None:
    deadline = time.monotonic() + 15
    while processes_with(_marker(profile)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(_marker(profile)) == [], "a server of the A/B is still alive"


@pytest.mark.long
def test_slower_candidate_exits_1_naming_throughput_and_tpot_and_is_not_accepted(profile: Path, tmp_path: Path) -> None:
    results, baselines = tmp_path / "results", tmp_path / "baselines"
    run = ab(
        profile,
        "--candidate-env",
        SLOW,
        "--rounds",
        "5",
        "-k",
        "c16",
        "--results",
        str(results),
        "--accept-candidate",
        "--baselines",
        str(baselines),
    )
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert "Traceback" not in run.stderr
    # Ten boots in ABBA order, only the selected workload.
    booted = [line.split()[2:4] for line in out.splitlines() if line.endswith("booting")]
    assert booted == [
        ["1/5", "A"],
        ["1/5", "B"],
        ["2/5", "B"],
        ["2/5", "A"],
        ["3/5", "A"],
        ["3/5", "B"],
        ["4/5", "B"],
        ["4/5", "A"],
        ["5/5", "A"],
        ["5/5", "B"],
    ]
    assert "c4-in16-out8" not in out
    for metric in ("mean_tpot_ms", "output_throughput", "p99_tpot_ms", "total_throughput"):
        (line,) = [x for x in out.splitlines() if x.startswith(f"FAIL         c16-in32-out16: {metric} B/A")]
        assert "B worse in 5 of 5 rounds; sign test p=0.031" in line
        assert f"c16-in32-out16 {metric}, per round (FAIL):" in out
    assert row(out, "env PERFGATE_SIM_SLOWDOWN") == ["(unset)", "4", "differs"]
    assert "fingerprint c16-in32-out16: same for A and B" in out
    assert (
        "baseline c16-in32-out16: not recorded: B did not pass the A/B (FAIL: mean_tpot_ms, output_throughput, "
        'p99_tpot_ms, total_throughput); --reason "why" records it anyway' in out
    )
    assert out.rstrip().splitlines()[-4] == "REGRESSION: B is worse than A"
    assert not baselines.exists() or not list(baselines.rglob("*.json"))
    (doc_path,) = results.glob("ab-ab-fast-*.json")
    doc = json.loads(doc_path.read_text())
    assert doc["outcome"] == "regression" and [tuple(x) for x in doc["order"]][:4] == [
        (1, "A"),
        (1, "B"),
        (2, "B"),
        (2, "A"),
    ]
    (wl,) = doc["workloads"]
    assert [r["order"] for r in wl["rounds"]] == ["AB", "BA", "AB", "BA", "AB"]
    assert (
        wl["rounds"][0]["B"]["repeat"]["values"]["mean_tpot_ms"]
        > wl["rounds"][0]["A"]["repeat"]["values"]["mean_tpot_ms"]
    )
    assert len(wl["rounds"][0]["A"]["repeat"]["requests"]) == 32
    assert (doc_path.with_suffix("") / "ab-c16-in32-out16.png").stat().st_size > 10_000
    assert (doc_path.with_suffix("") / "summary.md").read_text().startswith("## perfgate ab: ab-fast")
    assert len(list(results.glob("server-simulator-*.log"))) == 10
    assert_nothing_left(profile)


def test_candidate_python_passes_and_is_accepted_with_the_ab_as_evidence(profile: Path, tmp_path: Path) -> None:
    """B runs under another interpreter (a wrapper that makes the simulator report another
    version): the report names both versions, B passes, and its runs become the baseline."""
    wrapper = tmp_path / "venv-b" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexport PERFGATE_SIM_VERSION=0.5.99+candidate\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    baselines = tmp_path / "baselines"
    run = ab(
        profile,
        "--candidate-python",
        str(wrapper),
        "--rounds",
        "2",
        "-k",
        "c16",
        "--accept-candidate",
        "--baselines",
        str(baselines),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert row(out, "python") == [sys.executable, str(wrapper), "differs"]
    assert row(out, "server") == ["0.5.23+perfgate-sim", "0.5.99+candidate", "differs"]
    assert row(out, "driver") == ["580.95.05", "580.95.05"]
    assert "note: 2 paired round(s) are too few for the sign test at alpha 0.05: the tolerance alone decided" in out
    assert out.rstrip().endswith("PASS: B is not worse than A beyond any tolerance")
    (path,) = workload_baselines(baselines)
    assert f"baseline c16-in32-out16: recorded -> {path}" in out
    doc = json.loads(path.read_text())
    assert len(doc["repeats"]) == 2
    prov = doc["provenance"]
    assert prov["server"]["versions"]["server"] == "0.5.99+candidate"
    assert prov["server"]["launch_command"][0] == str(wrapper)
    evidence = prov["ab"]
    assert (evidence["verdict"], evidence["rounds"], evidence["order"]) == ("pass", 2, "AB BA")
    assert evidence["variants"]["A"]["versions"]["server"] == "0.5.23+perfgate-sim"
    assert evidence["variants"]["B"]["python"] == str(wrapper)
    assert evidence["metrics"]["output_throughput"]["status"] == "pass"
    assert len(evidence["metrics"]["output_throughput"]["ratios"]) == 2
    assert "reason" not in prov
    assert_nothing_left(profile)


def test_candidate_that_fails_to_boot_stops_the_ab_with_exit_2(profile: Path) -> None:
    run = ab(profile, "--candidate-args=--fail-at-startup", "--rounds", "4")
    assert run.returncode == 2, run.stdout + run.stderr
    out = run.stdout
    assert [line for line in out.splitlines() if line.endswith("booting")] == [
        "[ab] round 1/4 A (current): booting",
        "[ab] round 1/4 B (candidate): booting",
    ]
    assert "server args that differ: A (none) | B --fail-at-startup=true" in out
    (problem,) = [
        x
        for x in out.splitlines()
        if x.startswith("problem: stopped: round 1, B (candidate), workload c16-in32-out16: ")
    ]
    assert "exited with code 1 before" in problem
    assert out.rstrip().endswith("ERROR: the A/B could not decide")
    assert_nothing_left(profile)


def test_sigterm_mid_ab_stops_the_server_and_exits_143(profile: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_SIM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfgate.cli", "ab", str(profile), "--candidate-env", SLOW, "--rounds", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=profile.parent,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("[ab] round 1/4 B (candidate): booting"):
            break
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.strip().splitlines()[-1] == "perfgate: perfgate received SIGTERM; stopping the server and exiting"
    assert "Traceback" not in err
    assert_nothing_left(profile)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--candidate-python", "/nonexistent/python"],
            "perfgate: --candidate-python /nonexistent/python: no such interpreter",
        ),
        (["--candidate-env", SLOW, "-k", "c2048"], "perfgate: -k 'c2048' selects no workload of profile"),
        (["--candidate-env", SLOW, "-k", "c16 and"], "perfgate: -k 'c16 and': not a keyword expression"),
        ([], "perfgate: no candidate: give what B changes with --candidate-python PY"),
        (["--candidate-env", "SLOW"], "perfgate: --candidate-env 'SLOW': expected NAME=VALUE"),
        (["--candidate-env", SLOW, "--reason", "x"], "perfgate: --reason only applies with --accept-candidate"),
        (["--candidate-env", SLOW, "--max-rounds", "2"], "perfgate: --max-rounds 2: expected at least --rounds (6)"),
    ],
)
def test_bad_input_exits_2_with_one_line_before_anything_boots(
    profile: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["ab", str(profile), *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(message) and captured.err.count("\n") == 1, captured.err
    assert captured.out == ""


def test_missing_profile_and_bad_numbers(tmp_path: Path, profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ab", str(tmp_path / "nope.toml"), "--candidate-env", SLOW]) == 2
    assert (
        capsys.readouterr().err
        == f"perfgate: profile {tmp_path / 'nope.toml'}: file not found; pass a profile TOML file (see profiles/)\n"
    )
    with pytest.raises(SystemExit) as e:
        main(["ab", str(profile), "--rounds", "0"])
    assert e.value.code == 2
    assert "argument --rounds: expected an integer >= 1, got '0'" in capsys.readouterr().err


pytest_plugins = ["pytester"]


@pytest.mark.long
def test_pytest_perf_ab_reports_the_ab_in_the_four_gate_tests(pytester: pytest.Pytester, profile: Path) -> None:
    pytester.makepyfile(test_serving=PERF_TESTS)
    for k in [k for k in os.environ if k.startswith("PERFGATE_SIM_")]:
        pytester._monkeypatch.delenv(k)
    baselines = pytester.path / "baselines"
    result = pytester.runpytest_subprocess(
        *GATE_PYTEST_ARGS,
        f"--perf-profile={profile}",
        "-k",
        "c16",
        "--perf-ab",
        f"--perf-candidate-env={SLOW}",
        "--perf-ab-rounds=2",
        "--perf-accept-candidate",
        f"--perf-baselines={baselines}",
        timeout=300,
    )
    # Throughput and latency fail on their verdicts; validity on the candidate that was asked to be
    # accepted and was not (it did not pass).
    result.assert_outcomes(failed=3, skipped=1, deselected=6)
    out = result.stdout.str()
    assert "c16-in32-out16: output_throughput B/A" in out and "c16-in32-out16: mean_tpot_ms B/A" in out
    assert "baseline: not recorded: B did not pass the A/B (FAIL: " in out
    assert not baselines.exists() or not list(baselines.rglob("*.json"))
    assert "perfgate ab summary" in out and "REGRESSION: B is worse than A" in out
    assert "c4-in16-out8" not in out.split("perfgate ab summary")[1]
    assert_nothing_left(profile)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--perf-candidate-env=X=1"], "--perf-candidate-env only applies with --perf-ab"),
        (
            ["--perf-ab", "--perf-candidate-env=X=1", "--perf-update-baselines"],
            "--perf-update-baselines does not apply with --perf-ab",
        ),
        (
            ["--perf-ab", "--perf-candidate-env=X=1", "--perf-ab-rounds=0"],
            "argument --perf-ab-rounds: expected an integer >= 1, got '0'",
        ),
        (["--perf-ab", "--perf-candidate-env=NOEQ"], "--perf-candidate-env 'NOEQ': expected NAME=VALUE"),
        (["--perf-ab", "--perf-accept-regression=x"], "--perf-accept-regression only applies when recording"),
    ],
)
def test_pytest_perf_ab_usage_errors(pytester: pytest.Pytester, profile: Path, args: list[str], message: str) -> None:
    pytester.makepyfile(test_serving=PERF_TESTS)
    result = pytester.runpytest_subprocess(*GATE_PYTEST_ARGS, f"--perf-profile={profile}", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_pytest_perf_ab_with_a_bad_candidate_stops_at_collection(pytester: pytest.Pytester, profile: Path) -> None:
    pytester.makepyfile(test_serving=PERF_TESTS)
    result = pytester.runpytest_subprocess(
        *GATE_PYTEST_ARGS, f"--perf-profile={profile}", "--perf-ab", "--perf-candidate-python=/no/python"
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "perfgate: --perf-candidate-python /no/python: no such interpreter" in result.stdout.str()
    assert "booting" not in result.stdout.str()


def test_a_candidate_that_dies_in_the_probe_is_named_as_the_cause(profile: Path) -> None:
    # The simulator counts the probe's requests: the candidate's third kills it during the probe.
    run = ab(profile, "--candidate-args=--crash-after-requests=3", "--rounds", "2")
    assert run.returncode == 2, run.stdout + run.stderr
    assert re.search(
        r"B \(candidate\): correctness probe: /generate for prompt \d+ failed: .*; the server exited with code 1 "
        r"during the correctness probe",
        run.stdout,
    ), run.stdout[-3000:]
    assert_nothing_left(profile)
