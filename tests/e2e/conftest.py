"""The end-to-end tests' gate runs, timed in the terminal summary: CI's log shows where its minutes go."""

from __future__ import annotations

import pytest

from tests.e2e._support import GATE_RUNS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not GATE_RUNS:
        return
    tr = terminalreporter
    total_s = sum(r.wall_s for r in GATE_RUNS)
    tr.write_sep("=", f"end-to-end gate runs: {len(GATE_RUNS)}, {total_s:,.0f} s")
    for r in GATE_RUNS:
        ready = f"{r.ready_s:6.1f} s" if r.ready_s is not None else "     ?  "
        tr.write_line(f"{r.wall_s:7.1f} s  ready in {ready}  {r.test}  {r.args}"[:200])
