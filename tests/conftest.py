"""Process-wide setup of perfgate's own suite.

Under pytest-xdist the gates its tests start are their own runs: a worker's environment names it
(PYTEST_XDIST_WORKER), and a gate started from a worker refuses to run (docs/faults.md); the
suite's cases start gates on purpose, one per case, so the worker's name does not reach them.

A suite started in the background by a non-interactive shell (``cmd &``) inherits SIGINT
ignored, and so does every gate it starts: the Ctrl-C cases would then wait forever for a gate
that never sees the signal (a fresh-clone CI run started that way hung in both). Ctrl-C is what
they test, so the suite takes SIGINT back; the gates it starts inherit the default.
"""

import os
import signal

for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
    os.environ.pop(name, None)

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
