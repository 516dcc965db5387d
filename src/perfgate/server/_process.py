"""A server process perfgate owns: own process group, log file, bounded readiness, whole-tree teardown.

The server's process group cannot outlive perfgate, even when perfgate is SIGKILLed (by the
OOM killer, a CI runner, ``kill -9``) and no teardown runs: a watchdog process in the group
holds the read end of a pipe whose only writer is perfgate, and when the kernel closes it
(perfgate's death, however it came) kills the whole group, the server's own children
(SGLang's scheduler and detokenizer) included. The leader also gets PR_SET_PDEATHSIG, so it
is killed first even if the watchdog was.

The group stays in perfgate's session. A new session is a new scheduling group on Linux
(autogroup), and the kernel then shares the CPU between the server's busy group and the mostly
idle client's by group weight: with vLLM's CPU engine on 2 cores, a sleeping probe beside the
load waited up to 9.1 s on the run queue (its schedstat), the client's loop lagged 10.6 s and the
run was refused as invalid; in one session, the same load left it waiting 0.0 s (worst lag 0.06 s).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from perfgate.errors import ServerError
from perfgate.server import _signals
from perfgate.server._secrets import Redactor

LOG_TAIL_LINES = 50
EXIT_GRACE_S = 2.0
"""How long a caller whose requests broke waits to see whether the server is exiting."""

# prctl(2): the signal the calling process gets when the thread that forked it exits.
_PR_SET_PDEATHSIG = 1
# The watchdog: blocks on the pipe until perfgate's end closes, then kills its own group. Its
# trailing arguments (the server's command, redacted) only name it in ps.
_WATCHDOG = (
    "import os, signal, sys\n"
    "while os.read(int(sys.argv[1]), 4096):\n"
    "    pass\n"
    "os.killpg(os.getpgrp(), signal.SIGKILL)\n"
)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            return "".join(deque(f, maxlen=lines))
    except OSError:
        return "(no log)"


def tail_block(path: Path) -> str:
    return f"\n--- last {LOG_TAIL_LINES} lines of {path} ---\n{log_tail(path).rstrip()}\n--- end of log ---"


@dataclass
class ServerProcess:
    """A launched server: its process (leader of its own process group) and its log.

    ``argv`` is the command as shown and recorded (secrets redacted), not necessarily as run.
    """

    argv: list[str]
    popen: subprocess.Popen[bytes]
    log_path: Path
    started_s: float
    pids: set[int] = field(default_factory=set)
    # Copies the server's output into the log with secrets redacted (None: it writes the log itself).
    log_pump: threading.Thread | None = None
    # perfgate's end of the watchdog's pipe: closed, the watchdog kills the server's group.
    watchdog_fd: int | None = None
    _released: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def exited(self) -> int | None:
        return self.popen.poll()

    def exit_reason(self, doing: str, grace_s: float = 0.0) -> str | None:
        """One line saying the server died while ``doing`` (its exit and the last error in its log),
        or None while it runs.

        ``grace_s``: how long to wait for an exit that is under way. A dying server's sockets close
        before the kernel reports its exit, so its clients can see "connection error" first.
        """
        try:
            code = self.popen.wait(timeout=grace_s) if grace_s > 0 else self.exited()
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return None
        self.flush_log()
        return f"the server {describe_exit(code, doing, self.log_path)}"

    def exit_error(self, doing: str, grace_s: float = 0.0) -> ServerError | None:
        """:meth:`exit_reason` as a ServerError with the command and the log's tail."""
        reason = self.exit_reason(doing, grace_s)
        if reason is None:
            return None
        return ServerError(f"{reason} (command: {' '.join(self.argv)}){tail_block(self.log_path)}")

    def stop(self, timeout_s: float) -> list[str]:
        """SIGTERM the session, wait up to ``timeout_s``, then SIGKILL it. Returns what had to be forced.

        ``self.pids`` keeps every PID the group had, so the caller can check the GPUs for them.
        """
        # A second Ctrl-C or SIGTERM during teardown would orphan the server: hold them until it is done.
        with _signals.deferred():
            try:
                return self._stop(timeout_s)
            finally:
                if not self._released:
                    self._released = True
                    _signals.release()

    def _stop(self, timeout_s: float) -> list[str]:
        notes: list[str] = []
        pgid = self.popen.pid  # setpgid(0, 0) in _Binding: the leader's pid is the group id
        self.pids = group_members(pgid) | {pgid}
        if self.popen.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                notes.append(f"server pid {pgid} ignored SIGTERM for {timeout_s:g} s; killed its process group")
        # Children may outlive the leader (SGLang schedulers re-parented to init): kill the group regardless.
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
            deadline = time.monotonic() + 10.0
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _group_alive(pgid):
                notes.append(f"processes of group {pgid} survived SIGKILL for 10 s")
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=10)
        if self.watchdog_fd is not None:
            os.close(self.watchdog_fd)
            self.watchdog_fd = None
        self.flush_log()
        return notes

    def flush_log(self) -> None:
        """Wait (briefly) until the log holds everything the server wrote before it exited."""
        if self.log_pump is not None:
            self.log_pump.join(timeout=5.0)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # Zombies of our own group still answer signal 0; reap what we can see.
    return _has_live_member(pgid)


def group_members(pgid: int) -> set[int]:
    """Live (non-zombie) PIDs of process group ``pgid``, from /proc."""
    members: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state is first, pgrp is the third.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != "Z":
            members.add(int(entry.name))
    return members


def _has_live_member(pgid: int) -> bool:
    if not Path("/proc").is_dir():
        return True
    return bool(group_members(pgid))


