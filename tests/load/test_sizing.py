"""How many client processes, and the host's limits: open files and ephemeral ports."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.errors import LoadError
from perfgate.load import _sizing, run_workload
from perfgate.load._backends import SGLangBackend
from perfgate.load._plan import LoadPlan
from perfgate.load._selfcheck import ClientLimits
from perfgate.load._sizing import WarmupCost, size_client
from perfgate.profile import Workload
from perfgate.server import start_server
from tests.support import sim_spec

W = Workload(
    name="w", num_prompts=64, concurrency=64, input_len=8, output_len=16, warmup_requests=4, client_processes="auto"
)
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _plan(workload: Workload) -> LoadPlan:
    return LoadPlan(
        base_url="http://127.0.0.1:9",
        workload=workload,
        backend=SGLangBackend("", True, {}),
        headers={},
        limits=ClientLimits(),
        seed_offset=0,
        keep_alive=True,
    )


# 100 us of client CPU per chunk; 1,000 chunks/s per stream.
BUSY = WarmupCost(cpu_s=0.01, chunks=100, tokens=100, generating_s=0.096, gaps=96)


def test_auto_takes_what_the_expected_rate_needs_up_to_the_cpus_and_says_why():
    # 64 streams x 1,000 chunks/s x 100 us = 6.4 cores: 11 processes at 60 % of a core each.
    sizing = size_client(_plan(W), BUSY, cpus=4)
    assert sizing.processes == 4
    assert "100.0 us of client CPU per chunk" in sizing.reason and "64,000 chunks/s expected" in sizing.reason
    assert "11 process(es), 4 on this host (4 usable CPUs)" in sizing.reason
    assert "needed about 11 processes" in sizing.shortfall and "may saturate" in sizing.shortfall
    assert size_client(_plan(W), BUSY, cpus=32).processes == 11
    # A finite arrival rate bounds the chunk rate: 50 requests/s x 16 chunks = 800 chunks/s.
    paced = size_client(_plan(replace(W, request_rate=50.0)), BUSY, cpus=32)
    assert paced.processes == 1 and "50 requests/s x 16.0 chunks each" in paced.reason and not paced.shortfall


def test_auto_without_a_measurable_warmup_runs_one_process_and_says_so():
    sizing = size_client(_plan(replace(W, warmup_requests=0)), None, cpus=8)
    assert sizing.processes == 1 and "no warmup stream of two or more chunks" in sizing.reason
    single = WarmupCost(cpu_s=0.01, chunks=4, tokens=16, generating_s=0.0, gaps=0)
    assert "single chunks" in size_client(_plan(W), single, cpus=8).reason


def test_a_fixed_count_is_kept():
    sizing = size_client(_plan(replace(W, client_processes=3)), BUSY, cpus=1)
    assert (sizing.processes, sizing.reason, sizing.shortfall) == (3, "client_processes = 3 in the profile", "")


def test_auto_takes_enough_processes_for_the_open_file_limit_even_on_one_cpu():
    # 1 us per chunk at 10 chunks/s per stream: one process would do for the CPU, but 4,096
    # connections do not fit under a hard limit of 1,024 descriptors (64 open, 64 headroom).
    cheap = WarmupCost(cpu_s=0.0001, chunks=100, tokens=100, generating_s=9.6, gaps=96)
    w = replace(W, concurrency=4096, num_prompts=4096)
    with patch.object(_sizing, "fd_hard_limit", return_value=1024), patch.object(_sizing, "open_fds", return_value=64):
        sizing = size_client(_plan(w), cheap, cpus=1)
    assert sizing.processes == 5 and not sizing.shortfall
    assert "the open-file limit allows 820 streams per process" in sizing.reason


def test_auto_holds_at_most_1024_streams_a_process_whatever_the_cpus():
    # 8,192 streams that one process could serve for the CPU: a loop round over 4,096 busy
    # streams left it ~1 s late, so 8 processes, even on 2 CPUs, and no shortfall note.
    cheap = WarmupCost(cpu_s=0.0001, chunks=100, tokens=100, generating_s=9.6, gaps=96)
    w = replace(W, concurrency=8192, num_prompts=8192)
    sizing = size_client(_plan(w), cheap, cpus=2)
    assert sizing.processes == 8 and not sizing.shortfall
    assert sizing.reason.endswith("; at most 1024 streams per process (the event loop's round): 8")
    assert size_client(_plan(replace(w, warmup_requests=0)), None, cpus=2).processes == 8


@given(
    cpu_us=st.floats(1, 1000),
    per_stream=st.floats(0.1, 10_000),
    concurrency=st.integers(1, 10_000),
    cpus=st.integers(1, 256),
    rate=st.none() | st.floats(0.1, 10_000),
)
def test_auto_stays_within_the_cpus_and_the_streams(cpu_us, per_stream, concurrency, cpus, rate):
    warm = WarmupCost(cpu_s=cpu_us * 1e-6 * 100, chunks=100, tokens=200, generating_s=99 / per_stream, gaps=99)
    w = replace(W, concurrency=concurrency, num_prompts=concurrency, request_rate=rate or float("inf"))
    # The host's open-file limit would decide for small hard limits: keep it out of this property.
    with patch.object(_sizing, "fd_hard_limit", return_value=1 << 20):
        sizing = size_client(_plan(w), warm, cpus=cpus)
    per_process = math.ceil(concurrency / _sizing.MAX_STREAMS_PER_PROCESS)
    assert 1 <= sizing.processes <= max(min(cpus, concurrency), per_process)
    assert math.ceil(concurrency / sizing.processes) <= _sizing.MAX_STREAMS_PER_PROCESS
    assert bool(sizing.shortfall) == ("on this host" in sizing.reason)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with ExitStack() as stack:
        yield start_server(sim_spec(max_running_requests=512), log_dir=tmp_path_factory.mktemp("sim"), stack=stack)


def test_auto_runs_the_processes_it_chose_and_the_results_say_why(sim):
    run = run_workload(sim.base_url, W, model=sim.model)
    assert [r.index for r in run.records] == list(range(W.num_prompts))
    assert all(r.ok and r.output_tokens == W.output_len for r in run.records), [r.error for r in run.records][:3]
    assert run.client.sizing.startswith('client_processes = "auto": the warmup cost ')
    assert (
        f"{run.client.processes} on this host" in run.client.sizing
        or f": {run.client.processes} process(es)" in run.client.sizing
    )
    assert (run.client.processes > 1) == ("client sharded over" in " ".join(run.notes))


def test_the_ports_check_names_the_range_and_the_fix(tmp_path, monkeypatch):
    ports = tmp_path / "ip_local_port_range"
    ports.write_text("40000\t40099\n")
    monkeypatch.setattr(_sizing, "PORT_RANGE", ports)
    with pytest.raises(
        LoadError,
        match=r"workload w: 128 concurrent streams need as many connections to .* 40000-40099\) has 100: widen it",
    ):
        run_workload("http://127.0.0.1:9", replace(W, concurrency=128))


_LIMITED = """
    import json, resource, sys
    from dataclasses import replace
    from perfgate.errors import LoadError
    from perfgate.load import run_workload
    from perfgate.profile import Workload

    if __name__ == "__main__":
        url, soft, hard, processes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        w = Workload(name="wide", num_prompts=300, concurrency=300, input_len=8, output_len=4, warmup_requests=8,
                     client_processes=processes if processes == "auto" else int(processes))
        try:
            run = run_workload(url, w)
        except LoadError as e:
            print(json.dumps({"error": str(e)}))
        else:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            ok = sum(r.ok for r in run.records)
            print(json.dumps({"ok": ok, "notes": run.notes, "processes": run.client.processes, "soft": soft}))
