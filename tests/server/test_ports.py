"""The port perfgate picks for a server it launches."""

from __future__ import annotations

from perfgate.server._server import _SGLANG_MAX_PORT, _free_port


def test_sglang_ports_leave_room_for_the_grpc_port_it_derives():
    # SGLang 0.5.12 refuses --port P when P + 10000 > 65535; the kernel's ephemeral range reaches 60999.
    ports = [_free_port("127.0.0.1", _SGLANG_MAX_PORT) for _ in range(300)]
    assert max(ports) <= _SGLANG_MAX_PORT
    assert len(set(ports)) > 1
