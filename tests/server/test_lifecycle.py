"""Server lifecycle through the same code path as SGLang: only the command differs.

Every failure must end with a clear message within its bound and leave no process behind.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
import uuid
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from perfgate._cpus import format_cpu_list
from perfgate.errors import ServerError
from perfgate.profile import ServerSpec
from perfgate.server import build_command, start_server
from perfgate.server._process import group_members
from perfgate.telemetry import open_host_sampler, process_affinity
from tests.support import processes_with, sim_spec


def marked(**sim):
    """A simulator spec whose processes can be found by a unique model path."""
    marker = f"lifecycle-{uuid.uuid4().hex[:10]}"
    return replace(sim_spec(**sim), model_path=marker), marker


def test_boot_serve_and_teardown_leave_nothing(tmp_path):
    spec, marker = marked()
    with ExitStack() as stack:
        server = start_server(spec, log_dir=tmp_path, stack=stack)
        assert processes_with(marker)
        assert httpx.get(server.base_url + "/health_generate").status_code == 200
        assert server.info.get("version")
        assert server.model == marker
        assert server.boot_s > 0
    assert processes_with(marker) == []
    assert "fired up and ready to roll" in server.log_path.read_text()


def test_a_launched_server_leads_its_own_group_in_perfgates_session(tmp_path):
    """Its own process group, for the teardown; perfgate's session, for the CPU: a new session is a
    scheduling group of its own on Linux (autogroup), and beside vLLM's CPU engine the kernel then
    left the mostly idle load client waiting up to 9 s on the run queue."""
    spec, marker = marked()
    with ExitStack() as stack:
        start_server(spec, log_dir=tmp_path, stack=stack)
        for pid in processes_with(marker):  # the server and perfgate's watchdog
            assert os.getsid(pid) == os.getsid(0), pid
            assert os.getpgid(pid) != os.getpgid(0), pid
        (leader,) = {os.getpgid(pid) for pid in processes_with(marker)}
        assert leader in processes_with(marker)
    assert processes_with(marker) == []


def test_crash_at_boot_fails_fast_with_exit_code_and_log(tmp_path):
    spec, marker = marked(fail_at_startup=True)
    t0 = time.monotonic()
    with pytest.raises(ServerError) as exc, ExitStack() as stack:
        start_server(spec, log_dir=tmp_path, stack=stack)
    msg = str(exc.value)
    assert "exited with code 1" in msg
    assert "Initialization failed" in msg and "--- last 50 lines of" in msg
    assert time.monotonic() - t0 < spec.startup_timeout_s
    assert processes_with(marker) == []


def test_hang_at_boot_times_out_within_bound(tmp_path):
    spec, marker = marked(hang_at_startup=True)
    spec = replace(spec, startup_timeout_s=3.0)
    t0 = time.monotonic()
    with pytest.raises(ServerError, match=r"not ready after 3 s: .*/health_generate last answered HTTP 503") as exc:
        with ExitStack() as stack:
            start_server(spec, log_dir=tmp_path, stack=stack)
    assert time.monotonic() - t0 < 3.0 + 15.0
    assert "startup_timeout_s" in str(exc.value)
    assert processes_with(marker) == []


# A stand-in server's last words: a child's traceback as SGLang logs it, then the kill of its own tree.
_DIES = """
import os, signal, sys, traceback
try:
    raise RuntimeError("The NVIDIA driver on your system is too old (found version 12040)")
except RuntimeError:
    print("[2026-12-02 15:04:08] Scheduler hit an exception: " + traceback.format_exc(), flush=True)
