"""The results writer: names no other run has, files whole or absent, secrets never written."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfgate._files import Artefacts, WriteFailed, publish, reserve_dir
from perfgate._redact import SECRETS
from perfgate.report import write_results
from tests.report.test_results import _summary


def _leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def test_two_runs_in_the_same_instant_keep_both_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The clock frozen: two runs in the same microsecond, the worst case of "the same second".
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.25)
    first = write_results(_summary(3), tmp_path)
    second = write_results(_summary(4), tmp_path)
    assert first.failed == second.failed == []
    docs = sorted(tmp_path.glob("results-*.json"))
    assert [p.name for p in docs] == [
        "results-p-20270115T080000.250000Z-2.json",
        "results-p-20270115T080000.250000Z.json",
    ]
    assert sorted(len(json.loads(p.read_text())["workloads"][0]["repeats"][0]["requests"]) for p in docs) == [3, 4]
    for doc in docs:
        assert (tmp_path / doc.name.removesuffix(".json") / "summary.md").read_text().startswith("## perfgate: p")


def test_a_file_of_the_name_is_never_overwritten(tmp_path: Path) -> None:
    theirs = tmp_path / "results.json"
    theirs.write_text("another run's")
    with pytest.raises(FileExistsError):
        publish(theirs, ["mine"])
    assert theirs.read_text() == "another run's" and _leftovers(tmp_path) == []
    (tmp_path / "run").mkdir()
    assert reserve_dir(tmp_path, "run") == tmp_path / "run-2"


def test_a_write_that_fails_midway_leaves_nothing(tmp_path: Path) -> None:
    def pieces() -> Iterator[str]:
        yield "x" * 100_000
        raise OSError(28, "No space left on device")

    with pytest.raises(WriteFailed, match=r"out\.json: \[Errno 28\] No space left on device"):
        publish(tmp_path / "out.json", pieces())
    assert list(tmp_path.iterdir()) == []


def test_a_failure_is_one_line_and_the_other_files_are_still_written(tmp_path: Path) -> None:
    out = Artefacts()
    out.attempt(tmp_path / "a.md", lambda p: publish(p, ["a"]))
    out.attempt(tmp_path / "b.png", lambda p: (_ for _ in ()).throw(UserWarning("Glyph 128640 missing from font")))
    out.attempt(tmp_path / "c.md", lambda p: publish(p, ["c"]))
    assert out.written == [tmp_path / "a.md", tmp_path / "c.md"]
    assert out.failed == [f"{tmp_path / 'b.png'}: not written: UserWarning: Glyph 128640 missing from font"]


def test_a_results_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = write_results(_summary(2), blocker / "results")
    assert out.written == [] and len(out.failed) == 1
    assert (
        out.failed[0].startswith(f"{blocker}/results/results-p-")
        and "not created: [Errno 20] Not a directory" in (out.failed[0])
    )


def test_a_secret_cut_across_pieces_is_not_written(tmp_path: Path) -> None:
    secret = f"sk-{uuid.uuid4().hex}"
    SECRETS.add(secret)
    pieces = ["a" * 70_000 + secret[:5], secret[5:] + "b", secret]
    publish(tmp_path / "f.json", pieces)
    text = (tmp_path / "f.json").read_text()
    assert (
        secret not in text and text.count("<redacted>") == 2 and oct(os.stat(tmp_path / "f.json").st_mode)[-3:] == "644"
    )


def _written_in_time(summary: Path, results: Path) -> Artefacts:
    """write_results with ``summary`` as the step summary, in a thread that must end within 20 s."""
    done: list[Artefacts] = []
    worker = threading.Thread(
        target=lambda: done.append(write_results(_summary(2), results, step_summary=str(summary)))
    )
    worker.start()
    worker.join(20)
    if worker.is_alive():
        # Blocked on the FIFO (the old code): a reader lets it go, and the case fails.
        os.close(os.open(summary, os.O_RDONLY | os.O_NONBLOCK))
        worker.join(20)
        pytest.fail(f"writing the step summary to {summary} blocked")
    return done[0]


def test_a_step_summary_that_is_a_fifo_is_one_line_and_no_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "summary-fifo"
    os.mkfifo(fifo)
    out = _written_in_time(fifo, tmp_path / "results")
    assert out.skipped == [
        f"{fifo}: not written: it is a FIFO (named pipe), not a regular file; GITHUB_STEP_SUMMARY must name a "
        "regular file; the summary is in summary.md"
    ]
    # Not a failure: the run's own files are all there, and its exit code is its verdict's.
    assert out.failed == [] and out.written and fifo not in out.written


def test_a_step_summary_file_is_appended_to(tmp_path: Path) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    out = _written_in_time(summary, tmp_path / "results")
    assert out.skipped == out.failed == [] and summary in out.written
    assert summary.read_text().startswith("earlier step\n## perfgate: p")
