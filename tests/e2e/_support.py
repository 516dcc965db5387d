"""Running perfgate's own gate (perf_tests/) in a pytest subprocess, as a user runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfgate.profile import ServerSpec
from perfgate.server import RunningServer, start_server

REPO = Path(__file__).resolve().parents[2]
PERF_TESTS = REPO / "perf_tests"


# The tiny Llama's wrong siblings, served under the right model's name by the correctness tests.
WRONG_MODELS = {name: REPO / ".perfgate-cache" / f"tiny-model-{name}" for name in ("perturbed", "nan", "bf16")}


def wrong_model(name: str, tox_env: str) -> Path:
    """The path of the wrong model ``name``; the test fails, saying how to build it, when it is missing."""
    path = WRONG_MODELS[name]
    if not path.exists():
        flag = "--dtype bfloat16" if name == "bf16" else f"--defect {name}"
        pytest.fail(
            f"{path} is missing: `python -m perfgate.testing.tinymodel --cache .perfgate-cache/tinymodel {flag} "
            f"--link {path.relative_to(REPO)}` (tox -e {tox_env} does)",
            pytrace=False,
        )
    return path


def start_servers(specs: Mapping[str, ServerSpec], log_root: Path, stack: ExitStack) -> dict[str, RunningServer]:
    """Boot the servers of ``specs`` at once, each logging under ``log_root / name``; each one's
    teardown joins ``stack``. A CPU engine's boot is mostly one core's imports, so two boots side by
    side take about as long as one: for servers that only answer correctness probes, where nothing
    is timed while another boots. The first boot that failed is raised once the others stand (and
    are torn down with ``stack``)."""

    def boot(name: str, spec: ServerSpec) -> tuple[RunningServer, ExitStack]:
        own = ExitStack()
        try:
            return start_server(spec, log_dir=log_root / name, stack=own), own
        except BaseException:
            own.close()
            raise

    with ThreadPoolExecutor(len(specs)) as pool:
        futures = {name: pool.submit(boot, name, spec) for name, spec in specs.items()}
    servers: dict[str, RunningServer] = {}
    failed: BaseException | None = None
    for name, future in futures.items():
        error = future.exception()
        if error is not None:
            failed = failed or error
            continue
        server, own = future.result()
        stack.enter_context(own)
        servers[name] = server
    if failed is not None:
        raise failed
    return servers


def gate_argv(profile: Path, baselines: Path, *args: str) -> list[str]:
    """The command line of a gate run of ``perf_tests/`` as a user types it (run it from REPO)."""
    return [
        sys.executable,
        "-m",
        "pytest",
        str(PERF_TESTS),
        "-p",
        "no:cacheprovider",
        f"--rootdir={REPO}",
        f"--perf-profile={profile}",
        f"--perf-baselines={baselines}",
        *args,
    ]


def gate(profile: Path, baselines: Path, *args: str, timeout_s: float = 1200) -> pytest.RunResult:
    """``pytest perf_tests --perf-profile PROFILE --perf-baselines BASELINES ARGS`` in a subprocess,
    from the repository root (so a profile's relative paths resolve as in a user's run).

    A plain subprocess, not pytester: pytester restores ``sys.modules`` after each test, and an
    httpx client used in-process afterwards then met httpcore exception classes it did not
    know (a bare httpcore.ConnectError escaped its mapping).
    """
    argv = gate_argv(profile, baselines, "-rs", *args)
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False)
    wall_s = time.monotonic() - t0
    ready = re.search(r", ready in ([\d.]+) s", proc.stdout)
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].removesuffix(" (call)").removesuffix(" (setup)")
    GATE_RUNS.append(GateRun(test, " ".join(args), wall_s, float(ready.group(1)) if ready else None))
    return pytest.RunResult(proc.returncode, proc.stdout.splitlines(), proc.stderr.splitlines(), wall_s)


@dataclass(frozen=True)
class GateRun:
    """One gate run of an end-to-end test: where the CI's minutes go (tests/e2e/conftest.py prints them)."""

    test: str
    args: str
    wall_s: float
    ready_s: float | None  # from launch (or, attached, from the first check) to ready, as the gate's summary says


GATE_RUNS: list[GateRun] = []


def expect_outcomes(result: pytest.RunResult, **outcomes: int) -> None:
    """``result.assert_outcomes(**outcomes)``, with the gate's own output in the failure: a bare
    AssertionError from a subprocess run is all a CI log would otherwise show."""
    try:
        result.assert_outcomes(**outcomes)
    except AssertionError:
        tail = "\n".join(result.outlines[-150:] + result.errlines[-40:])
        raise AssertionError(f"expected {outcomes} (exit {result.ret}); the gate printed:\n{tail}") from None


def processes_marked(environ_entry: str, path_marker: str = "") -> dict[int, str]:
    """Live processes (pid -> command line) whose environment holds ``environ_entry``
    ("NAME=value"), or whose command line or memory map names ``path_marker`` (a venv).

    SGLang's children retitle themselves (``sglang::scheduler``) with setproctitle, which
    overwrites their command line and the environment block /proc shows; the venv's libraries
    (torch) in their memory map still say where they come from.
    """
    needle = environ_entry.encode() + b"\0"
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            environ = (entry / "environ").read_bytes() + b"\0"
            maps = (entry / "maps").read_text(errors="replace") if path_marker else ""
        except OSError:
            continue
        if state == "Z":
            continue
        if needle in environ or (path_marker and (path_marker in cmd or path_marker in maps)):
            found[int(entry.name)] = cmd
    return found


def toml_text(doc: dict) -> str:
    """A TOML document for a profile-shaped dict (tables, arrays of tables, scalars, lists, inline tables)."""
    lines: list[str] = []

    def value(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(f"cannot write {type(v).__name__} to TOML")

    def table(header: str, body: dict) -> None:
        if header:
            lines.append(header)
        lines.extend(f"{k} = {value(v)}" for k, v in body.items())
        lines.append("")

    scalars = {k: v for k, v in doc.items() if not isinstance(v, (dict, list))}
    table("", scalars)
    for k, v in doc.items():
        if isinstance(v, dict):
            table(f"[{k}]", v)
        elif isinstance(v, list):
            for item in v:
                table(f"[[{k}]]", item)
    return "\n".join(lines)
