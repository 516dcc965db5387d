"""Serving performance of every workload in the profile, held to the stored baselines.

Each workload runs once per session (its repeats included); these tests read the shared
result, so a failure names exactly which guarantee broke.
"""

from perfgate.plugin import CapacityChecks, CorrectnessChecks, GateChecks


def test_correctness(perf_correctness: CorrectnessChecks) -> None:
    """The server still computes the same model: greedy answers and teacher-forced logprobs of a
    fixed prompt set agree with the recorded reference, and no answer is degenerate."""
    perf_correctness.assert_correct()


def test_run_is_valid(perf_gate: GateChecks) -> None:
    """No failed requests beyond the profile's allowance, and the client was not the bottleneck."""
    perf_gate.assert_valid()


def test_throughput(perf_gate: GateChecks) -> None:
    """Output and total throughput (and any other higher-is-better metric) from below."""
    perf_gate.assert_metrics("throughput")


def test_latency(perf_gate: GateChecks) -> None:
    """Mean and p99 TPOT (and any other latency the profile gates) from above."""
    perf_gate.assert_metrics("latency")


def test_gpu_power(perf_gate: GateChecks) -> None:
    """Per-GPU power floors, imbalance and tokens per joule, when the profile gates them."""
    perf_gate.assert_metrics("power")


def test_capacity(perf_capacity: CapacityChecks) -> None:
    """A sweep's capacity (the highest load within the SLO) from below, for every sweep of the profile."""
    perf_capacity.assert_capacity()
