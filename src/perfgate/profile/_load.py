"""Read and validate a profile TOML file.

Each key is checked against its declaration on the spec dataclasses (``_model.py``, see
``_keys.py``); what involves more than one key (kind = "sglang" needs model_path, ...) is
explicit code here. ``[server.sim]`` is checked against the simulator's own option
declarations. Errors collect the file, the table path and the key so the message alone tells
the user where to look.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from dataclasses import replace
from typing import Any, get_args

from perfgate.errors import ProfileError
from perfgate.profile._keys import Bad, Check, checks, required
from perfgate.profile._model import (
    DEFAULT_TOLERANCE,
    GateSpec,
    Profile,
    ServerKind,
    ServerSpec,
    TelemetrySpec,
    Workload,
)

# The simulator's option declarations, not its server: perfgate.sim imports no stage of
# perfgate, so this is no upward import, and nothing HTTP-related loads with a profile.
from perfgate.sim._options import LAUNCHER_SETS, conflicts, option_text, sim_options

_TOP_KEYS = {"name", "description", "server", "telemetry", "workload", "gate"}


def _and(names: tuple[str, ...]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


class _Ctx:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, key: str | None, message: str) -> ProfileError:
        loc = f"{where} key {key!r}" if key is not None else where
        return ProfileError(f"profile {self.path}: {loc}: {message}")

    def unknown(self, where: str, key: str, known: Mapping[str, object]) -> ProfileError:
        hint = difflib.get_close_matches(key, list(known), n=1)
        did = f"; did you mean {hint[0]!r}?" if hint else f"; known keys: {', '.join(sorted(known))}"
        return self.fail(where, key, f"unknown key{did}")

    def take(self, where: str, raw: Mapping[str, Any], spec: type) -> dict[str, Any]:
        """The keys of ``raw`` checked against ``spec``'s declarations and converted."""
        keys: dict[str, Check] = checks(spec)
        out: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in keys:
                raise self.unknown(where, key, keys)
            try:
                out[key] = keys[key].convert(value)
            except Bad as e:
                raise self.fail(where, key, f"expected {e.expected}, got {value!r}") from None
        return out


def _workload_id(w: Workload) -> str:
    name = f"c{w.concurrency}-in{w.input_len}-out{w.output_len}"
    if not math.isinf(w.request_rate):
        name += f"-r{w.request_rate:g}"
    return name


