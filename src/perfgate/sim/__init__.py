"""An SGLang-compatible serving simulator, and its performance model in virtual time.

``python -m perfgate.sim --host 127.0.0.1 --port P [--option value ...]`` serves SGLang's
HTTP API (native /generate, OpenAI completions and chat, /metrics, readiness, info) plus
``/dcgm/metrics`` (simulated GPUs in dcgm-exporter's format) and ``/sim/truth`` (server-side
per-request timings). :func:`simulate` runs the same engine without HTTP.
"""

from perfgate.sim._engine import Engine, SimConfig, SimRun, Step, simulate
from perfgate.sim._options import LAUNCHER_SETS, conflicts, option_text, sim_options

__all__ = [
    "LAUNCHER_SETS",
    "Engine",
    "SimConfig",
    "SimRun",
    "Step",
    "conflicts",
    "option_text",
    "sim_options",
    "simulate",
]
