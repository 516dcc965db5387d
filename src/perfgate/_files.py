"""The one writer of perfgate's files: redacted, atomic, and never over another run's file.

Every file is written to a temporary name in its folder, fsynced, and only then given its
name: ``exclusive`` files (a run's results) by a hard link, which fails when the name exists,
so two runs never overwrite each other; shared ones (a baseline) by ``os.replace``. A write
that fails leaves nothing behind: no partial file, no temporary.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from perfgate._redact import SECRETS


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
    """The files a run wrote at its end, and one line per file that could not be written."""

    written: list[Path] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def attempt(self, path: Path, write: Callable[[Path], object]) -> Path | None:
        """``write(path)``; a failure (any exception: a full disk, a warning made an error) is
        recorded as one line naming the file and the cause, and None returned."""
        try:
            write(path)
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
