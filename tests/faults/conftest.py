"""The fault matrix's harness: run the gate as a user would and look at everything it left.

``gate`` runs ``pytest`` on perf_tests/ in a subprocess against a fast simulator profile whose
model path is a unique marker, so every process of the run can be found afterwards by its
command line. ``quirky`` starts tests/faults/quirky_server.py with the given quirks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import GATE_PYTEST_ARGS, processes_with

REPO = Path(__file__).resolve().parents[2]
PERF_TESTS = (REPO / "perf_tests" / "test_serving.py").read_text()
QUIRKY = Path(__file__).with_name("quirky_server.py")

PROFILE = """
name = "faults"

[server]
kind = "{kind}"
model_path = "{marker}"
{server}

{sim_table}

[telemetry]
source = "none"

[gate]
repeats = 3
tolerance = {tolerance}
{gate}

{correctness}

[[workload]]
num_prompts = 32
concurrency = 16
input_len = 32
{workload}
"""

# The cases are about the speed gate's failure paths (the probe's are test_correctness_faults.py):
# a fault injected into every request would hit the probe's too.
PROBE_OFF = '[correctness]\nenabled = false\nreason = "the speed gate\'s fault cases"'
# Loose enough that a rerun on a noisy 2-core machine never trips: these cases check the gate's
# failure paths, not a number. Under `pytest -n 4` a record and a rerun of the same server moved
# output throughput by -29 % and mean TPOT by +27 % (CI of 29df80f failed one at 25 %).
LOOSE = "{ output_throughput = 0.6, total_throughput = 0.6, mean_tpot_ms = 2.0, p99_tpot_ms = 3.0 }"


@dataclass
class Outcome:
    ret: int
    out: str

    def shown_once(self, text: str, tests: int = 4) -> None:
        """``text`` is in the output, and the error it belongs to is shown in full by one test:
        the other ``tests - 1`` show one line pointing there, and a server log tail appears once."""
        assert text in self.out, f"{text!r} not in:\n{self.out[-4000:]}"
        pointers = self.out.count("[the full message is under test_serving.py::")
        assert pointers == tests - 1, f"{pointers} short references, expected {tests - 1}:\n{self.out[-4000:]}"
        assert self.out.count("--- end of log ---") <= 1, self.out[-4000:]


class Gate:
    """Runs ``pytest`` on a copy of perf_tests/ in a directory of its own, as a user would.

    A plain subprocess, not pytester: pytester restores ``sys.modules`` after each test, which
    drops modules imported lazily during it (httpcore's backends) while others still refer to
    their classes, and later tests then see exceptions no ``except`` clause matches.
    """

    def __init__(self, tmp_path: Path) -> None:
        # Nested three deep so that a name climbing out of results/ or baselines/ (``../../x``)
        # still lands under ``root``, where ``assert_hygiene`` sees it.
        self.root = tmp_path
        self.path = tmp_path / "a" / "b" / "run"
        self.path.mkdir(parents=True)
        self.marker = f"faults-{uuid.uuid4().hex[:10]}"
        self.baselines = self.path.parent / "baselines"
        self.results = self.path.parent / "results"
        (self.path / "test_serving.py").write_text(PERF_TESTS)
        self._own = {self.path / "test_serving.py"}
        self.outcomes: list[Outcome] = []
        # Secret values a case hands the run; the fixture checks none of them comes out.
        self.secrets: list[str] = []
        # Folders a case points the run at on purpose (a lock directory, say).
        self.allowed: list[Path] = []

    def profile(
        self,
        *,
        server: str = "",
        sim: str = "",
        gate: str = "",
        workload: str = "",
        kind: str = "simulator",
        tolerance: str = LOOSE,
        correctness: str = PROBE_OFF,
    ) -> Path:
        server = _with_defaults(server, "startup_timeout_s = 30", "shutdown_timeout_s = 5")
        sim = _with_defaults(sim, "gpus = 2", "time_scale = 0.1", "startup_delay_s = 0.2")
        workload = _with_defaults(workload, "output_len = 16", "warmup_requests = 2")
        # The client shares 2 busy cores with the server and other tests; only the case about the
        # client's own validity sets its limits.
        gate = _with_defaults(gate, "client_max_lag_p99_ms = 5000")
        sim_table = f"[server.sim]\n{sim}" if kind == "simulator" else ""
        text = PROFILE.format(
            kind=kind,
            marker=self.marker,
            server=server,
            sim_table=sim_table,
            gate=gate,
            workload=workload,
            tolerance=tolerance,
            correctness=correctness,
        )
        return self.write(f"profile-{uuid.uuid4().hex[:6]}.toml", text)

    def write(self, name: str, text: str) -> Path:
        """A file of the case's own (a profile, a key file) in the run directory, which
        ``assert_hygiene`` does not count as written by the run."""
        path = self.path / name
        path.write_text(text)
        self._own.add(path)
        return path

    def argv(self, *args: str, profile: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pytest",
            *GATE_PYTEST_ARGS,
            "-rs",
            f"--rootdir={self.path}",
            f"--perf-profile={profile}",
            f"--perf-baselines={self.baselines}",
            *args,
        ]

    def run(self, *args: str, profile: Path | None = None, env: dict[str, str] | None = None, **parts: str) -> Outcome:
        profile = profile or self.profile(**parts)
        proc = subprocess.run(
            self.argv(*args, profile=profile),
            cwd=self.path,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        outcome = Outcome(proc.returncode, proc.stdout + proc.stderr)
        self.outcomes.append(outcome)
        return outcome

    def baseline_bytes(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.baselines)): p.read_bytes() for p in sorted(self.baselines.rglob("*")) if p.is_file()
        }

    def written(self) -> list[Path]:
        """Every file under the case's root that the case did not write itself."""
        return sorted(
            p
            for p in self.root.rglob("*")
            if (p.is_file() or p.is_fifo()) and p not in self._own and "__pycache__" not in p.parts
        )

    def assert_hygiene(self, outcome: Outcome, secrets: Sequence[str] = ()) -> None:
        """Nothing written outside the results, baselines and log folders, and no secret value in
        any line the run printed or any file it wrote. The ``gate`` fixture checks this after
        every case, for every run and ``secrets``."""
        allowed = (self.results, self.baselines, self.path / ".perfgate-cache", *self.allowed)
        outside = [p for p in self.written() if not any(p.is_relative_to(a) for a in allowed)]
        assert outside == [], f"written outside the results and baselines folders: {outside}"
        for secret in secrets:
            assert secret not in outcome.out, f"secret {secret!r} printed:\n{outcome.out[-4000:]}"
            for path in self.written():
                if path.is_file():
                    assert secret.encode() not in path.read_bytes(), f"secret {secret!r} written to {path}"

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + 15
        while processes_with(self.marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_with(self.marker) == [], "a process of the run is still alive"


def _with_defaults(table: str, *defaults: str) -> str:
    """``table``'s TOML lines plus each default line whose key the case did not set."""
    keys = {line.split("=")[0].strip() for line in table.splitlines() if "=" in line}
    return "\n".join([*(d for d in defaults if d.split("=")[0].strip() not in keys), table])


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    g = Gate(tmp_path)
    yield g
    g.assert_nothing_left()
    for outcome in g.outcomes:
        g.assert_hygiene(outcome, g.secrets)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Quirky:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def quirky() -> Iterator[Callable[..., Quirky]]:
    started: list[Quirky] = []

    def start(*flags: str) -> Quirky:
        port = free_port()
        proc = subprocess.Popen([sys.executable, str(QUIRKY), "--port", str(port), *flags], stdout=subprocess.DEVNULL)
        server = Quirky(proc, port)
        started.append(server)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(server.base_url + "/health", timeout=1).status_code == 200:
                    return server
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError("the quirky server did not start")

    yield start
    for server in started:
        server.proc.kill()
        server.proc.wait(timeout=10)


def quirky_command(*flags: str) -> str:
    """A [server] command that launches the quirky server (kind = "command"); the model path,
    the run's marker, is on its command line so its process can be found."""
    # A few ms per token: a zero-latency server would saturate the client, a finding of its own.
    parts = [
        "{python}",
        str(QUIRKY),
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--model",
        "{model}",
        "--token-delay-s",
        "0.002",
        *flags,
    ]
    return "command = [" + ", ".join(f'"{p}"' for p in parts) + ']\nready_path = "/health"'
