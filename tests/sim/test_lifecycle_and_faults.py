"""Readiness, the command line, and every fault knob, each on its own simulator process."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from perfgate.sim._options import parse_options
from perfgate.sim._server import plan_faults
from tests.sim.conftest import start_sim

SRC = str(Path(__file__).resolve().parents[2] / "src")
FAST = ("--time-scale", "0.01", "--startup-delay-s", "0")
GEN = {"input_ids": [1, 2, 3], "stream": True, "sampling_params": {"max_new_tokens": 10, "ignore_eos": True}}


# Each knob needs its own process; starting them together overlaps their imports.
FAULT_SIMS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "crash": (("--crash-after-requests", "2"), {}),
    "http_error": (("--http-error-rate", "1"), {}),
    "error_chunk": (("--error-chunk-rate", "1"), {}),
    "truncate": (("--truncate-rate", "1"), {}),
    "short": (("--short-rate", "1"), {}),
    "slowdown": ((), {"PERFGATE_SIM_SLOWDOWN": "1.10"}),
    "zero_cost": (("--zero-cost", "true"), {}),
}


@pytest.fixture(scope="module")
def sims(launch_sim):
    started = {name: launch_sim(*FAST, *args, env=env) for name, (args, env) in FAULT_SIMS.items()}
    try:
        for sim in started.values():
            sim.wait_ready()
        yield started
    finally:
        for sim in started.values():
            sim.stop()


def test_503_until_warmup_then_200_and_the_ready_line(sim_factory) -> None:
    # Long enough for the three probes below on a loaded machine (1.5 s was not, under pytest-xdist).
    sim = sim_factory("--startup-delay-s", "4", ready=False)
    sim.wait_listening()
    assert httpx.get(sim.url + "/health").status_code == 503
    assert httpx.get(sim.url + "/health_generate").status_code == 503
    assert httpx.get(sim.url + "/v1/models").status_code == 200  # like SGLang: not a readiness probe
    assert "ready to roll" not in sim.log()
    sim.wait_ready()
    assert httpx.get(sim.url + "/health").status_code == 200
    deadline = time.monotonic() + 5
    while "The server is fired up and ready to roll!" not in sim.log():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_fail_at_startup_logs_and_exits_1(sim_factory) -> None:
    sim = sim_factory("--startup-delay-s", "0.2", "--fail-at-startup", "true", ready=False)
    assert sim.wait_exit() == 1
    assert "Initialization failed. warmup error" in sim.log()


def test_hang_at_startup_never_becomes_ready(sim_factory) -> None:
    sim = sim_factory("--startup-delay-s", "0", "--hang-at-startup", "true", ready=False)
    sim.wait_listening()
    for _ in range(5):
        assert httpx.get(sim.url + "/health_generate").status_code == 503
        time.sleep(0.1)
    assert sim.proc.poll() is None


def test_crash_after_requests(sims) -> None:
    sim = sims["crash"]
    with httpx.Client(base_url=sim.url, timeout=10) as c:
        assert c.post("/generate", json={"input_ids": [1]}).status_code == 200
        with pytest.raises(httpx.TransportError):
            c.post("/generate", json={"input_ids": [1]})
    assert sim.wait_exit() == 1


def test_http_error_rate(sims) -> None:
    sim = sims["http_error"]
    resp = httpx.post(sim.url + "/v1/completions", json={"prompt": [1], "max_tokens": 2})
    assert resp.status_code == 500
    assert resp.json()["object"] == "error" and resp.json()["code"] == 500


def _stream_lines(url: str, body: dict[str, object]) -> list[str]:
    lines = []
    with httpx.stream("POST", url, json=body, timeout=10) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if line:
                lines.append(line)
    return lines


def test_error_chunk_rate(sims) -> None:
    sim = sims["error_chunk"]
    lines = _stream_lines(sim.url + "/generate", GEN)
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2][len("data: ") :])
    assert set(error) == {"error"} and error["error"]["message"]
    assert 0 < len(lines) - 2 < 10  # some tokens came first
    # The engine dropped the request: nothing runs any more.
    assert "sglang:num_running_reqs{" in httpx.get(sim.url + "/metrics").text


def test_truncate_rate(sims) -> None:
    sim = sims["truncate"]
    lines: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        with httpx.stream("POST", sim.url + "/generate", json=GEN, timeout=10) as resp:
            for line in resp.iter_lines():
                if line:
                    lines.append(line)
    assert 0 < len(lines) < 10 and "data: [DONE]" not in lines
    # The server survives and still serves.
    assert httpx.get(sim.url + "/health").status_code == 200


def test_short_rate(sims) -> None:
    sim = sims["short"]
    lines = _stream_lines(sim.url + "/generate", GEN)
    assert lines[-1] == "data: [DONE]"
    last = json.loads(lines[-2][len("data: ") :])
    assert last["meta_info"]["completion_tokens"] == 5
    assert last["meta_info"]["finish_reason"]["type"] == "stop"


def test_exact_completion_tokens_with_ignore_eos_under_concurrency(sims) -> None:
    sim = sims["slowdown"]

    async def run() -> list[int]:
        async with httpx.AsyncClient(base_url=sim.url, timeout=30) as c:

            async def one(n: int) -> int:
                body = {"input_ids": [1] * (10 + n), "sampling_params": {"max_new_tokens": n, "ignore_eos": True}}
                return (await c.post("/generate", json=body)).json()["meta_info"]["completion_tokens"]

            return await asyncio.gather(*(one(n) for n in range(1, 41)))

    assert asyncio.run(run()) == list(range(1, 41))
    truth = httpx.get(sim.url + "/sim/truth").json()
    assert sorted(truth["requests"]["output_tokens"]) == list(range(1, 41))


def test_slowdown_env_reaches_the_engine(sims) -> None:
    sim = sims["slowdown"]
    info = httpx.get(sim.url + "/server_info").json()
    assert info["perfgate_sim"]["slowdown"] == 1.10
    opts = parse_options(["--port", "1"], {"PERFGATE_SIM_SLOWDOWN": "1.10"})
    assert opts.engine_config().slowdown == 1.10


@pytest.mark.parametrize("value", ["fast", "1e308"])
def test_invalid_slowdown_exits_with_a_clear_message(tmp_path, value: str) -> None:
    # 1e308 was taken: every step then slept longer than any run lasts.
    proc = subprocess.run(
        [sys.executable, "-m", "perfgate.sim", "--port", "1"],
        env={"PYTHONPATH": SRC, "PERFGATE_SIM_SLOWDOWN": value},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert f"PERFGATE_SIM_SLOWDOWN={value!r}" in proc.stderr and "a number > 0 and <= 1000" in proc.stderr


def test_unknown_option_is_an_argparse_error_naming_it(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_options(["--port", "1", "--no-such-knob", "3"], {})
    assert exc.value.code == 2
    assert "--no-such-knob" in capsys.readouterr().err


def test_boolean_options_take_explicit_values() -> None:
    assert parse_options(["--zero-cost", "true"], {}).zero_cost is True
    assert parse_options(["--zero-cost", "false"], {}).zero_cost is False
    assert parse_options(["--zero-cost"], {}).zero_cost is True
    assert parse_options([], {}).served_model_name == "sim/GLM-5-NVFP4"
    with pytest.raises(SystemExit):
        parse_options(["--zero-cost", "maybe"], {})


def test_zero_cost_still_streams_everything(sims) -> None:
    sim = sims["zero_cost"]
    lines = _stream_lines(sim.url + "/generate", dict(GEN, sampling_params={"max_new_tokens": 50}))
    assert len(lines) == 51 and lines[-1] == "data: [DONE]"


def test_fault_choices_depend_on_seed_and_request_order_only() -> None:
    opts = parse_options(["--error-chunk-rate", "0.3", "--truncate-rate", "0.2"], {})

    def plans(seed: int) -> list[object]:
        rng = random.Random(seed)
        return [plan_faults(rng, opts) for _ in range(500)]

    again = plans(9)
    assert plans(9) == again
    assert plans(10) != again
    assert 0.2 < sum(p.error_chunk for p in again) / 500 < 0.4
    assert 0.1 < sum(p.truncate for p in again) / 500 < 0.3
    assert not any(p.http_error or p.short for p in again)


def test_port_in_use_exits_1_without_claiming_readiness() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "perfgate.sim",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--startup-delay-s",
                "0",
            ],
            env={"PYTHONPATH": SRC},
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "ready to roll" not in proc.stdout


def test_the_simulator_takes_the_open_file_limit_it_is_allowed(tmp_path) -> None:
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard open-file limit ({hard}) leaves nothing to raise")
    # Children inherit limits: start the simulator under a soft limit of 256.
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        sim = start_sim(tmp_path, *FAST)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        sim.wait_ready()
        line = next(
            x for x in Path(f"/proc/{sim.proc.pid}/limits").read_text().splitlines() if x.startswith("Max open files")
        )
        got_soft, got_hard = line.split()[3:5]
        assert got_soft == got_hard != "256", line
    finally:
        sim.stop()
