"""Teardown waits for the server's own GPU processes only (NVML faked)."""

from __future__ import annotations

import sys

from perfgate.server import _gpu_procs
from tests.fake_nvml import make, uuids


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


def test_holders_are_read_by_uuid_and_keyed_as_given(monkeypatch):
    _, nv = make(2)
    nv.gpus[0].pids = [99, 11]
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    assert _gpu_procs.gpu_holders(["0", uuids(2)[1], "00000000:18:00.0"]) == {
        "0": [11, 99],
        uuids(2)[1]: [],
        "00000000:18:00.0": [11, 99],
    }
    # An unknown GPU, or no NVML: cannot tell (the lock refuses an unknown GPU with its own message).
    assert _gpu_procs.gpu_holders([0, 5]) is None
    assert nv.initialised == 0
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert _gpu_procs.gpu_holders([0]) is None
