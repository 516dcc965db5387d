"""Start (or attach to) the server under test and collect its provenance."""

from __future__ import annotations

import os
import random
import socket
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from perfgate._cpus import format_cpu_list, parse_cpu_list
from perfgate._redact import SECRETS
from perfgate.errors import ServerError
from perfgate.gpu import Hardware
from perfgate.profile import ServerSpec
from perfgate.server._gpu_procs import wait_released
from perfgate.server._locks import hold_gpus
from perfgate.server._process import EXIT_GRACE_S, ServerProcess, launch, tail_block
from perfgate.server._ready import check_url, wait_ready
from perfgate.server._secrets import SECRET_FLAGS, Redactor, ServerKeys
from perfgate.server._sglang_launch import SGLangPreflight, preflight, verify


@dataclass
class RunningServer:
    """The server under test, ready to serve. ``info`` is its /server_info, as resolved by the server.

    Everything recorded here (argv, env, info) has the server's API keys redacted.
    """

    kind: str
    base_url: str
    model: str
    argv: list[str]
    log_path: Path | None
    boot_s: float
    gpus: tuple[int | str, ...]
    info: dict[str, Any] = field(default_factory=dict)
    model_info: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    process: ServerProcess | None = None
    # SGLang only: the autotune plan's decision and what the boot log proved.
    autotune: dict[str, Any] = field(default_factory=dict)
    # The endpoint that reported versions["server"] (/server_info, /version, /info, /props).
    version_source: str = ""
    # The environment perfgate added to the server's (profile env, autotune hook).
    env: dict[str, str] = field(default_factory=dict)
    # The host its processes ran on: CPU model, cpufreq governor, each process's CPU affinity
    # (filled by the session, which reads the processes).
    host: dict[str, Any] = field(default_factory=dict)
    # [server] cpu_affinity as perfgate applied it, in the kernel's cpulist form ("" = not set:
    # perfgate's own placement, or an attached server).
    cpu_affinity: str = ""
    # Its API keys, read once at start or attach; never recorded (not in provenance()).
    keys: ServerKeys = field(default_factory=ServerKeys, repr=False)

    def headers(self, *, admin: bool = False) -> dict[str, str]:
        """The bearer header its requests carry (``admin``: for an admin endpoint, the admin key,
        or the API key where no admin key is set); {} without keys."""
        return self.keys.headers(admin=admin)

    @property
    def is_sglang(self) -> bool:
        """SGLang, launched as kind = "sglang" or recognised by its version on /server_info (attached,
        a command, or perfgate's SGLang-compatible simulator)."""
        return self.kind == "sglang" or self.version_source == "/server_info"

    @property
    def telemetry_gpus(self) -> tuple[int | str, ...]:
        """The GPUs to read power from on this host: the profile's, except for the simulator,
        whose GPUs are simulated (its dcgm endpoint serves them)."""
        return () if self.kind == "simulator" else self.gpus

    def hardware(self) -> Hardware | None:
        """The hardware the server reports about itself where no telemetry can tell: perfgate's
        simulator lists the GPUs it simulates in /server_info. None for every real server."""
        sim = self.info.get("perfgate_sim")
        gpus = sim.get("gpus") if isinstance(sim, dict) else None
        if not gpus or not isinstance(gpus, list) or not isinstance(gpus[0], dict):
            return None
        limit = gpus[0].get("power_limit_w")
        return Hardware(
            gpu_model="simulated " + str(gpus[0].get("name", "GPU")),
            gpu_count=len(gpus),
            power_limit_w=float(limit) if isinstance(limit, (int, float)) else None,
            driver_version="",
        )

    def died(self, doing: str, grace_s: float = 0.0) -> ServerError | None:
        """A ServerError with the exit code and log tail when the launched server has exited, else None.

        Requests to a dead server fail as "connection error"; this says why. ``grace_s``: wait
        that long for an exit under way (when requests failed). Attached servers are not ours
        to watch: None.
        """
        return self.process.exit_error(doing, grace_s) if self.process is not None else None

    def exit_reason(self, doing: str, grace_s: float = 0.0) -> str | None:
        """:meth:`died` in one line, without the command and the log's tail."""
        return self.process.exit_reason(doing, grace_s) if self.process is not None else None

    def with_exit(self, message: str, doing: str) -> str:
        """``message`` with the server's exit appended when it exited while ``doing``: a request
        that broke says little, the exit code and the last error in the server's log say why. It
        waits :data:`EXIT_GRACE_S` for an exit under way."""
        died = self.exit_reason(doing, EXIT_GRACE_S)
        return f"{message}; {died}" if died else message

    def provenance(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "base_url": self.base_url,
            "model": self.model,
            "launch_command": self.argv,
            "boot_s": round(self.boot_s, 3),
            "versions": self.versions,
            "version_source": self.version_source,
            "env": self.env,
            "cpu_affinity": self.cpu_affinity,
            "autotune": self.autotune,
            "server_info": self.info,
            "host": self.host,
        }


