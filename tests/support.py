"""Helpers shared by perfgate's own tests."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perfgate.profile import ServerSpec

# The gate tests a user runs (perf_tests/test_serving.py), for pytester runs of the plugin.
PERF_TESTS = (Path(__file__).resolve().parents[1] / "perf_tests" / "test_serving.py").read_text()

# The first arguments of every gate the suite starts in a pytest subprocess. Hypothesis is in the
# suite's environment, not the gate's: its pytest plugin imports hypothesis in every process it is
# loaded in (0.35 s of CPU), and the suite starts some 400 gates.
GATE_PYTEST_ARGS = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest")


def sim_spec(**sim: object) -> ServerSpec:
    """A fast simulator: tiny time scale, short startup, plus the given [server.sim] options."""
    opts: dict = {"time_scale": 0.01, "startup_delay_s": 0.2, "gpus": 2}
    opts.update(sim)
    return ServerSpec(kind="simulator", sim=opts, startup_timeout_s=30.0, shutdown_timeout_s=5.0)


def processes_with(marker: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose command line contains ``marker``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            pids.append(int(entry.name))
    return pids


@contextmanager
def loopback_http(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[http.server.ThreadingHTTPServer]:
    """A threaded HTTP server on 127.0.0.1 (a free port) answering with ``handler``, stopped after the block."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def workload_baselines(root: Path) -> list[Path]:
    """The workload (and sweep) baseline files under ``root``: not the correctness probe's reference,
    which a simulator profile records beside them."""
    return sorted(p for p in root.rglob("*.json") if not p.name.startswith("correctness--"))


def is_workload_baseline(name: str) -> bool:
    """Whether a baseline file name (relative path) is a workload's, not the correctness probe's."""
    return name.endswith(".json") and not Path(name).name.startswith("correctness--")
