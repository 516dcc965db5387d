"""Teardown waits for the server's own GPU processes only (NVML faked)."""

from __future__ import annotations

from perfgate.server import _gpu_procs


def test_waits_for_our_pids_and_ignores_other_tenants(monkeypatch):
    answers = iter([{"0": [11, 99]}, {"0": [11, 99]}, {"0": [99]}])
    monkeypatch.setattr(_gpu_procs, "gpu_holders", lambda gpus: next(answers))
    monkeypatch.setattr(_gpu_procs.time, "sleep", lambda s: None)
    assert _gpu_procs.wait_released([0], {11, 12}, timeout_s=60) == []


def test_reports_what_is_left_after_the_bound(monkeypatch):
    monkeypatch.setattr(_gpu_procs, "gpu_holders", lambda gpus: {"0": [11]})
    clock = iter([0.0, 0.0, 100.0, 100.0])
    monkeypatch.setattr(_gpu_procs.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(_gpu_procs.time, "sleep", lambda s: None)
    assert _gpu_procs.wait_released([0], {11}, timeout_s=5) == ["GPU 0 still held by pid(s) 11 5 s after teardown"]


def test_no_nvml_means_no_wait(monkeypatch):
    monkeypatch.setattr(_gpu_procs, "gpu_holders", lambda gpus: None)
    assert _gpu_procs.wait_released([0], {11}, timeout_s=5) == []
