"""_files.read_named: one message per way a user-named file cannot be read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfgate._files import read_named
from perfgate.errors import PerfgateError


def read(path: Path, missing: str | None = "make one") -> str:
    return read_named(path, "thing", PerfgateError, missing=missing, not_a_file="name a file", unreadable="fix it")


def test_each_way_a_file_cannot_be_read_is_named(tmp_path: Path) -> None:
    (tmp_path / "ok.txt").write_text("hello")
    assert read(tmp_path / "ok.txt") == "hello"
    with pytest.raises(PerfgateError, match=r"^thing .*none\.txt: file not found; make one$"):
        read(tmp_path / "none.txt")
    # No missing hint: the caller handles a vanished file itself.
    with pytest.raises(FileNotFoundError):
        read(tmp_path / "none.txt", missing=None)
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)
    with pytest.raises(PerfgateError, match=r"fifo\.txt: it is a FIFO \(named pipe\), not a regular file; name a file"):
        read(fifo)
    with pytest.raises(PerfgateError, match=r": it is a directory, not a regular file; name a file$"):
        read(tmp_path)
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(PerfgateError, match=r"latin1\.txt: cannot be read \(.*utf-8.*\); fix it$"):
        read(tmp_path / "latin1.txt")