# SGLang (0.5.12 measured) derives a gRPC port as --port + 10000 and refuses to start when that
# exceeds 65535.
_SGLANG_MAX_PORT = 55535
_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PORT = 20000
# Tries at a port taken between perfgate's pick and the server's bind.
_BIND_ATTEMPTS = 3


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ports it hands out itself (Linux's default when unreadable)."""
    try:
        lo, hi = (int(v) for v in _PORT_RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return lo, hi


def _free_port(host: str, max_port: int = 65535) -> int:
    """A port free on ``host`` right now, at most ``max_port``, outside the ephemeral range.

    A port from the ephemeral range can be handed to any process's next outgoing connection or
    bind to port 0 while the server is still loading (SGLang 0.5.23 spent 12 s in its tokenizer, and
    its own workers open connections meanwhile): CI saw uvicorn fail with EADDRINUSE on such a port.
    """
    lo, hi = _ephemeral_range()
    spans = [(a, b) for a, b in ((_LOWEST_PORT, min(lo - 1, max_port)), (hi + 1, max_port)) if a <= b]
    rng = random.Random()
    for _ in range(200 if spans else 0):
        a, b = rng.choice(spans)
        candidate = rng.randint(a, b)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, candidate))
            except OSError:
                continue
        return candidate
    raise ServerError(
        f"no free port in {_LOWEST_PORT}-{max_port} outside the ephemeral range {lo}-{hi} on {host}; "
        "set [server] port to a free one"
    )


def _check_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            raise ServerError(
                f"port {port} on {host} is already in use; stop what listens there, choose another "
                "[server] port, or set port = 0 to pick a free one"
            ) from None


def _sim_flags(spec: ServerSpec) -> list[str]:
    flags: list[str] = []
    for key, value in spec.sim.items():
        flags.append("--" + key.replace("_", "-"))
        flags.append(str(value).lower() if isinstance(value, bool) else str(value))
    return flags


def _has_flag(args: tuple[str, ...], *names: str) -> bool:
    return any(a == n or a.startswith(n + "=") for a in args for n in names)


def _placement(spec: ServerSpec) -> frozenset[int]:
    """The CPUs ``[server] cpu_affinity`` places a launched server on (empty: not set). ServerError,
    before anything starts, when it names a CPU perfgate itself may not run on (the server could
    not be placed there) or cannot be read."""
    if not spec.cpu_affinity:
        return frozenset()
    try:
        cpus = parse_cpu_list(spec.cpu_affinity)
    except ValueError as e:
        raise ServerError(f"[server] cpu_affinity {spec.cpu_affinity!r}: {e}") from None
    if not hasattr(os, "sched_setaffinity"):
        raise ServerError(f"[server] cpu_affinity needs Linux's sched_setaffinity, which {sys.platform} lacks")
    allowed = os.sched_getaffinity(0)
    missing = cpus - allowed
    if missing:
        raise ServerError(
            f"[server] cpu_affinity = {spec.cpu_affinity!r}: CPU {format_cpu_list(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not among the CPUs perfgate may run on "
            f"({format_cpu_list(allowed)}), so the server cannot be placed there; list only those, or start "
            "perfgate with a wider affinity (taskset, the container's cpuset)"
        )
    return cpus


