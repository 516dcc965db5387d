"""Secrets and artefacts (issue #18): a secret the run knows comes out nowhere, whatever the
server echoes back and in whatever encoding; every results file is written whole or not at
all, under a name no other run has, and a file that cannot be written is one line and a
nonzero exit, never a traceback or a lost summary.

The ``gate`` fixture greps every printed line and every written file for ``gate.secrets``.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import uuid
import xml.etree.ElementTree as ET

import pytest

from perfgate._names import file_stem
from tests.faults.conftest import Gate, Outcome, quirky_command
from tests.support import workload_baselines

FAILED, USAGE = int(pytest.ExitCode.TESTS_FAILED), int(pytest.ExitCode.USAGE_ERROR)
WORKLOAD = "c16-in32-out16"


def _secrets(gate: Gate) -> tuple[str, dict[str, str]]:
    """[server] lines naming an API key, an admin key and secret-looking env values, and the
    environment holding the keys; every value goes into ``gate.secrets``."""
    key, admin = f"sk-live-{uuid.uuid4().hex}", f"adm-{uuid.uuid4().hex}"
    token, password = f"hf_{uuid.uuid4().hex}", f"pw{uuid.uuid4().hex[:12]}"
    gate.secrets += [key, admin, token, password]
    server = (
        'api_key_env = "PG_TRUST_KEY"\nadmin_api_key_env = "PG_TRUST_ADMIN"\n'
        f'env = {{ HF_TOKEN = "{token}", CACHE_URL = "redis://cache:{password}@127.0.0.1:1/0", PLAIN = "1" }}'
    )
    return server, {"PG_TRUST_KEY": key, "PG_TRUST_ADMIN": admin}


def _no_traceback(out: str) -> None:
    assert "Traceback" not in out and "During handling of the above exception" not in out, out[-4000:]


def _results(gate: Gate) -> dict:
    (path,) = gate.results.glob("results-*.json")
    return json.loads(path.read_text())


def _junit_failures(gate: Gate) -> str:
    root = ET.parse(gate.results / "junit.xml").getroot()
    # A workload stopped in a fixture is an error of each test's setup, not a failure.
    return " ".join((f.get("message") or "") + (f.text or "") for tag in ("failure", "error") for f in root.iter(tag))


# -- item 1: redact by value, everywhere ----------------------------------------------------------


@pytest.mark.parametrize("form", ["raw", "url", "base64"])
def test_a_launched_server_quoting_the_key_in_a_401_leaks_it_nowhere(gate: Gate, form: str) -> None:
    server, env = _secrets(gate)
    command = quirky_command("--echo-auth", "401", "--echo-auth", "info", "--echo-form", form)
    outcome = gate.run(
        f"--perf-results={gate.results}",
        f"--junitxml={gate.results / 'junit.xml'}",
        kind="command",
        server=f"{command}\n{server}",
        env=env,
    )
    assert outcome.ret == FAILED, outcome.out[-3000:]
    outcome.shown_once(f"workload {WORKLOAD}: 2 of 2 warmup requests to")
    (line,) = {line for line in outcome.out.splitlines() if line.startswith(f"error: {WORKLOAD}: ")}
    assert 'HTTP 401 from /generate: {"detail": "invalid credentials in header: ' in line and "<redacted>" in line
    _no_traceback(outcome.out)
    # The failure reached every channel, redacted: the JUnit XML, the results, the log copy.
    assert "HTTP 401 from /generate" in _junit_failures(gate)
    doc = _results(gate)
    assert "<redacted>" in doc["server"]["server_info"]["last_request_header"]
    assert doc["server"]["env"] == {"HF_TOKEN": "<redacted>", "CACHE_URL": "<redacted>", "PLAIN": "1"}
    (log,) = gate.results.glob("server-command-*.log")
    assert "request headers: Authorization: " in log.read_text() and "<redacted>" in log.read_text()
    assert gate.baseline_bytes() == {}


def test_an_attached_server_echoing_the_key_mid_run_leaks_it_nowhere(gate: Gate, quirky) -> None:
    server, env = _secrets(gate)
    # A few ms per token, as quirky_command has: a zero-latency server saturates the client.
    target = quirky("--echo-auth", "500", "--echo-auth", "info", "--token-delay-s", "0.002")
    outcome = gate.run(
        f"--perf-results={gate.results}",
        f"--junitxml={gate.results / 'junit.xml'}",
        f"--perf-base-url={target.base_url}",
        "--perf-update-baselines",
        kind="attach",
        server=f'base_url = "{target.base_url}"\n{server}',
        workload="max_error_rate = 0.5",
        env=env,
    )
    # Every 4th request fails with the key in its 500 page: within the allowance, recorded.
    assert outcome.ret == 0, outcome.out[-3000:]
    _no_traceback(outcome.out)
    doc = _results(gate)
    errors = {r["error"] for rep in doc["workloads"][0]["repeats"] for r in rep["requests"] if r["error"]}
    assert errors and all("<redacted>" in e for e in errors), errors
    assert "<redacted>" in doc["server"]["server_info"]["last_request_header"]
    # The baseline records the redacted provenance.
    (baseline,) = workload_baselines(gate.baselines)
    assert (
        "<redacted>" in json.loads(baseline.read_text())["provenance"]["server"]["server_info"]["last_request_header"]
    )


def test_an_ab_candidate_env_secret_leaks_nowhere(gate: Gate) -> None:
    server, env = _secrets(gate)
    candidate = f"cand-{uuid.uuid4().hex}"
    gate.secrets.append(candidate)
    outcome = gate.run(
        f"--perf-results={gate.results}",
        "--perf-ab",
        "--perf-ab-rounds=2",
        f"--perf-candidate-env=CANDIDATE_TOKEN={candidate}",
        kind="command",
        server=f"{quirky_command('--echo-auth', 'info')}\n{server}",
        env=env,
    )
    _no_traceback(outcome.out)
    assert "perfgate ab summary" in outcome.out, outcome.out[-3000:]
    assert "env CANDIDATE_TOKEN" in outcome.out and "<redacted>" in outcome.out
    (path,) = gate.results.glob("ab-*.json")
    assert "<redacted>" in path.read_text()


# -- item 2: URL credentials ------------------------------------------------------------------------


def test_credentials_in_the_base_url_option_are_refused_without_showing_them(gate: Gate) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    gate.secrets.append(password)
    outcome = gate.run(f"--perf-base-url=http://user:{password}@127.0.0.1:9/")
    assert outcome.ret == USAGE, outcome.out[-3000:]
    assert "--perf-base-url: 'http://<redacted>@127.0.0.1:9/' carries credentials (user:password@)" in outcome.out
    assert "[server] api_key_env" in outcome.out
    _no_traceback(outcome.out)


def test_credentials_in_the_profile_base_url_are_refused_without_showing_them(gate: Gate) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    gate.secrets.append(password)
    outcome = gate.run(kind="attach", server=f'base_url = "http://user:{password}@127.0.0.1:9"')
    # Refused as the profile loads, during collection: pytest's "interrupted".
    assert outcome.ret == int(pytest.ExitCode.INTERRUPTED)
    assert (
        "[server] key 'base_url': expected a URL without user:password@ (perfgate records the URL and does not "
        "send them; put the server's API key in an environment variable named by [server] api_key_env), "
        "got 'http://<redacted>@127.0.0.1:9'" in outcome.out
    ), outcome.out[-3000:]
    _no_traceback(outcome.out)


# -- items 6 and 7: results never lost, writing guarded ---------------------------------------------


def _run_limited(gate: Gate, limit_bytes: int, *args: str, **parts: str) -> Outcome:
    """``gate.run`` with the files the run writes limited to ``limit_bytes`` (a full disk, told
    truthfully: writes past it fail with EFBIG; SIGXFSZ is ignored so it is an error, not a kill)."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    proc = subprocess.run(
        gate.argv(*args, profile=gate.profile(**parts)),
        cwd=gate.path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=limit,
    )
    outcome = Outcome(proc.returncode, proc.stdout + proc.stderr)
    gate.outcomes.append(outcome)
    return outcome


