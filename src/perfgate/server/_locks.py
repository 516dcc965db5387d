"""Host-level GPU locks: two perfgate sessions never measure on the same GPUs at once."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Sequence

from filelock import FileLock, Timeout

from perfgate.errors import ServerError


def lock_dir() -> Path:
    return Path(os.environ.get("PERFGATE_LOCK_DIR", "/tmp/perfgate-locks"))


def _owner_path(lock_path: Path) -> Path:
    return lock_path.with_suffix(".owner.json")


def _describe_owner(lock_path: Path) -> str:
    try:
        owner = json.loads(_owner_path(lock_path).read_text())
        return f"pid {owner['pid']} on {owner['host']} ({owner['cmd']}) since {owner['since']}"
    except (OSError, ValueError, KeyError):
        return "another process (no owner record)"


def hold_gpus(gpus: Sequence[int | str], stack: ExitStack, wait_s: float) -> None:
    """Lock every GPU in ``gpus`` (sorted, so two sessions cannot deadlock) until ``stack`` closes.

    Waits up to ``wait_s`` per GPU, then fails naming who holds it.
    """
    d = lock_dir()
    d.mkdir(parents=True, exist_ok=True)
    for gpu in sorted({str(g) for g in gpus}):
        path = d / f"gpu-{gpu.replace('/', '_')}.lock"
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=wait_s)
        except Timeout:
            raise ServerError(
                f"GPU {gpu} is held by another perfgate session: {_describe_owner(path)}; "
                f"wait for it to finish or remove {path} if that process is gone"
            ) from None
        stack.callback(lock.release)
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "cmd": " ".join(sys.argv)[:200],
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        _owner_path(path).write_text(json.dumps(owner))
        stack.callback(_owner_path(path).unlink, missing_ok=True)
