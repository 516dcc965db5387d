"""Ask a server to profile a few forward steps (``/start_profile`` of SGLang or vLLM) and wait for its trace files."""

from __future__ import annotations

import shutil
import stat
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from perfgate._redact import SECRETS
from perfgate.explain._trace import still_written

NO_ENDPOINT = "this server offers no profile endpoint"
# A trace file is complete once its size holds for this long (the server may still be writing).
_SETTLED_S = 0.5
_POLL_S = 0.1
_TRACE_SUFFIXES = (".json", ".json.gz")
# How long a capture into a server's folder waits for the files that follow its trace.
_EXTRAS_S = 3.0


@dataclass(frozen=True)
class Capture:
    """What one capture produced: trace files (inside ``output_dir``), or ``note`` saying why none.

    ``started_s``/``ended_s`` are ``time.monotonic()`` around the profiled steps (the client's
    tokens in between are the slice's); ``request_s`` the time ``/start_profile`` took to answer;
    ``capture_s`` from the request to settled trace files.
    """

    output_dir: Path
    traces: tuple[Path, ...]
    note: str
    started_s: float
    ended_s: float
    request_s: float
    capture_s: float = 0.0


def _traces(folder: Path, prefix: str = "", suffixes: tuple[str, ...] = _TRACE_SUFFIXES) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.name.endswith(suffixes) and not p.name.startswith(".") and p.name.startswith(prefix)
    )


def _settled(
    folder: Path, deadline: float, prefix: str = "", suffixes: tuple[str, ...] = _TRACE_SUFFIXES
) -> tuple[list[Path], float]:
    """Trace files of ``folder`` once they stop growing and none is a trace still being written,
    or whatever is there at ``deadline``; and the time.monotonic() the first of them was seen
    (``deadline`` if none). With ``prefix``, only the regular files so named: the folder is the
    server's, and what else is there is not ours (a link or FIFO of perfgate's own folder is kept,
    for the reader to refuse by name)."""
    sizes: dict[Path, int] = {}
    stable_since = time.monotonic()
    first_seen = deadline
    while True:
        now = time.monotonic()
        current = {}
        for p in _traces(folder, prefix, suffixes):
            try:
                st = p.lstat()
            except OSError:
                continue
            if not prefix or stat.S_ISREG(st.st_mode):
                current[p] = st.st_size
        if current and first_seen == deadline:
            first_seen = now
        if current != sizes:
            sizes, stable_since = current, now
        elif sizes and now - stable_since >= _SETTLED_S:
            if not any(p.name.endswith(_TRACE_SUFFIXES) and still_written(p) for p in sizes):
                return sorted(sizes), first_seen
            stable_since = now
        if now >= deadline:
            return sorted(sizes), first_seen
        time.sleep(_POLL_S)


def capture_profile(
    base_url: str,
    output_dir: Path,
    *,
    num_steps: int,
    activities: Sequence[str],
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    server_dir: Path | None = None,
) -> Capture:
    """Profile the server's next ``num_steps`` forward steps into ``output_dir`` (created).

    SGLang is told the folder and answers ``/start_profile`` with ``num_steps`` once the steps
    ran and the trace is written; a server that has not answered within ``timeout_s`` is sent
    ``/stop_profile``. A server that writes where it was started to (``server_dir``: vLLM) is
    asked for ``max_iterations`` under a prefix of this capture's own, answers at once, and
    writes when its workers have stepped; its front end profiles until ``/stop_profile``, which
    follows. Those files are moved into ``output_dir``. Never raises for what the server does:
    a 404/405 is :data:`NO_ENDPOINT`, anything else a note.
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"perfgate-{uuid.uuid4().hex[:12]}"
    body: dict[str, object]
    if server_dir is None:
        body = {
            "output_dir": str(output_dir),
            "num_steps": num_steps,
            "activities": list(activities),
            # Stacks and shapes multiply the trace's size and the profiler's cost; the table needs neither.
            "with_stack": False,
            "record_shapes": False,
            "profile_id": "perfgate",
        }
    else:
        body = {"profile_prefix": prefix, "max_iterations": num_steps}
    started = time.monotonic()
    deadline = started + timeout_s
    note = ""
    with httpx.Client(base_url=base_url, headers=dict(headers or {}), timeout=timeout_s) as client:
        try:
            answer = client.post("/start_profile", json=body)
        except httpx.TimeoutException:
            answer = None
            _stop(client)
        except httpx.HTTPError as e:
            return Capture(output_dir, (), f"/start_profile failed: {e}", started, time.monotonic(), 0.0)
        request_s = time.monotonic() - started
        if answer is not None and answer.status_code in (404, 405):
            hint = (
                "" if server_dir is None else "; vLLM serves it only when started with --profiler-config.profiler torch"
            )
            return Capture(
                output_dir,
                (),
                f"{NO_ENDPOINT} (/start_profile answered {answer.status_code}){hint}",
                started,
                started,
                request_s,
            )
        if answer is not None and answer.status_code != 200:
            text = SECRETS.clip(answer.text.strip().replace("\n", " "), 200)
            return Capture(
                output_dir,
                (),
                f"/start_profile answered {answer.status_code}: {text}",
                started,
                time.monotonic(),
                request_s,
            )
        if server_dir is None:
            ended = time.monotonic()
            traces, _ = _settled(output_dir, max(deadline, time.monotonic() + 2 * _SETTLED_S))
            if not traces:
                _stop(client)
                traces, _ = _settled(output_dir, time.monotonic() + timeout_s / 4)
            where = output_dir
        else:
            # The workers write once they profiled their steps: that moment ends the slice.
            traces, ended = _settled(server_dir, deadline, prefix)
            _stop(client)
            traces, note = _moved(traces, output_dir, "the trace")
            if traces and not note:
                # What else the capture writes after its trace (vLLM: the operator table,
                # `<name>.profiler_out.txt`; the front end's trace on /stop_profile) goes with it.
                extras, _ = _settled(server_dir, time.monotonic() + _EXTRAS_S, prefix, suffixes=("",))
                note = _moved(extras, output_dir, "the capture's file")[1]
            where = server_dir
        if not traces and not note:
            note = (
                f"no trace file appeared in {where} within {timeout_s:g} s of /start_profile "
                "(an attached server on another host writes its traces there, not here)"
            )
    return Capture(output_dir, tuple(traces), note, started, ended, request_s, time.monotonic() - started)


def _moved(files: list[Path], folder: Path, what: str) -> tuple[list[Path], str]:
    """``files`` moved into ``folder`` (the run's): those moved, and why the next one was not."""
    moved: list[Path] = []
    for path in files:
        target = folder / path.name
        try:
            shutil.move(path, target)
        except (OSError, shutil.Error) as e:
            return moved, f"{what} {path} could not be moved into {folder} ({e})"
        moved.append(target)
    return moved, ""


def _stop(client: httpx.Client) -> None:
    """``/stop_profile``, for a server still profiling; its answer changes nothing (the files say)."""
    try:
        client.post("/stop_profile", timeout=10.0)
    except httpx.HTTPError:
        pass