"""


def _limited(tmp_path: Path, url: str, soft: int, hard: int, processes: str) -> dict:
    script = tmp_path / "limited.py"
    script.write_text(textwrap.dedent(_LIMITED))
    proc = subprocess.run(
        [sys.executable, str(script), url, str(soft), str(hard), processes],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_low_soft_open_file_limit_is_raised_for_the_streams(sim, tmp_path):
    got = _limited(tmp_path, sim.base_url, 128, 4096, "1")
    assert got["ok"] == 300 and got["processes"] == 1 and got["soft"] > 300
    assert any(n.startswith("raised the open-file limit (RLIMIT_NOFILE) from 128 to ") for n in got["notes"]), got[
        "notes"
    ]


def test_a_hard_open_file_limit_below_the_need_fails_before_the_run_with_the_fix(sim, tmp_path):
    got = _limited(tmp_path, sim.base_url, 200, 256, "1")
    assert "error" in got, got
    assert got["error"].startswith("workload wide: 300 streams in one client process (1 in all) need about ")
    assert "the hard limit is 256 (RLIMIT_NOFILE, `ulimit -Hn`)" in got["error"]
    assert "LimitNOFILE=" in got["error"] and 'client_processes = 2 or "auto"' in got["error"]


def test_auto_shares_the_streams_over_enough_processes_for_the_open_file_limit(sim, tmp_path):
    got = _limited(tmp_path, sim.base_url, 200, 256, "auto")
    assert got.get("ok") == 300, got
    assert got["processes"] >= 2
