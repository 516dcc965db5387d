"""Who recorded a baseline, when, where, and with which software."""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import perfgate


def utc_now_iso() -> str:
    """Current UTC time, ISO 8601 to the second, e.g. ``2026-11-29T19:30:00+00:00``."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def current_user() -> str:
    """The login name, or $USER, or "unknown" (containers often lack a passwd entry)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER") or "unknown"


def perfgate_version() -> str:
    return perfgate.__version__


def git_commit(repo_dir: Path | str = ".") -> str | None:
    """HEAD's commit hash in ``repo_dir`` (suffixed "-dirty" when the tree has changes), or None."""
    try:
        head = subprocess.run(
            ["git", "-C", str(repo_dir), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
        if head.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "-C", str(repo_dir), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = head.stdout.strip()
    return f"{commit}-dirty" if status.returncode == 0 and status.stdout.strip() else commit


def provenance(
    versions: Mapping[str, str | None],
    *,
    reason: str | None = None,
    repo_dir: Path | str = ".",
) -> dict[str, Any]:
    """Provenance for a new baseline.

    ``versions`` is what the caller knows about the stack under test (e.g. {"sglang": "0.5.5",
    "flashinfer": "0.5.2", "torch": "2.9.0", "cuda": "12.9"}); this adds perfgate's version,
    the git commit of ``repo_dir``, host, user and the UTC date, plus ``reason`` when given.
    """
    out: dict[str, Any] = {
        "versions": dict(versions),
        "perfgate_version": perfgate_version(),
        "git_commit": git_commit(repo_dir),
        "host": socket.gethostname(),
        "user": current_user(),
        "date": utc_now_iso(),
    }
    if reason:
        out["reason"] = reason
    return out
