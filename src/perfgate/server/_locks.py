"""Host-level GPU locks: two perfgate sessions never measure on the same GPUs at once.

A GPU is locked by its UUID, so a profile that says ``0`` and one that says ``GPU-8f6c...``
(or the PCI bus id) for the same GPU take the same lock. Without NVML there is no way to
know which names mean one GPU: the lock is then taken on the name as given, and the
holder record says so.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from perfgate._redact import SECRETS
from perfgate.errors import ServerError
from perfgate.gpu import NvmlUnavailable, UnknownGpu, nvml_session, resolve_gpus


def lock_dir() -> Path:
    return Path(os.environ.get("PERFGATE_LOCK_DIR", "/tmp/perfgate-locks"))


@dataclass(frozen=True)
class _LockKey:
    key: str  # the UUID, or the name as given where NVML is absent
    label: str  # what messages call the GPU
    note: str = ""  # why the key is not a UUID


def _keys(gpus: Sequence[int | str]) -> list[_LockKey]:
    try:
        with nvml_session() as nvml:
            resolved = resolve_gpus(nvml, gpus)
    except UnknownGpu as err:
        raise ServerError(str(err)) from None
    except NvmlUnavailable as err:
        names = sorted({str(g) for g in gpus})
        return [
            _LockKey(
                name,
                f"GPU {name}",
                f"locked by the name {name!r} as given, not by UUID ({err}); a session "
                "naming this GPU another way (index, UUID, PCI bus id) takes a different lock",
            )
            for name in names
        ]
    return [_LockKey(g.uuid, g.label) for g in sorted(resolved, key=lambda g: g.uuid)]


def _owner_path(lock_path: Path) -> Path:
    return lock_path.with_suffix(".owner.json")


def _describe_owner(lock_path: Path) -> str:
    try:
        owner = json.loads(_owner_path(lock_path).read_text())
        text = f"pid {owner['pid']} on {owner['host']} ({owner['cmd']}) since {owner['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (no owner record)"
    note = owner.get("note")
    return f"{text}; {note}" if isinstance(note, str) and note else text


def hold_gpus(gpus: Sequence[int | str], stack: ExitStack, wait_s: float) -> None:
    """Lock every GPU in ``gpus`` (in UUID order, so two sessions cannot deadlock) until ``stack`` closes.

    Waits up to ``wait_s`` per GPU, then fails naming who holds it. A GPU NVML does not know
    fails at once, naming the GPUs that exist.
    """
    d = lock_dir()
    d.mkdir(parents=True, exist_ok=True)
    for gpu in _keys(gpus):
        path = d / f"gpu-{gpu.key.replace('/', '_')}.lock"
        lock = FileLock(str(path))
        try:
            lock.acquire(timeout=wait_s)
        except Timeout:
            raise ServerError(
                f"{gpu.label} is held by another perfgate session: {_describe_owner(path)}; "
                f"wait for it to finish or remove {path} if that process is gone"
            ) from None
        stack.callback(lock.release)
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "cmd": SECRETS.clip(" ".join(sys.argv), 200),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "gpu": gpu.label,
            "note": gpu.note,
        }
        _owner_path(path).write_text(json.dumps(owner))
        stack.callback(_owner_path(path).unlink, missing_ok=True)