print("[2026-12-02 15:04:08] SIGQUIT received. It usually means one child failed.", flush=True)
{end}
"""


@pytest.mark.parametrize(
    ("end", "headline"),
    [
        (
            "os.kill(os.getpid(), signal.SIGKILL)",
            "was killed by SIGKILL before {url} answered 200; the last error in its log: RuntimeError: The NVIDIA "
            "driver on your system is too old (found version 12040) (a server that kills its own processes when one "
            "fails, as SGLang does, ends this way; so does the kernel's OOM killer: check `dmesg`)",
        ),
        (
            "sys.exit(1)",
            "exited with code 1 before {url} answered 200; the last error in its log: RuntimeError: The NVIDIA "
            "driver on your system is too old (found version 12040)",
        ),
    ],
    ids=["sigkill", "exit"],
)
def test_a_server_that_dies_names_the_last_error_in_its_log(tmp_path, end, headline):
    script = tmp_path / "dies.py"
    script.write_text(_DIES.format(end=end))
    spec = ServerSpec(kind="command", command=(sys.executable, str(script), "{port}"), startup_timeout_s=20)
    with pytest.raises(ServerError) as exc, ExitStack() as stack:
        start_server(spec, log_dir=tmp_path / "logs", stack=stack)
    url = re.search(r"before (\S+) answered", str(exc.value)).group(1)
    assert f"server {headline.format(url=url)} (command: " in str(exc.value)


def test_a_server_killed_without_a_word_is_pointed_at_the_oom_killer(tmp_path):
    script = tmp_path / "killed.py"
    script.write_text("import os, signal\nprint('loading', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n")
    spec = ServerSpec(kind="command", command=(sys.executable, str(script), "{port}"), startup_timeout_s=20)
    with pytest.raises(ServerError) as exc, ExitStack() as stack:
        start_server(spec, log_dir=tmp_path / "logs", stack=stack)
    assert "answered 200 (the kernel's OOM killer sends this; check `dmesg`) (command: " in str(exc.value)
    assert "last error" not in str(exc.value)


def test_bad_flag_shows_the_servers_own_complaint(tmp_path):
    spec, marker = marked()
    spec = replace(spec, args=("--no-such-flag", "1"))
    with pytest.raises(ServerError, match=r"exited with code 2(.|\n)*--no-such-flag"):
        with ExitStack() as stack:
            start_server(spec, log_dir=tmp_path, stack=stack)
    assert processes_with(marker) == []


def test_port_in_use_is_refused_before_launch(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        spec, marker = marked()
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            with ExitStack() as stack:
                start_server(replace(spec, port=port), log_dir=tmp_path, stack=stack)
    assert processes_with(marker) == []


def test_sigterm_ignoring_server_is_killed_with_its_group(tmp_path):
    # A "command" server whose shell ignores SIGTERM and leaves a child: both must go.
    marker = f"stubborn-{uuid.uuid4().hex[:8]}"
    script = (
        "import signal, subprocess, sys, http.server;"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{marker}']);"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()"
    )
    spec = replace(
        sim_spec(),
        kind="command",
        sim={},
        command=("{python}", "-c", script, "{port}", marker),
        ready_path="/",
        shutdown_timeout_s=1.0,
    )
    with ExitStack() as stack:
        server = start_server(spec, log_dir=tmp_path, stack=stack)
        # The shell, its child, and perfgate's watchdog (which names the server's command).
        assert len(processes_with(marker)) == 3
    assert processes_with(marker) == []
    assert any("ignored SIGTERM" in n for n in server.notes)


def test_attach_uses_the_same_readiness_and_provenance(tmp_path):
    spec, _ = marked()
    with ExitStack() as owner:
        booted = start_server(spec, log_dir=tmp_path, stack=owner)
        with ExitStack() as stack:
            attached = start_server(
                replace(spec, kind="attach", sim={}), log_dir=tmp_path, stack=stack, base_url=booted.base_url
            )
        assert attached.kind == "attach" and attached.process is None
        assert attached.info == booted.info
        # --perf-base-url with a profile that pins its server: said, not applied, not recorded as applied.
        with ExitStack() as stack:
            pinned = start_server(
                replace(spec, cpu_affinity="0"), log_dir=tmp_path, stack=stack, base_url=booted.base_url
            )
        assert pinned.provenance()["cpu_affinity"] == ""
        assert any("cpu_affinity 0 not applied: --perf-base-url attaches" in n for n in pinned.notes)
        # Attaching never stops the server it did not start.
        assert httpx.get(booted.base_url + "/health").status_code == 200


def test_command_template_rejects_unknown_placeholders():
    spec = replace(sim_spec(), kind="command", sim={}, command=("serve", "{modle}"))
    with pytest.raises(ServerError, match=r"bad placeholder 'modle'; use \{port\}"):
        build_command(spec, 1234)


def test_sglang_command_sets_tp_and_pci_bus_order():
    spec = replace(sim_spec(), kind="sglang", sim={}, model_path="/m", gpus=(2, 3), python="/venv/bin/python")
    argv, env = build_command(spec, 30000)
    assert argv[:3] == ["/venv/bin/python", "-m", "sglang.launch_server"]
    assert argv[argv.index("--tp-size") + 1] == "2"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_crash_mid_run_fails_requests_with_reasons_and_leaves_nothing(tmp_path):
    from perfgate.load import run_workload
    from perfgate.profile import Workload

    spec, marker = marked(crash_after_requests=6)
    w = Workload(name="w", num_prompts=20, concurrency=4, input_len=8, output_len=50, warmup_requests=0)
    with ExitStack() as stack:
        server = start_server(spec, log_dir=tmp_path, stack=stack)
        run = run_workload(server.base_url, w, model=server.model)
        # Its clients can see the sockets close before the kernel reports the exit.
        died = server.died("in the test", grace_s=5.0)
        assert died is not None and "exited with code 1 in the test" in str(died), died
    errors = [r.error for r in run.records if r.error]
    assert errors and all(e.startswith(("truncated stream", "connection error")) for e in errors)
    assert processes_with(marker) == []


# A stand-in server that starts a child of its own, as SGLang starts its scheduler and detokenizer.
_WITH_CHILD = (
    "import subprocess, sys, http.server;"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[2] + '-child']);"
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()"
)


def _allowed_list(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    return re.search(r"^Cpus_allowed_list:\s*(\S+)$", status, re.M).group(1)


def test_cpu_affinity_places_the_server_and_every_process_it_starts(tmp_path):
    own = os.sched_getaffinity(0)
    cpu = min(own)
    marker = f"pinned-{uuid.uuid4().hex[:8]}"
    spec = replace(
        sim_spec(), kind="command", sim={}, command=("{python}", "-c", _WITH_CHILD, "{port}", marker), ready_path="/"
    )
    with ExitStack() as stack:
        server = start_server(replace(spec, cpu_affinity=str(cpu)), log_dir=tmp_path, stack=stack)
        pids = processes_with(marker)
        # The server, its child, and perfgate's watchdog (which names the server's command).
        assert len(pids) == 3 and any(f"{marker}-child" in Path(f"/proc/{p}/cmdline").read_text() for p in pids)
        for pid in pids:
            assert os.sched_getaffinity(pid) == {cpu}, pid
            assert _allowed_list(pid) == str(cpu), pid
        assert server.provenance()["cpu_affinity"] == str(cpu)
        # What the host record reads off the processes says the same.
        sampler = open_host_sampler(server.process.pid)
        assert set(process_affinity(sampler).values()) == {str(cpu)}
        # Set in the child between fork and exec: perfgate itself stays where it was.
        assert os.sched_getaffinity(0) == own
    assert processes_with(marker) == []


def test_a_simulator_and_its_engine_process_run_where_cpu_affinity_says(tmp_path):
    # The other end from the command server's case: a CPU other than 0 where there is one.
    cpu = max(os.sched_getaffinity(0))
    spec, marker = marked(spin_process=True)
    with ExitStack() as stack:
        server = start_server(replace(spec, cpu_affinity=str(cpu)), log_dir=tmp_path, stack=stack)
        group = group_members(server.process.pid)
        # The simulator, its engine's process and the watchdog: the whole group.
        assert len(group) >= 3
        elsewhere = {pid: cpus for pid in group if (cpus := os.sched_getaffinity(pid)) != {cpu}}
        assert elsewhere == {}
    assert processes_with(marker) == []


def test_unpinned_servers_inherit_perfgates_cpus(tmp_path):
    spec, marker = marked()
    with ExitStack() as stack:
        server = start_server(spec, log_dir=tmp_path, stack=stack)
        assert os.sched_getaffinity(server.process.pid) == os.sched_getaffinity(0)
        assert server.provenance()["cpu_affinity"] == ""
    assert processes_with(marker) == []


def test_a_cpu_perfgate_may_not_use_is_refused_before_anything_starts(tmp_path):
    allowed = os.sched_getaffinity(0)
    outside = max(allowed) + 1
    spec, marker = marked()
    shown = format_cpu_list(allowed)
    with pytest.raises(ServerError) as exc, ExitStack() as stack:
        start_server(replace(spec, cpu_affinity=f"0-{outside}"), log_dir=tmp_path / "logs", stack=stack)
    assert str(exc.value) == (
        f"[server] cpu_affinity = '0-{outside}': CPU {format_cpu_list(set(range(outside + 1)) - allowed)} "
        f"{'is' if len(set(range(outside + 1)) - allowed) == 1 else 'are'} not among the CPUs perfgate may run on "
        f"({shown}), so the server cannot be placed there; list only those, or start perfgate with a wider "
        "affinity (taskset, the container's cpuset)"
    )
    assert processes_with(marker) == [] and not (tmp_path / "logs").exists()
