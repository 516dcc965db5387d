"""pytest-benchmark integration: each workload's repeats are benchmark rounds whose saved record
carries perfgate's numbers, and its own timing table (wall seconds per repeat) stays out of the
terminal, where perfgate's summary says what was measured."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest

from perfgate.catalogue import SHOWN
from perfgate.session import WorkloadResult

EXTRA_KEY = "perfgate"


def benchmark_rounds(benchmark: Any, first_run: bool) -> Callable[[Callable[[], None], int], None] | None:
    """Run the repeats as pytest-benchmark rounds, so its JSON storage and ``compare`` see each
    repeat; None (plain loop) when benchmarking is off or the workload already ran."""
    if not first_run or benchmark is None or not getattr(benchmark, "enabled", False):
        return None

    def rounds(one_repeat: Callable[[], None], n: int) -> None:
        benchmark.pedantic(one_repeat, rounds=n, iterations=1, warmup_rounds=0)

    return rounds


def record(benchmark: Any, result: WorkloadResult) -> None:
    """Put the workload's numbers into the benchmark's ``extra_info`` under "perfgate": every
    repeat's gated and informative metrics, their medians and the verdict of each gated metric,
    so ``--benchmark-json``, ``--benchmark-autosave`` and ``pytest-benchmark compare`` hold them."""
    gated = [v.metric for v in result.verdict.metrics] if result.verdict else []
    names = list(dict.fromkeys([*gated, *SHOWN]))
    repeats = [{m: r[m] for m in names if m in r} for r in result.repeat_metrics()]
    benchmark.extra_info[EXTRA_KEY] = {
        "workload": result.workload,
        "rounds_are": "measured repeats of the workload (a round's time is its wall time)",
        "repeats": repeats,
        "medians": result.verdict_medians(),
        "verdicts": {v.metric: v.status for v in result.verdict.metrics} if result.verdict else {},
        "valid": result.valid,
    }


class BenchmarkHooks:
    """Registered only when pytest-benchmark is active (its hook specs exist only then)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_benchmark_group_stats(
        self, config: pytest.Config, benchmarks: list[Any], group_by: str
    ) -> Generator[None, Any, None]:
        outcome = yield
        groups = [
            (name, [b for b in members if EXTRA_KEY not in (b.get("extra_info") or {})])
            for name, members in outcome.get_result()
        ]
        outcome.force_result([(name, members) for name, members in groups if members])