def test_a_full_disk_at_the_end_is_one_line_per_file_and_a_nonzero_exit(gate: Gate) -> None:
    outcome = _run_limited(gate, 32_000, f"--perf-results={gate.results}")
    assert outcome.ret == FAILED, outcome.out[-3000:]
    _no_traceback(outcome.out)
    assert "perfgate summary" in outcome.out
    lines = [line for line in outcome.out.splitlines() if line.startswith("results: ")]
    assert any(".json: not written: [Errno 27] File too large" in line for line in lines), outcome.out[-3000:]
    assert f"{WORKLOAD}.png: not written: [Errno 27] File too large" in outcome.out
    assert "file(s) not written; the run exits 1 unless it failed already" in outcome.out
    # Nothing partial: no results JSON, no temporary; the small summary made it.
    written = gate.written()
    assert not [p for p in written if p.suffix in (".json", ".tmp", ".png")], written
    (summary,) = gate.results.glob("results-*/summary.md")
    assert summary.read_text().startswith("## perfgate: faults")


def test_a_step_summary_under_a_file_is_one_line_and_a_nonzero_exit(gate: Gate) -> None:
    # Root writes anywhere a mode allows; a path whose parent is a file fails for root too.
    blocker = gate.write("blocker", "")
    outcome = gate.run(f"--perf-results={gate.results}", env={"GITHUB_STEP_SUMMARY": f"{blocker}/summary.md"})
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert "perfgate summary" in outcome.out
    assert f"results: {blocker}/summary.md: not written: [Errno 20] Not a directory" in outcome.out
    # The run's own files were written all the same.
    assert len(list(gate.results.glob("results-*.json"))) == 1
    _no_traceback(outcome.out)


def test_a_glyph_the_font_lacks_under_warnings_as_errors_still_writes_everything(gate: Gate) -> None:
    outcome = gate.run(f"--perf-results={gate.results}", "-W", "error", workload='name = "c16 \U0001f680 rocket"')
    assert outcome.ret == 0, outcome.out[-3000:]
    _no_traceback(outcome.out)
    (folder,) = [p for p in gate.results.glob("results-*") if p.is_dir()]
    # A non-Latin name's file is its slug and a hash (perfgate._names.file_stem).
    assert (folder / (file_stem("c16 \U0001f680 rocket") + ".png")).read_bytes()[:4] == b"\x89PNG"


def test_two_runs_into_one_folder_keep_both_results(gate: Gate) -> None:
    argv = gate.argv(f"--perf-results={gate.results}", profile=gate.profile())
    procs = [
        subprocess.Popen(argv, cwd=gate.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        gate.outcomes.append(Outcome(proc.returncode, out))
        assert proc.returncode == 0, out[-3000:]
    docs = sorted(gate.results.glob("results-*.json"))
    assert len(docs) == 2, docs
    for path in docs:
        assert (path.parent / path.name.removesuffix(".json") / "summary.md").is_file()
