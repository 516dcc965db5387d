"""perfgate's file I/O: reading a path a user named, and the one writer of perfgate's files.

Reading never hangs on a path that is not a file. A FIFO named ``x.json`` blocks ``open()``
until a writer appears, forever; a directory or a device named like a profile gives an error
that says nothing useful. Every reader of a path from the user (profile, baselines, results to
compare, ShareGPT dataset) goes through :func:`read_bytes`: the path is opened with
``O_NONBLOCK`` (a FIFO then opens at once) and the open descriptor is checked to be a regular
file, so a file swapped for a FIFO between a check and the open is caught too. Symbolic links
are followed: the user named the path.

Writing is redacted, atomic, and never over another run's file. Every file is written to a
temporary name in its folder, fsynced, and only then given its name: ``exclusive`` files (a
run's results) by a hard link, which fails when the name exists, so two runs never overwrite
each other; shared ones (a baseline) by ``os.replace``. A write that fails leaves nothing
behind: no partial file, no temporary.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from perfgate._redact import SECRETS

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


def append_text(path: Path, text: str) -> None:
    """Append ``text``, redacted, to the regular file ``path`` (created when missing);
    :class:`NotAFileError` for anything else. A FIFO nobody reads would block the open, and a
    full one the write, forever: the open does not wait, and the open file is checked."""
    with contextlib.suppress(FileNotFoundError):
        kind = kind_of(os.stat(path).st_mode)
        if kind is not None:
            raise NotAFileError(path, kind)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotAFileError(path, kind)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "a", encoding="utf-8", closefd=False) as f:
            f.write(SECRETS.text(text))
    finally:
        os.close(fd)


def read_text(path: Path | str) -> str:
    """:func:`read_bytes` decoded as UTF-8 (UnicodeDecodeError when it is not)."""
    return read_bytes(path).decode("utf-8")


def read_named(
    path: Path,
    label: str,
    error: Callable[[str], Exception],
    *,
    not_a_file: str,
    missing: str | None = None,
    unreadable: str = "",
) -> str:
    """The UTF-8 text of the file a user named, or ``error(message)`` with one line that names it:
    ``{label} {path}: {what}; {hint}``: ``missing`` for a path that does not exist (None: the
    FileNotFoundError propagates, for a caller to whom a vanished file is news, not a mistake),
    ``not_a_file`` for a FIFO, directory or device, ``unreadable`` for any other OSError or text
    that is not UTF-8."""
    try:
        return read_text(path)
    except FileNotFoundError:
        if missing is None:
            raise
        raise error(f"{label} {path}: file not found; {missing}") from None
    except NotAFileError as e:
        raise error(f"{label} {path}: {e}; {not_a_file}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise error(f"{label} {path}: cannot be read ({e})" + (f"; {unreadable}" if unreadable else "")) from None


class WriteFailed(OSError):
    """A file could not be written; ``str()`` names it and the cause."""

    def __init__(self, path: Path, cause: BaseException) -> None:
        self.path = path
        self.reason = describe(cause)
        super().__init__(f"{path}: {self.reason}")


def describe(error: BaseException) -> str:
    """An error as a reason: an OSError's own words ("[Errno 27] File too large"), else its type too."""
    text = str(error) or type(error).__name__
    return text if isinstance(error, OSError) else f"{type(error).__name__}: {text}"


def _temporary(path: Path) -> tuple[IO[bytes], Path]:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    return os.fdopen(fd, "wb"), Path(tmp)


def publish_with(path: Path, fill: Callable[[IO[bytes]], None], *, exclusive: bool = True) -> None:
    """Write ``path`` with ``fill`` (given the open temporary file); WriteFailed on any error.

    ``exclusive``: FileExistsError when ``path`` exists (it is not touched).
    """
    tmp: Path | None = None
    try:
        f, tmp = _temporary(path)
        with f:
            # mkstemp creates 0600; results and baselines are read by others.
            os.fchmod(f.fileno(), 0o644)
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    except FileExistsError:
        raise
    except Exception as e:  # a warning turned error by the project's filterwarnings is one too
        raise WriteFailed(path, e) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    # The name is durable only once the directory entry is.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def publish(path: Path, chunks: Iterable[str], *, exclusive: bool = True) -> None:
    """Write the text of ``chunks`` to ``path`` with every known secret redacted (see :func:`publish_with`)."""

    def fill(f: IO[bytes]) -> None:
        for piece in SECRETS.stream(_blocks(chunks)):
            f.write(piece.encode("utf-8"))

    publish_with(path, fill, exclusive=exclusive)


def _blocks(chunks: Iterable[str], size: int = 1 << 16) -> Iterable[str]:
    """``chunks`` joined into blocks of about ``size`` characters (json's encoder yields a piece
    per number: redacting each would cost more than the encoding)."""
    block: list[str] = []
    held = 0
    for chunk in chunks:
        block.append(chunk)
        held += len(chunk)
        if held >= size:
            yield "".join(block)
            block, held = [], 0
    if block:
        yield "".join(block)


@dataclass
class Artefacts:
    """The files a run wrote at its end, one line per file that could not be written, and one
    per file it refused to write (``skipped``: these do not fail the run)."""

    written: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def attempt(self, path: Path, write: Callable[[Path], object], *, not_a_file: str = "") -> Path | None:
        """``write(path)``; a failure (any exception: a full disk, a warning made an error) is
        recorded as one line naming the file and the cause, and None returned. With
        ``not_a_file`` (what to do), a path that is no regular file is a ``skipped`` line instead:
        a file the user named, the run's own evidence being complete without it."""
        try:
            write(path)
        except NotAFileError as e:
            if not not_a_file:
                raise
            self.skipped.append(f"{path}: not written: {e}; {not_a_file}")
            return None
        except WriteFailed as e:
            self.failed.append(f"{e.path}: not written: {e.reason}")
            return None
        except Exception as e:
            self.failed.append(f"{path}: not written: {describe(e)}")
            return None
        self.written.append(path)
        return path


def reserve_dir(folder: Path, stem: str, *, tries: int = 1000) -> Path:
    """Create the first free folder of ``stem``, ``stem-2``, ... in ``folder`` (created): a name
    no other run has, since mkdir fails on an existing one. OSError when none can be made."""
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(1, tries + 1):
        path = folder / (stem if n == 1 else f"{stem}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{folder / stem}: {tries} folders of that name exist already")