def build_command(spec: ServerSpec, port: int, keys: ServerKeys | None = None) -> tuple[list[str], dict[str, str]]:
    """The argv and extra environment that start ``spec`` on ``port`` (not for kind = "attach").

    The API keys named by ``api_key_env`` / ``admin_api_key_env`` (``keys``, default: read from
    the environment now) become ``--api-key`` / ``--admin-api-key`` for kind = "sglang", and the
    ``{api_key}`` / ``{admin_api_key}`` placeholders of a kind = "command" template.
    """
    python = spec.python or sys.executable
    env: dict[str, str] = {}
    keys = keys if keys is not None else ServerKeys.from_spec(spec)
    if _has_flag(spec.args, *SECRET_FLAGS):
        where = (
            "perfgate passes it as --api-key" if spec.kind == "sglang" else "write {api_key} where the command takes it"
        )
        raise ServerError(
            f"[server] args hold {' / '.join(f for f in SECRET_FLAGS if _has_flag(spec.args, f))}: a key written "
            "into a profile ends up in git and in every record of the run; put it in an environment variable "
            f"and name that in [server] api_key_env (admin key: admin_api_key_env); {where}"
        )
    if spec.kind == "simulator":
        argv = [python, "-m", "perfgate.sim", "--host", spec.host, "--port", str(port)]
        if spec.model_path:
            argv += ["--model-path", spec.model_path]
        argv += _sim_flags(spec) + list(spec.args)
    elif spec.kind == "sglang":
        argv = [
            python,
            "-m",
            "sglang.launch_server",
            "--model-path",
            spec.model_path,
            "--host",
            spec.host,
            "--port",
            str(port),
        ]
        if spec.gpus and not _has_flag(spec.args, "--tp", "--tp-size", "--tensor-parallel-size"):
            argv += ["--tp-size", str(len(spec.gpus))]
        argv += list(spec.args)
        argv += keys.server_flags()
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    elif spec.kind == "command":
        values = {"port": str(port), "host": spec.host, "model": spec.model_path, "python": python}
        values.update({k: v for k, v in (("api_key", keys.api_key), ("admin_api_key", keys.admin_api_key)) if v})
        try:
            argv = [part.format(**values) for part in spec.command] + list(spec.args)
        except (KeyError, IndexError, ValueError) as e:
            raise ServerError(
                f"[server] command template {list(spec.command)!r}: bad placeholder {e}; "
                "use {port}, {host}, {model}, {python}, or {api_key} / {admin_api_key} with api_key_env / "
                "admin_api_key_env set (double braces for literal ones)"
            ) from None
        if spec.gpus:
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    else:
        raise ServerError(f"server kind {spec.kind!r} is not launched by perfgate")
    if spec.gpus and spec.kind != "simulator":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
    env.update(spec.env)
    return argv, env


def _get_json(client: httpx.Client, base_url: str, *paths: str) -> dict[str, Any]:
    """First of ``paths`` that answers a JSON object (SGLang renamed /get_server_info to /server_info)."""
    for path in paths:
        try:
            resp = client.get(base_url + path)
        except httpx.HTTPError:
            continue
        if resp.status_code == 200:
            try:
                data = resp.json()
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return {}


def _served_model(client: httpx.Client, base_url: str, fallback: str) -> str:
    data = _get_json(client, base_url, "/v1/models")
    models = data.get("data") or []
    if models and isinstance(models[0], dict) and models[0].get("id"):
        return str(models[0]["id"])
    return fallback


def start_server(
    spec: ServerSpec, *, log_dir: Path, stack: ExitStack, base_url: str = "", lock_wait_s: float = 0.0
) -> RunningServer:
    """Boot ``spec`` (or attach when ``base_url`` or kind = "attach") and register its teardown on ``stack``.

    Teardown runs when ``stack`` closes: on success, failure and Ctrl-C alike.
    """
    keys = ServerKeys.from_spec(spec)
    # Before the server starts: it may log its environment.
    SECRETS.add_env(dict(spec.env))
    pre: SGLangPreflight | None = None
    env: dict[str, str] = {}
    attach_url = (base_url or (spec.base_url if spec.kind == "attach" else "")).rstrip("/")
    if attach_url:
        check_url(attach_url, "--perf-base-url" if base_url else "[server] base_url")
        boot_s = wait_ready(
            attach_url + spec.ready_path,
            spec.startup_timeout_s,
            headers=keys.headers(),
            connect_timeout_s=spec.connect_timeout_s,
        )
        server = RunningServer("attach", attach_url, spec.model_path, [], None, boot_s, spec.gpus)
        if spec.cpu_affinity:
            server.notes.append(
                f"[server] cpu_affinity {spec.cpu_affinity} not applied: --perf-base-url attaches to a running "
                "server, which runs where it was started"
            )
    else:
        cpus = _placement(spec)
        if spec.gpus and spec.kind in ("sglang", "command"):
            hold_gpus(spec.gpus, stack, lock_wait_s)
        if spec.port:
            _check_port_free(spec.host, spec.port)
        server, pre, env = _launch(spec, keys, log_dir, stack, cpus)
    server.keys = keys
    _read_provenance(server, spec)
    if pre is not None and server.process is not None:
        server.versions.update(pre.versions)
        server.notes.extend(pre.warnings)
        server.autotune = verify(spec, pre, server.process, server.info, env)
    return server


