"""The resident set of this process as the OS counts it (VmRSS from /proc), for the memory benchmarks."""

from __future__ import annotations

import threading
from pathlib import Path


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


class PeakRss:
    """The highest VmRSS seen while the block runs, sampled every 50 ms (VmHWM is process-wide)."""

    def __enter__(self) -> PeakRss:
        self.before_mb = status_kb("VmRSS") / 1024
        self.peak_mb = self.before_mb
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.peak_mb = max(self.peak_mb, status_kb("VmRSS") / 1024)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, status_kb("VmRSS") / 1024)
        self.after_mb = status_kb("VmRSS") / 1024
