"""perfgate ab: B's explain slice ranked against A's, or one note saying why there is none."""

from __future__ import annotations

from perfgate.ab._summary import AbRun, AbWorkload
from perfgate.explain import ExplainResult, KernelRow, ProfileTable
from perfgate.session import WorkloadResult


def table(ms: float) -> ProfileTable:
    return ProfileTable("kernel", 1, ms, ms, None, 1, 1, (KernelRow("gemm", "gemm", "", 1, ms, ms, None, 1.0),))


def run(label: str, explain: ExplainResult | None, round_: int = 1) -> AbRun:
    return AbRun(round_, label, WorkloadResult(workload="w", repeats=[], explain=explain))  # type: ignore[arg-type]


def workload(*runs: AbRun) -> AbWorkload:
    return AbWorkload("w", (), runs, None)


def test_b_is_ranked_against_a() -> None:
    w = workload(
        run("A", ExplainResult(table=table(1.0))), run("B", ExplainResult(table=table(2.0))), run("A", None, 2)
    )
    explained = w.explain()
    assert explained is not None and explained.diff is not None
    assert explained.lines()[:2] == [
        "explain: step 1 -> 2 ms (+100 %) over the profiled steps",
        "explain: gemm 1 -> 2 ms/step (+100 %), 100 % of the step",
    ]


def test_no_slice_no_explain_and_a_missing_side_is_a_note() -> None:
    assert workload(run("A", None), run("B", None)).explain() is None
    explained = workload(
        run("A", ExplainResult(note="this server offers no profile endpoint")), run("B", None)
    ).explain()
    assert explained is not None and explained.lines() == ["explain: A: this server offers no profile endpoint"]
