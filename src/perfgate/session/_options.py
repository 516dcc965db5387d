"""What a session is asked to do, from the command line or the A/B."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Where the servers' logs go (under the repository root) when no results folder is given.
LOG_DIR = Path(".perfgate-cache") / "logs"


@dataclass(frozen=True)
class SessionOptions:
    baselines_dir: Path
    log_dir: Path
    base_url: str = ""
    update_baselines: bool = False
    accept_regression: str | None = None
    repeats: int | None = None
    # --perf-boots (None: the profile's [gate] boots).
    boots: int | None = None
    lock_wait_s: float = 0.0
    # perfgate ab: the session runs the repeats and nothing else (no baseline read or written,
    # nothing judged, no reruns); the A/B judges pairs of sessions itself.
    measure_only: bool = False
    # --perf-explain: an explain slice after each workload whatever the profile's [explain] says.
    explain: bool = False
