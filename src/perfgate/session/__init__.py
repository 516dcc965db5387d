"""Session: one gate run over a profile — boot once, run workloads under telemetry, judge, record."""

from perfgate.session._result import RepeatResult, WorkloadResult, window_json
from perfgate.session._session import GateSession, SessionOptions

__all__ = ["GateSession", "RepeatResult", "SessionOptions", "WorkloadResult", "window_json"]
