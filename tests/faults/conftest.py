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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import processes_with

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

[[workload]]
num_prompts = 32
concurrency = 16
input_len = 32
{workload}
"""

# Loose enough that a rerun on a noisy 2-core machine never trips.
LOOSE = "{ output_throughput = 0.25, total_throughput = 0.25, mean_tpot_ms = 0.25, p99_tpot_ms = 0.5 }"


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
        self.path = tmp_path / "run"
        self.path.mkdir()
        self.marker = f"faults-{uuid.uuid4().hex[:10]}"
        self.baselines = tmp_path / "baselines"
        self.results = tmp_path / "results"
        (self.path / "test_serving.py").write_text(PERF_TESTS)

    def profile(
        self,
        *,
        server: str = "",
        sim: str = "",
        gate: str = "",
        workload: str = "",
        kind: str = "simulator",
        tolerance: str = LOOSE,
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
        )
        path = self.path / f"profile-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(text)
        return path

    def argv(self, *args: str, profile: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
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
        return Outcome(proc.returncode, proc.stdout + proc.stderr)

    def baseline_bytes(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.baselines)): p.read_bytes() for p in sorted(self.baselines.rglob("*")) if p.is_file()
        }

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