def _launch(
    spec: ServerSpec, keys: ServerKeys, log_dir: Path, stack: ExitStack, cpus: frozenset[int]
) -> tuple[RunningServer, SGLangPreflight | None, dict[str, str]]:
    """Launch ``spec`` (on ``cpus``, when given) and wait until it is ready: the server, SGLang's
    preflight and the server's environment. On a port perfgate picked, relaunch on another when the
    server died because something bound that port first."""
    port = spec.port or _pick_port(spec)
    argv, extra_env = build_command(spec, port, keys)
    env = {**os.environ, **extra_env}
    pre = None
    # Once, not per launch: it runs SGLang's --help (torch imports), snapshots the autotune cache
    # and checks the GPUs are free, which a dead launch's lingering workers could fail.
    if spec.kind == "sglang":
        pre = preflight(spec, argv[0], env)
        env = pre.plan.apply(env)
        extra_env = pre.plan.apply(extra_env)
    taken: list[int] = []
    while True:
        log_path = log_dir / f"server-{spec.kind}-{port}.log"
        proc = launch(argv, env, log_path, cpus=cpus)
        server = RunningServer(
            spec.kind,
            f"http://{spec.host}:{port}",
            spec.model_path,
            proc.argv,
            log_path,
            0.0,
            spec.gpus,
            process=proc,
            env=Redactor().env(extra_env),
            cpu_affinity=format_cpu_list(cpus),
        )
        stack.callback(_stop, server, spec)
        try:
            server.boot_s = wait_ready(
                server.base_url + spec.ready_path, spec.startup_timeout_s, headers=keys.headers(), process=proc
            )
        except ServerError:
            if spec.port or len(taken) + 1 >= _BIND_ATTEMPTS or not _lost_its_port(proc):
                raise
            taken.append(port)
            port = _pick_port(spec)
            # Only the argv names the port; the environment is the one preflight planned.
            argv = build_command(spec, port, keys)[0]
            continue
        if taken:
            server.notes.append(
                f"port{'s' if len(taken) > 1 else ''} {', '.join(map(str, taken))} taken by another process "
                f"before the server bound it; relaunched on {port} (logs: {log_dir})"
            )
        return server, pre, env


def _pick_port(spec: ServerSpec) -> int:
    return _free_port(spec.host, _SGLANG_MAX_PORT if spec.kind == "sglang" else 65535)


def _lost_its_port(proc: ServerProcess) -> bool:
    """The server exited because its listening port was in use (uvicorn, Python and C servers alike)."""
    if proc.popen.poll() is None:
        return False
    tail = tail_block(proc.log_path).lower()
    return "address already in use" in tail or "errno 98" in tail or "eaddrinuse" in tail


def _read_provenance(server: RunningServer, spec: ServerSpec) -> None:
    """/server_info, /model_info, the served model name and the server's own version, with the keys
    redacted (SGLang returns its server args, ``api_key`` included, and its launch command in clear)."""
    redactor = Redactor()
    with httpx.Client(timeout=10.0, headers=server.headers()) as client:
        server.info = redactor.json(_get_json(client, server.base_url, "/server_info", "/get_server_info"))
        server.model_info = redactor.json(_get_json(client, server.base_url, "/model_info", "/get_model_info"))
        fallback = server.model_info.get("served_model_name") or spec.model_path or "default"
        server.model = redactor.text(_served_model(client, server.base_url, fallback))
        version, source = _server_version(client, server.base_url, server.info)
    if version:
        server.versions["server"] = version
        server.version_source = source


# Where servers report their version: SGLang (/server_info), vLLM (/version), Hugging Face TGI
# (/info), llama.cpp (/props, "build_info").
_VERSION_SOURCES = (("/version", "version"), ("/info", "version"), ("/props", "build_info"))


def _server_version(client: httpx.Client, base_url: str, info: dict[str, Any]) -> tuple[str, str]:
    """(the server's own version, the endpoint that said it), or ("", "") when none does."""
    if info.get("version"):
        return str(info["version"]), "/server_info"
    for path, key in _VERSION_SOURCES:
        value = _get_json(client, base_url, path).get(key)
        if isinstance(value, (str, int, float)) and str(value):
            return str(value), path
    return "", ""


def _stop(server: RunningServer, spec: ServerSpec) -> None:
    if server.process is None:
        return
    server.notes.extend(server.process.stop(spec.shutdown_timeout_s))
    if spec.gpus and spec.kind in ("sglang", "command"):
        # Schedulers re-parented to init can hold GPU memory after their group is gone; other
        # tenants of the GPU are not ours to wait for.
        server.notes.extend(wait_released(spec.gpus, server.process.pids, spec.shutdown_timeout_s))
