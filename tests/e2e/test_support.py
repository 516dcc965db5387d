"""The e2e tests' own helpers, on the simulator (they run in the unit step)."""

from __future__ import annotations

import sys
import uuid
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from perfgate.errors import ServerError
from perfgate.profile import ServerSpec
from tests.e2e._support import start_servers
from tests.support import processes_with, sim_spec


def test_servers_booted_at_once_all_answer_and_go_with_the_stack(tmp_path: Path) -> None:
    marker = f"e2e-support-{uuid.uuid4().hex[:10]}"
    specs = {name: replace(sim_spec(), model_path=f"{marker}-{name}") for name in ("a", "b")}
    with ExitStack() as stack:
        servers = start_servers(specs, tmp_path, stack)
        assert sorted(servers) == ["a", "b"] and servers["a"].base_url != servers["b"].base_url
        for name, server in servers.items():
            assert httpx.get(server.base_url + "/health_generate").status_code == 200
            assert server.model == f"{marker}-{name}" and (tmp_path / name).is_dir()
    assert processes_with(marker) == []


def test_a_boot_that_fails_is_raised_and_the_one_that_stood_is_torn_down(tmp_path: Path) -> None:
    marker = f"e2e-support-{uuid.uuid4().hex[:10]}"
    dies = ServerSpec(
        kind="command", command=(sys.executable, "-c", "raise SystemExit(3)", "{port}"), startup_timeout_s=20
    )
    specs = {"good": replace(sim_spec(), model_path=marker), "dies": dies}
    with pytest.raises(ServerError, match="exited with code 3"), ExitStack() as stack:
        start_servers(specs, tmp_path, stack)
    (log,) = (tmp_path / "good").glob("*.log")
    assert "fired up and ready to roll" in log.read_text()
    assert processes_with(marker) == []
