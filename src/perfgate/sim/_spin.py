"""A host-bound engine on purpose (``--spin-process``): a child process, titled like an engine
process, that spins at 100 % of a core while the engine has work, as SGLang's scheduler does on a
host too slow for its GPU. perfgate's host-CPU check must name it.

``python -I .../perfgate/sim/_spin.py FD`` is the child: it blocks on its pipe while idle and polls it
without sleeping (the spin) while busy; the pipe's end (the simulator gone) ends it.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys

TITLE = "sim::scheduler"


class Spinner:
    """The spinning child; :meth:`set_busy` starts and stops its spin."""

    def __init__(self) -> None:
        read_fd, self._write_fd = os.pipe()
        # argv[0] is the title ps and /proc/<pid>/cmdline show (setproctitle's effect, without it). Python
        # finds its venv from argv[0], so under this title it would not find perfgate: the child runs this
        # file (standard library only), isolated (-I: no script folder on sys.path to shadow a module).
        self._child = subprocess.Popen(
            [TITLE, "-I", __file__, str(read_fd)], executable=sys.executable, pass_fds=(read_fd,)
        )
        os.close(read_fd)
        self._busy = False

    def set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            os.write(self._write_fd, b"1" if busy else b"0")

    def close(self) -> None:
        os.close(self._write_fd)
        self._child.wait(timeout=5.0)


def _spin(fd: int) -> None:
    busy = False
    while True:
        if select.select([fd], [], [], 0 if busy else None)[0]:
            data = os.read(fd, 64)
            if not data:
                return
            busy = data.endswith(b"1")


if __name__ == "__main__":
    _spin(int(sys.argv[1]))
