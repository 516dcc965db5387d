"""Server: launch the server under test (SGLang, the simulator, any command) or attach to one."""

from perfgate.server._process import ServerProcess, launch, log_tail
from perfgate.server._server import RunningServer, build_command, start_server

__all__ = ["RunningServer", "ServerProcess", "build_command", "launch", "log_tail", "start_server"]
