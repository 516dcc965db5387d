"""Server: launch the server under test (SGLang, the simulator, any command) or attach to one."""

from perfgate.server._config import ServerConfig, server_config
from perfgate.server._process import ServerProcess, launch, log_tail
from perfgate.server._ready import check_url, wait_ready
from perfgate.server._secrets import Redactor
from perfgate.server._server import RunningServer, build_command, start_server
from perfgate.server._sglang import VERSION_KEYS as SGLANG_VERSION_KEYS
from perfgate.server._signals import Terminated

__all__ = [
    "SGLANG_VERSION_KEYS",
    "Redactor",
    "RunningServer",
    "ServerConfig",
    "ServerProcess",
    "Terminated",
    "build_command",
    "check_url",
    "launch",
    "log_tail",
    "server_config",
    "start_server",
    "wait_ready",
]
