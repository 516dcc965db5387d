"""Stop the servers perfgate started, however the gate process is asked to end.

Ctrl-C raises KeyboardInterrupt, which unwinds through every teardown. SIGTERM (``timeout``,
CI cancellation, ``kill``) and SIGHUP (a closed terminal) end a Python process at once by
default, and a server in its own process group would keep serving and holding its GPUs.
While perfgate owns at least one server process, both signals unwind exactly like Ctrl-C
(:class:`Terminated` is a KeyboardInterrupt). SIGKILL cannot be caught; nothing can help it.

A teardown must not itself be cut short by a second signal: :func:`deferred` holds SIGINT,
SIGTERM and SIGHUP while a server is being stopped and delivers them afterwards.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_CAUGHT = (signal.SIGTERM, signal.SIGHUP)
_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_lock = threading.Lock()
_owners = 0
_previous: dict[int, Any] = {}


class Terminated(KeyboardInterrupt):
    """The gate process received SIGTERM or SIGHUP; raised where Ctrl-C would raise."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"perfgate received {signal.Signals(signum).name}; stopping the server and exiting")


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def acquire() -> None:
    """A server process now exists: route SIGTERM/SIGHUP through the teardowns (main thread only;
    Python delivers signals to the main thread, so a launch from another thread keeps its default)."""
    global _owners
    with _lock:
        _owners += 1
        if _owners == 1 and _in_main_thread():
            for sig in _CAUGHT:
                _previous[sig] = signal.signal(sig, _raise_terminated)


def release() -> None:
    """That server process is gone; with none left, the previous handlers come back."""
    global _owners
    with _lock:
        _owners = max(0, _owners - 1)
        if _owners == 0 and _previous and _in_main_thread():
            for sig, handler in _previous.items():
                signal.signal(sig, handler)
            _previous.clear()


@contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the duration; re-deliver the first one afterwards."""
    if not _in_main_thread():
        yield
        return
    pending: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    saved = {sig: signal.signal(sig, hold) for sig in _HELD}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if pending:
            signum = pending[0]
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            handler = saved[signal.Signals(signum)]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                raise Terminated(signum)
