"""The simulator's /start_profile and /stop_profile, and PERFGATE_SIM_SLOW_KERNEL."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from perfgate.explain import GAP_KEY, read_trace, reduce_trace
from perfgate.sim._kernels import KERNELS, SlowKernel, slow_kernel_from_env
from perfgate.sim._options import parse_options
from tests.sim.conftest import SRC


@contextlib.contextmanager
def busy(url: str) -> Iterator[None]:
    """Clients keeping the simulator stepping while the block runs. They are joined before it
    ends: a request still in flight when the fixture stops the simulator would fail in its
    thread, and pytest reports that as an error of the test's teardown (seen once in CI)."""
    stop = threading.Event()

    def run() -> None:
        with httpx.Client(base_url=url, timeout=30) as c:
            while not stop.is_set():
                c.post("/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}})

    threads = [threading.Thread(target=run, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)


def profile(url: str, out: Path, **body: object) -> httpx.Response:
    return httpx.post(url + "/start_profile", json={"output_dir": str(out), **body}, timeout=30)


def test_num_steps_answers_once_the_trace_is_written(sim_factory, tmp_path: Path) -> None:
    slow = {"PERFGATE_SIM_SLOW_KERNEL": "moe_gemm:3"}
    sim = sim_factory("--time-scale", "0.01", "--startup-delay-s", "0.1", env=slow)
    info = httpx.get(sim.url + "/server_info").json()["perfgate_sim"]
    assert info["options"]["slow_kernel"] == "moe_gemm:3" and info["slowdown"] == pytest.approx(1.72)
    with busy(sim.url):
        answer = profile(sim.url, tmp_path / "p", num_steps=5, profile_id="t1")
    assert answer.status_code == 200 and answer.text == "Start profiling.\n"
    trace = tmp_path / "p" / "t1-TP-0.trace.json.gz"
    events, size = read_trace(trace, root=tmp_path)
    table = reduce_trace(events, steps=5, output_tokens=None, trace_bytes=size)
    # At 1/100 of the model's time the client leaves gaps between steps: the gap row is no kernel.
    top = next(r for r in table.rows if r.key != GAP_KEY)
    assert top.key == "cutlass::fused_moe_gemm" and top.variant == "cutlass, tactic 3"
    assert top.calls == 5 * 4 and {r.calls for r in table.rows} == {20, 5, 0}
    assert sum(table.step_kinds.values()) == 5
    # Durations come from the model, not the clock: moe_gemm's share 3 times over, against attention's.
    attention = next(r for r in table.rows if "BatchDecode" in r.key)
    assert top.total_ms / attention.total_ms == pytest.approx(0.36 * 3 / 0.22, rel=1e-3)


def test_without_num_steps_it_profiles_until_stopped(sim_factory, tmp_path: Path) -> None:
    sim = sim_factory("--time-scale", "0.01", "--startup-delay-s", "0.1")
    assert profile(sim.url, tmp_path / "p", profile_id="t2").status_code == 200
    second = profile(sim.url, tmp_path / "p")
    assert second.status_code == 500 and "already in progress" in second.text
    with busy(sim.url):
        httpx.post(sim.url + "/generate", json={"input_ids": [1], "sampling_params": {"max_new_tokens": 4}})
    assert httpx.post(sim.url + "/stop_profile").status_code == 200
    events, _ = read_trace(tmp_path / "p" / "t2-TP-0.trace.json.gz", root=tmp_path)
    rows = reduce_trace(events, steps=1, output_tokens=None, trace_bytes=0).rows
    assert next(r for r in rows if r.key != GAP_KEY).key == "cutlass::fused_moe_gemm"
    again = httpx.post(sim.url + "/stop_profile")
    assert again.status_code == 500 and "not in progress" in again.text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"output_dir": "relative/dir"}, "output_dir must be an absolute path"),
        ({"output_dir": "/tmp", "num_steps": 0}, "num_steps must be >= 1"),
        ({"output_dir": "/tmp", "profile_id": "../escape"}, "profile_id must be"),
    ],
)
def test_bad_requests_are_400(fast_sim, body: dict[str, object], message: str) -> None:
    answer = httpx.post(fast_sim.url + "/start_profile", json=body)
    assert answer.status_code == 400 and message in answer.json()["error"]["message"]


def test_slow_kernel_env() -> None:
    assert slow_kernel_from_env({}) == SlowKernel()
    assert slow_kernel_from_env({"PERFGATE_SIM_SLOW_KERNEL": "moe_gemm:3"}) == SlowKernel("moe_gemm", 3.0)
    share = next(k.share for k in KERNELS if k.short == "moe_gemm")
    assert SlowKernel("moe_gemm", 3.0).step_factor() == pytest.approx(1 + 2 * share)
    opts = parse_options(["--port", "1"], {"PERFGATE_SIM_SLOW_KERNEL": "moe_gemm:3", "PERFGATE_SIM_SLOWDOWN": "1.5"})
    assert opts.engine_config().slowdown == pytest.approx(1.5 * (1 + 2 * share))
    for bad in ("moe_gemm", "nope:3", "moe_gemm:0", "moe_gemm:inf", "moe_gemm:x"):
        with pytest.raises(ValueError, match="is not NAME:FACTOR"):
            slow_kernel_from_env({"PERFGATE_SIM_SLOW_KERNEL": bad})


def test_invalid_slow_kernel_exits_with_a_clear_message() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "perfgate.sim", "--port", "1"],
        env={"PYTHONPATH": SRC, "PERFGATE_SIM_SLOW_KERNEL": "gemm:3"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "PERFGATE_SIM_SLOW_KERNEL='gemm:3'" in proc.stderr and "moe_gemm" in proc.stderr