def launch(
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    cwd: Path | None = None,
    cpus: frozenset[int] = frozenset(),
) -> ServerProcess:
    """Start ``argv`` in its own process group with stdout+stderr appended to ``log_path``; with
    ``cpus``, the group (the server, every process it starts, the watchdog) runs on those CPUs only.

    While the run knows secrets (the process's registry), the output goes through a pipe and every secret is
    replaced before it reaches the log (servers log their arguments, keys included); otherwise
    the server writes the log file directly.
    """
    redactor = Redactor()
    shown = redactor.argv(argv)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # Both ends close on exec (PEP 446): only the watchdog is handed the read end.
    watch_r, watch_w = os.pipe()
    # PDEATHSIG fires when the forking *thread* ends: only the main thread lives as long as perfgate.
    bind = _Binding(watch_r, shown, pdeathsig=threading.current_thread() is threading.main_thread(), cpus=cpus)
    try:
        with log_path.open("ab") as log:
            try:
                popen = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE if redactor.active else log,
                    stderr=subprocess.STDOUT,
                    env=dict(env),
                    cwd=cwd,
                    preexec_fn=bind,
                )
            except (OSError, subprocess.SubprocessError) as e:
                # An error between fork and exec reaches here as "Exception occurred in preexec_fn."
                check = "python / command" + (" / cpu_affinity" if cpus else "")
                raise ServerError(
                    f"cannot start server command {redactor.text(argv[0])!r}: {e} (check [server] {check})"
                ) from None
    except BaseException:
        # No server: the watchdog, if it started, sees the pipe close and exits with its group.
        os.close(watch_w)
        raise
    finally:
        os.close(watch_r)
    _signals.acquire()
    proc = ServerProcess(shown, popen, log_path, time.monotonic(), watchdog_fd=watch_w)
    if popen.stdout is not None:
        proc.log_pump = threading.Thread(
            target=_pump, args=(popen.stdout, log_path, redactor), name=f"server-log-{popen.pid}", daemon=True
        )
        proc.log_pump.start()
    return proc


class _Binding:
    """Runs in the server's process between fork and exec: binds it to perfgate.

    Makes it the leader of a new process group (in perfgate's session: see the module's
    docstring), restricts it to ``cpus`` (when given; every process it starts inherits that),
    forks the watchdog into that group, and sets the leader's PDEATHSIG.
    """

    def __init__(self, watch_r: int, shown: list[str], *, pdeathsig: bool, cpus: frozenset[int] = frozenset()) -> None:
        self.watch_r = watch_r
        self.cpus = cpus
        self.argv = [sys.executable, "-c", _WATCHDOG, str(watch_r), "perfgate-watchdog", *shown]
        self.parent = os.getpid()
        # Loaded before the fork: the child between fork and exec should not open libraries.
        self.prctl = ctypes.CDLL(None, use_errno=True).prctl if pdeathsig and sys.platform == "linux" else None

    def __call__(self) -> None:
        # Not start_new_session: that would also make a new scheduling group. Not process_group=0:
        # Python 3.10 lacks it.
        os.setpgid(0, 0)
        # Before the watchdog's fork and the exec: everything in the group inherits the placement.
        if self.cpus:
            os.sched_setaffinity(0, self.cpus)
        if self.prctl is not None:
            self.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            # perfgate died before prctl took effect: nobody would ever send the signal.
            if os.getppid() != self.parent:
                os._exit(1)
        if os.fork() == 0:
            try:
                os.set_inheritable(self.watch_r, True)
                null = os.open(os.devnull, os.O_RDWR)
                # The server's log pipe stays the server's: the watchdog must not hold it open.
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execv(self.argv[0], self.argv)
            finally:
                os._exit(127)


def _pump(stream: IO[bytes], log_path: Path, redactor: Redactor) -> None:
    fd = stream.fileno()
    with log_path.open("ab", buffering=0) as log:
        for data in redactor.lines(iter(lambda: os.read(fd, 65536), b"")):
            log.write(data)
    stream.close()


_TRACEBACK = "Traceback (most recent call last):"
# How far back a log is searched for the traceback that ended the server.
_ERROR_LINES = 400
# An exception line is quoted up to this length (the log has all of it).
_ERROR_CHARS = 240


def last_error(path: Path) -> str:
    """The exception line of the last Python traceback near the end of the log at ``path``
    (``RuntimeError: ...``), or "" when there is none."""
    lines = log_tail(path, _ERROR_LINES).splitlines()
    start = next((i for i in range(len(lines) - 1, -1, -1) if _TRACEBACK in lines[i]), None)
    if start is None:
        return ""
    # Frames and their source lines are indented; the exception is the first line that is not.
    error = next((line.strip() for line in lines[start + 1 :] if line[:1].strip()), "")
    return error if len(error) <= _ERROR_CHARS else error[: _ERROR_CHARS - 3] + "..."


def describe_exit(code: int, doing: str, log_path: Path) -> str:
    """ "exited with code 1 {doing}", or "was killed by SIGKILL {doing}" for a negative Popen
    return code, with the last error the server's log shows."""
    error = last_error(log_path)
    said = f"; the last error in its log: {error}" if error else ""
    if code >= 0:
        return f"exited with code {code} {doing}{said}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    hint = ""
    if -code == signal.SIGKILL:
        # SGLang SIGKILLs its own process tree when a child fails: then the error, not memory, is why.
        hint = (
            " (a server that kills its own processes when one fails, as SGLang does, ends this way; so does "
            "the kernel's OOM killer: check `dmesg`)"
            if error
            else " (the kernel's OOM killer sends this; check `dmesg`)"
        )
    return f"was killed by {name} {doing}{said}{hint}"
