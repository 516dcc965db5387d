"""Server: launch the server under test (SGLang, the simulator, any command) or attach to one."""

from perfgate.server._changes import describe_autotune, stack_changes
from perfgate.server._config import ServerConfig, server_config
from perfgate.server._process import EXIT_GRACE_S, ServerProcess, launch, log_tail
from perfgate.server._ready import check_url, wait_ready
from perfgate.server._secrets import Redactor
from perfgate.server._server import RunningServer, build_command, start_server
from perfgate.server._sglang import VERSION_KEYS as SGLANG_VERSION_KEYS
from perfgate.server._sglang import check_python, locate_sglang, resolve_sglang_root, sglang_versions
from perfgate.server._signals import Terminated

__all__ = [
    "EXIT_GRACE_S",
    "SGLANG_VERSION_KEYS",
    "Redactor",
    "RunningServer",
    "ServerConfig",
    "ServerProcess",
    "Terminated",
    "build_command",
    "check_python",
    "check_url",
    "describe_autotune",
    "launch",
    "locate_sglang",
    "log_tail",
    "resolve_sglang_root",
    "server_config",
    "sglang_versions",
    "stack_changes",
    "start_server",
    "wait_ready",
]
