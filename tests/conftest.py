"""perfgate's own suite under pytest-xdist: the gates its tests start are their own runs.

A worker's environment names it (PYTEST_XDIST_WORKER), and a gate started from a worker refuses
to run (README, "Faults and bad input"); the suite's cases start gates on purpose, one per case,
so the worker's name does not reach them.
"""

import os

for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
    os.environ.pop(name, None)
