"""The port perfgate picks for a server it launches, and a pick another process takes first."""

from __future__ import annotations

import socket
import uuid
from contextlib import ExitStack
from dataclasses import replace

import pytest

import perfgate.server._server as server_mod
from perfgate.errors import ServerError
from perfgate.server import start_server
from perfgate.server._server import _SGLANG_MAX_PORT, _free_port
from tests.support import processes_with, sim_spec


def test_sglang_ports_leave_room_for_the_grpc_port_it_derives():
    # SGLang 0.5.12 refuses --port P when P + 10000 > 65535.
    ports = [_free_port("127.0.0.1", _SGLANG_MAX_PORT) for _ in range(300)]
    assert max(ports) <= _SGLANG_MAX_PORT
    assert len(set(ports)) > 1


@pytest.mark.parametrize(
    ("ephemeral", "spans"), [("32768\t60999\n", [(20000, 32767), (61000, 65535)]), ("21000 65535", [(20000, 20999)])]
)
def test_picked_ports_stay_out_of_the_kernels_ephemeral_range(tmp_path, monkeypatch, ephemeral, spans):
    """Any process's next outgoing connection may get an ephemeral port while the server loads."""
    (tmp_path / "range").write_text(ephemeral)
    monkeypatch.setattr(server_mod, "_PORT_RANGE", tmp_path / "range")
    ports = {_free_port("127.0.0.1") for _ in range(300)}
    assert all(any(a <= p <= b for a, b in spans) for p in ports), sorted(ports)
    assert len(ports) > 1


def test_no_port_outside_the_ephemeral_range_is_an_error_that_says_what_to_set(tmp_path, monkeypatch):
    (tmp_path / "range").write_text("1024 65535")
    monkeypatch.setattr(server_mod, "_PORT_RANGE", tmp_path / "range")
    with pytest.raises(ServerError, match=r"outside the ephemeral range 1024-65535 on 127.0.0.1; set \[server\] port"):
        _free_port("127.0.0.1")


def test_an_unreadable_range_falls_back_to_linuxs_default(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "_PORT_RANGE", tmp_path / "missing")
    assert server_mod._ephemeral_range() == (32768, 60999)


class _Taken:
    """Hands out ports that another process (this test) listens on, then real free ones."""

    def __init__(self, stack: ExitStack, times: int):
        self.held: list[int] = []
        for _ in range(times):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            s.listen()
            self.held.append(s.getsockname()[1])
        self.given: list[int] = []

    def __call__(self, host: str, max_port: int = 65535) -> int:
        port = self.held[len(self.given)] if len(self.given) < len(self.held) else _free_port(host, max_port)
        self.given.append(port)
        return port


def test_a_port_taken_before_the_server_binds_it_is_relaunched_on_another(tmp_path, monkeypatch):
    spec = replace(sim_spec(), model_path=f"ports-{uuid.uuid4().hex[:12]}")
    with ExitStack() as holders:
        taken = _Taken(holders, 2)
        monkeypatch.setattr(server_mod, "_free_port", taken)
        with ExitStack() as stack:
            server = start_server(spec, log_dir=tmp_path, stack=stack)
            assert server.base_url == f"http://127.0.0.1:{taken.given[-1]}"
            assert taken.given[:2] == taken.held and len(taken.given) == 3
            (note,) = [n for n in server.notes if "relaunched" in n]
            assert note.startswith(f"ports {taken.held[0]}, {taken.held[1]} taken by another process")
        # The failed launches' logs stay, each with the server's own words.
        for port in taken.held:
            assert "address already in use" in (tmp_path / f"server-simulator-{port}.log").read_text().lower()
    assert processes_with(spec.model_path) == []


def test_a_port_taken_at_every_try_fails_with_the_servers_complaint(tmp_path, monkeypatch):
    spec = replace(sim_spec(), model_path=f"ports-{uuid.uuid4().hex[:12]}")
    with ExitStack() as holders:
        taken = _Taken(holders, server_mod._BIND_ATTEMPTS)
        monkeypatch.setattr(server_mod, "_free_port", taken)
        with pytest.raises(ServerError, match=r"(?is)exited with code.*address already in use"):
            with ExitStack() as stack:
                start_server(spec, log_dir=tmp_path, stack=stack)
        assert taken.given == taken.held
    assert processes_with(spec.model_path) == []


def test_a_server_that_dies_for_another_reason_is_not_relaunched(tmp_path, monkeypatch):
    given: list[int] = []

    def counting(host: str, max_port: int = 65535) -> int:
        given.append(_free_port(host, max_port))
        return given[-1]

    monkeypatch.setattr(server_mod, "_free_port", counting)
    spec = replace(sim_spec(), args=("--no-such-flag", "1"))
    with pytest.raises(ServerError, match="exited with code 2"), ExitStack() as stack:
        start_server(spec, log_dir=tmp_path, stack=stack)
    assert len(given) == 1