def parse_profile(text: str, path: Path) -> Profile:
    """Validate profile TOML text; ``path`` is used in messages and for the default name."""
    ctx = _Ctx(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProfileError(f"profile {path}: not valid TOML: {e}") from None

    for key in raw:
        if key not in _TOP_KEYS:
            raise ctx.unknown("top level", key, dict.fromkeys(_TOP_KEYS))

    for key in ("name", "description"):
        if key in raw and not isinstance(raw[key], str):
            raise ctx.fail("top level", key, f"expected a string, got {raw[key]!r}")

    kinds = [f'"{k}"' for k in get_args(ServerKind)]
    if not isinstance(raw.get("server"), dict):
        raise ctx.fail("[server]", None, f"missing table; add [server] with at least kind = {', '.join(kinds[:-1])} or {kinds[-1]}")
    server_fields = ctx.take("[server]", raw["server"], ServerSpec)
    if "kind" not in server_fields:
        raise ctx.fail("[server]", "kind", f"missing; expected one of {', '.join(kinds)}")
    server = ServerSpec(**server_fields)
    _check_server(ctx, server)

    telemetry_raw = raw.get("telemetry", {})
    if not isinstance(telemetry_raw, dict):
        raise ctx.fail("[telemetry]", None, "expected a table")
    telemetry = TelemetrySpec(**ctx.take("[telemetry]", telemetry_raw, TelemetrySpec))
    if telemetry.source == "dcgm" and not telemetry.dcgm_endpoints:
        raise ctx.fail("[telemetry]", "dcgm_endpoints", 'source = "dcgm" needs at least one endpoint, e.g. ["http://gpu-host:9400/metrics"]')

    gate_raw = raw.get("gate", {})
    if not isinstance(gate_raw, dict):
        raise ctx.fail("[gate]", None, "expected a table")
    gate_fields = ctx.take("[gate]", gate_raw, GateSpec)
    if "tolerance" in gate_fields:
        gate_fields["tolerance"] = {**DEFAULT_TOLERANCE, **gate_fields["tolerance"]}
    gate = GateSpec(**gate_fields)

    must = _and(required(Workload))
    workloads_raw = raw.get("workload")
    if not isinstance(workloads_raw, list) or not workloads_raw:
        raise ctx.fail("[[workload]]", None, f"missing; add at least one [[workload]] table with {must}")
    workloads: list[Workload] = []
    for i, w in enumerate(workloads_raw, start=1):
        where = f"[[workload]] #{i}"
        if not isinstance(w, dict):
            raise ctx.fail(where, None, "expected a table")
        if isinstance(w.get("name"), str):
            where += f" ({w['name']})"
        fields = ctx.take(where, w, Workload)
        for key in required(Workload):
            if key not in fields:
                raise ctx.fail(where, key, f"missing; every workload needs {must}")
        workload = Workload(**{"name": "", **fields})
        if "name" not in fields:
            workload = replace(workload, name=_workload_id(workload))
        if workload.client_processes != "auto" and workload.client_processes > workload.concurrency:
            raise ctx.fail(where, "client_processes", f"{workload.client_processes} processes cannot share concurrency = {workload.concurrency}; every process needs at least one stream (use at most {workload.concurrency})")
        workloads.append(workload)
    if gate.max_repeats is not None:
        for w in workloads:
            repeats = w.repeats if w.repeats is not None else gate.repeats
            if gate.max_repeats < repeats:
                raise ctx.fail("[gate]", "max_repeats", f"{gate.max_repeats} is below the {repeats} repeats of workload {w.name!r}; max_repeats bounds the extra repeats run to decide an inconclusive verdict, so it must be at least the repeats")
    names = [w.name for w in workloads]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ctx.fail("[[workload]]", "name", f"workload names must be unique; {', '.join(dup)} appears more than once (set name = \"...\" to tell them apart)")

    return Profile(
        path=path,
        name=raw.get("name") or path.stem,
        description=raw.get("description", ""),
        server=server,
        telemetry=telemetry,
        workloads=tuple(workloads),
        gate=gate,
    )


def _check_server(ctx: _Ctx, server: ServerSpec) -> None:
    if server.kind == "sglang" and not server.model_path:
        raise ctx.fail("[server]", "model_path", 'kind = "sglang" needs the model to serve, e.g. model_path = "/models/GLM-5-NVFP4"')
    if server.kind == "attach" and not server.base_url:
        raise ctx.fail("[server]", "base_url", 'kind = "attach" needs the running server\'s URL, e.g. base_url = "http://10.0.0.5:30000" (or pass --perf-base-url)')
    if server.kind == "command" and not server.command:
        raise ctx.fail("[server]", "command", 'kind = "command" needs an argv template, e.g. ["vllm", "serve", "{model}", "--port", "{port}"]')
    if server.kind != "simulator" and server.sim:
        raise ctx.fail("[server]", "sim", f'simulator options only apply to kind = "simulator", not {server.kind!r}')
    _check_sim(ctx, server.sim)


def _check_sim(ctx: _Ctx, table: Mapping[str, str | int | float | bool]) -> None:
    """``[server.sim]`` against ``python -m perfgate.sim``'s own options, as the launcher will pass them."""
    options = sim_options()
    settable = {k: o for k, o in options.items() if k not in LAUNCHER_SETS}
    parsed: dict[str, object] = {}
    for key, value in table.items():
        if key in LAUNCHER_SETS:
            raise ctx.fail("[server.sim]", key, f"set by perfgate when it launches the simulator; use [server] {key}")
        if key not in settable:
            raise ctx.unknown("[server.sim]", key, settable)
        try:
            parsed[key] = options[key].parse(option_text(value))
        except ValueError:
            raise ctx.fail("[server.sim]", key, f"expected {options[key].expected}, got {value!r}") from None
    for key, problem in conflicts({**{k: o.default for k, o in options.items()}, **parsed}):
        raise ctx.fail("[server.sim]", key, problem)


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile file; every problem raises ProfileError naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(f"profile {p}: file not found; pass an existing profile with --perf-profile (see profiles/)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(f"profile {p}: cannot be read: {e}") from None
    return parse_profile(text, p)
