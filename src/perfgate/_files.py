"""Reading a file a user named without hanging on one that is not a file.

A FIFO named ``x.json`` blocks ``open()`` until a writer appears, forever; a directory or a
device named like a profile gives an error that says nothing useful. Every reader of a path
from the user (profile, baselines, results to compare, ShareGPT dataset) goes through
:func:`read_bytes`: the path is opened with ``O_NONBLOCK`` (a FIFO then opens at once) and the
open descriptor is checked to be a regular file, so a file swapped for a FIFO between a check
and the open is caught too. Symbolic links are followed: the user named the path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class NotAFileError(OSError):
    """The path exists but is not a regular file; ``str()`` says what it is."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(errno.EINVAL, f"it is {kind}, not a regular file")
        self.kind = kind
        self.filename = str(path)

    def __str__(self) -> str:
        return str(self.strerror)


def kind_of(mode: int) -> str | None:
    """What a ``st_mode`` is when it is not a regular file, e.g. "a FIFO (named pipe)"; else None."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def read_bytes(path: Path | str) -> bytes:
    """The content of the regular file ``path``; :class:`NotAFileError` for anything else,
    other ``OSError`` as ``open`` raises them (FileNotFoundError, PermissionError, ...)."""
    p = Path(path)
    # Checked before the open too: a socket cannot be opened at all (ENXIO says nothing).
    kind = kind_of(os.stat(p).st_mode)
    if kind is not None:
        raise NotAFileError(p, kind)
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotAFileError(p, kind)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def read_text(path: Path | str) -> str:
    """:func:`read_bytes` decoded as UTF-8 (UnicodeDecodeError when it is not)."""
    return read_bytes(path).decode("utf-8")
