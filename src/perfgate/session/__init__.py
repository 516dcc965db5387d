"""Session: one gate run over a profile — boot once, run workloads under telemetry, judge, record."""

from perfgate.session._options import LOG_DIR, SessionOptions
from perfgate.session._record import record_baseline
from perfgate.session._result import RepeatResult, SweepPoint, SweepResult, WorkloadResult, window_json
from perfgate.session._session import Session
from perfgate.session._summary import RunSummary, ServerSummary

__all__ = [
    "LOG_DIR",
    "RepeatResult",
    "RunSummary",
    "ServerSummary",
    "Session",
    "SessionOptions",
    "SweepPoint",
    "SweepResult",
    "WorkloadResult",
    "record_baseline",
    "window_json",
]
