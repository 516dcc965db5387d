"""Start the real simulator as a subprocess on 127.0.0.1 and wait for it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
READY_LINE = "The server is fired up and ready to roll!"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Sim:
    proc: subprocess.Popen[str]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_listening(self, timeout_s: float = 20.0) -> None:
        """Poll until the port answers (any status), or fail with the log."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"simulator exited {self.proc.returncode}:\n{self.log()}")
            try:
                httpx.get(self.url + "/v1/models", timeout=1.0)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError(f"simulator did not listen within {timeout_s} s:\n{self.log()}")

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        self.wait_listening(timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if httpx.get(self.url + "/health_generate", timeout=1.0).status_code == 200:
                return
            time.sleep(0.05)
        raise AssertionError(f"simulator not ready within {timeout_s} s:\n{self.log()}")

    def wait_exit(self, timeout_s: float = 20.0) -> int:
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_sim(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Sim:
    """Launch ``python -m perfgate.sim`` like perfgate's launcher does."""
    port = free_port()
    log_path = tmp_path / f"sim-{port}.log"
    full_env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full_env.pop("PERFGATE_SIM_SLOWDOWN", None)
    full_env.pop("PERFGATE_SIM_DISABLE_RADIX_CACHE", None)
    full_env.pop("PERFGATE_SIM_SLOW_KERNEL", None)
    full_env.update(env or {})
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "perfgate.sim", "--host", "127.0.0.1", "--port", str(port), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            text=True,
        )
    return Sim(proc, port, log_path)


@pytest.fixture(scope="session")
def launch_sim(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Sim]:
    """``start_sim`` for module-scoped fixtures: start several, then wait for them together."""
    logs = tmp_path_factory.mktemp("sims")
    return lambda *args, env=None: start_sim(logs, *args, env=env)


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator[object]:
    started: list[Sim] = []

    def factory(*args: str, env: dict[str, str] | None = None, ready: bool = True) -> Sim:
        sim = start_sim(tmp_path, *args, env=env)
        started.append(sim)
        if ready:
            sim.wait_ready()
        return sim

    yield factory
    for sim in started:
        sim.stop()


@pytest.fixture(scope="module")
def fast_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """One shared simulator, steps 100x faster than modelled."""
    sim = start_sim(tmp_path_factory.mktemp("sim"), "--time-scale", "0.01", "--startup-delay-s", "0.1")
    try:
        sim.wait_ready()
        yield sim
    finally:
        sim.stop()
