"""Live progress of a running workload, written past pytest's capture.

On a terminal one line is redrawn in place; otherwise (CI logs) a line is written every few
seconds so a 10-minute workload is never silent.
"""

from __future__ import annotations

import time
from contextlib import nullcontext

import pytest

from perfgate.load import Progress

_PLAIN_EVERY_S = 5.0


class ProgressLine:
    def __init__(self, config: pytest.Config, label: str) -> None:
        self._reporter = config.pluginmanager.get_plugin("terminalreporter")
        self._capman = config.pluginmanager.get_plugin("capturemanager")
        self._label = label
        self._tty = bool(self._reporter and self._reporter.isatty())
        self._last_plain = 0.0

    def __call__(self, p: Progress) -> None:
        if self._reporter is None:
            return
        rate = p.output_tokens / p.elapsed_s if p.elapsed_s > 0 else 0.0
        phase = "warmup" if p.warmup else "measure"
        text = (
            f"[perfgate] {self._label} {phase}: {p.done}/{p.total} requests, {rate:,.0f} output tok/s, "
            f"{p.in_flight} in flight, {p.errors} errors, {p.elapsed_s:.0f} s"
        )
        final = p.done == p.total
        if self._tty:
            self._write("\r" + text.ljust(110) + ("\n" if final else ""))
        elif final or time.monotonic() - self._last_plain >= _PLAIN_EVERY_S:
            self._last_plain = time.monotonic()
            self._write(text + "\n")

    def note(self, text: str) -> None:
        """One line of news (an A/B's next boot), past the capture like the progress itself."""
        if self._reporter is not None:
            self._write(
                ("\r" if self._tty else "") + f"[perfgate] {self._label}: {text}".ljust(110 if self._tty else 0) + "\n"
            )

    def _write(self, text: str) -> None:
        reporter = self._reporter
        if reporter is None:
            return
        with self._capman.global_and_fixture_disabled() if self._capman is not None else nullcontext():
            # pytest's line of a test file ("perf_tests/test_serving.py ..") is ended first, so
            # perfgate's lines start on their own; pytest begins a new one for the next result.
            reporter.ensure_newline()
            reporter.write(text, flush=True)
