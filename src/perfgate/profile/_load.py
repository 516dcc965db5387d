"""Read and validate a profile TOML file.

Validation is table-driven: each table lists its keys with a checker that returns the converted
value or raises ``_Bad(expected)``. Errors collect the file, the table path and the key so the
message alone tells the user where to look.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfgate.errors import ProfileError
from perfgate.profile._model import (
    DEFAULT_TOLERANCE,
    GateSpec,
    Profile,
    ServerSpec,
    TelemetrySpec,
    Workload,
)


class _Bad(Exception):
    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


Checker = Callable[[Any], Any]


def _int(min_value: int | None = None) -> Checker:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or (min_value is not None and v < min_value):
            raise _Bad(f"an integer >= {min_value}" if min_value is not None else "an integer")
        return v

    return check


def _float(min_value: float | None = None, *, allow_inf: bool = False, strict_min: bool = False) -> Checker:
    def check(v: Any) -> float:
        desc = "a number"
        if min_value is not None:
            desc += f" {'>' if strict_min else '>='} {min_value:g}"
        if allow_inf:
            desc += ' or "inf"'
        if allow_inf and isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
            return math.inf
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise _Bad(desc)
        f = float(v)
        if math.isinf(f) and not allow_inf:
            raise _Bad(desc)
        if min_value is not None and (f < min_value or (strict_min and f == min_value)):
            raise _Bad(desc)
        return f

    return check


def _ratio(v: Any) -> float:
    f = _float(0.0)(v)
    if f > 1.0:
        raise _Bad("a number between 0 and 1")
    return f


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise _Bad("a string")
    return v


def _nonempty_str(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise _Bad("a non-empty string")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Bad("true or false")
    return v


def _choice(*options: str) -> Checker:
    def check(v: Any) -> str:
        if v not in options:
            raise _Bad("one of " + ", ".join(repr(o) for o in options))
        return v

    return check


def _str_list(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _Bad("a list of strings")
    return tuple(v)


def _gpu_list(v: Any) -> tuple[int | str, ...]:
    ok = isinstance(v, list) and all(
        (isinstance(x, int) and not isinstance(x, bool) and x >= 0) or (isinstance(x, str) and x.strip())
        for x in v
    )
    if not ok:
        raise _Bad('a list of GPU indices (integers >= 0) or UUIDs ("GPU-...")')
    if len(set(v)) != len(v):
        raise _Bad("a list without repeated GPUs")
    return tuple(v)


def _id_range(v: Any) -> tuple[int, int]:
    ok = (
        isinstance(v, list)
        and len(v) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v)
        and v[0] < v[1]
    )
    if not ok:
        raise _Bad("[lo, hi] with 0 <= lo < hi (token ids are drawn from lo to hi - 1)")
    return (v[0], v[1])


def _str_map(v: Any) -> dict[str, str]:
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        raise _Bad("a table of string values")
    return dict(v)


def _scalar_map(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict) or not all(isinstance(x, (str, int, float, bool)) for x in v.values()):
        raise _Bad("a table of strings, numbers or booleans")
    return dict(v)


def _table(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Bad("a table")
    return dict(v)


def _metric_map(min_value: float | None = None) -> Checker:
    def check(v: Any) -> dict[str, float]:
        if not isinstance(v, dict):
            raise _Bad("a table of metric = number")
        out = {}
        for k, x in v.items():
            try:
                out[k] = _float(min_value)(x)
            except _Bad as e:
                raise _Bad(f"a table of metric = number; {k!r} must be {e.expected}") from None
        return out

    return check


_SERVER_KEYS: dict[str, Checker] = {
    "kind": _choice("sglang", "simulator", "attach", "command"),
    "model_path": _str,
    "args": _str_list,
    "env": _str_map,
    "gpus": _gpu_list,
    "host": _nonempty_str,
    "port": _int(0),
    "startup_timeout_s": _float(0.0, strict_min=True),
    "shutdown_timeout_s": _float(0.0, strict_min=True),
    "python": _str,
    "base_url": _str,
    "ready_path": _nonempty_str,
    "command": _str_list,
    "flashinfer_cutlass_autotune": _choice("auto", "force", "off"),
    "require_autotune": _bool,
    "api_key_env": _str,
    "admin_api_key_env": _str,
    "sim": _scalar_map,
}

_TELEMETRY_KEYS: dict[str, Checker] = {
    "source": _choice("auto", "nvml", "dcgm", "none"),
    "dcgm_endpoints": _str_list,
    "interval_s": _float(0.01),
    "counter_period_s": _float(0.1),
    "require_power": _bool,
}

_WORKLOAD_KEYS: dict[str, Checker] = {
    "name": _nonempty_str,
    "num_prompts": _int(1),
    "concurrency": _int(1),
    "input_len": _int(1),
    "output_len": _int(1),
    "request_rate": _float(0.0, allow_inf=True, strict_min=True),
    "warmup_requests": _int(0),
    "backend": _choice("sglang", "openai-completions", "openai-chat"),
    "ignore_eos": _bool,
    "range_ratio": _ratio,
    "seed": _int(0),
    "flush_cache": _bool,
    "pacing": _choice("poisson", "constant"),
    "max_error_rate": _ratio,
    "repeats": _int(1),
    "token_id_range": _id_range,
    "stall_timeout_s": _float(0.0, strict_min=True),
    "client_processes": _int(1),
    "extra_body": _table,
    "floors": _metric_map(),
    "ceilings": _metric_map(),
    "tolerance": _metric_map(0.0),
}

_GATE_KEYS: dict[str, Checker] = {
    "repeats": _int(1),
    "require_baseline": _bool,
    "tolerance": _metric_map(0.0),
    "floors": _metric_map(),
    "ceilings": _metric_map(),
    "alpha": _float(0.0, strict_min=True),
    "confirm_on_fail": _bool,
    "client_max_lag_p99_ms": _float(0.0, strict_min=True),
    "client_max_cpu_share": _float(0.0, strict_min=True),
}

_TOP_KEYS = {"name", "description", "server", "telemetry", "workload", "gate"}
_REQUIRED_WORKLOAD = ("num_prompts", "concurrency", "input_len", "output_len")


class _Ctx:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, key: str | None, message: str) -> ProfileError:
        loc = f"{where} key {key!r}" if key else where
        return ProfileError(f"profile {self.path}: {loc}: {message}")

    def take(self, where: str, raw: Mapping[str, Any], keys: Mapping[str, Checker]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in keys:
                hint = difflib.get_close_matches(key, list(keys), n=1)
                did = f"; did you mean {hint[0]!r}?" if hint else f"; known keys: {', '.join(sorted(keys))}"
                raise self.fail(where, key, f"unknown key{did}")
            try:
                out[key] = keys[key](value)
            except _Bad as e:
                raise self.fail(where, key, f"expected {e.expected}, got {value!r}") from None
        return out


def _workload_id(fields: Mapping[str, Any]) -> str:
    name = f"c{fields['concurrency']}-in{fields['input_len']}-out{fields['output_len']}"
    rate = fields.get("request_rate", math.inf)
    if not math.isinf(rate):
        name += f"-r{rate:g}"
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
            hint = difflib.get_close_matches(key, list(_TOP_KEYS), n=1)
            did = f"; did you mean {hint[0]!r}?" if hint else ""
            raise ctx.fail("top level", key, f"unknown key{did}")

    for key in ("name", "description"):
        if key in raw and not isinstance(raw[key], str):
            raise ctx.fail("top level", key, f"expected a string, got {raw[key]!r}")

    if not isinstance(raw.get("server"), dict):
        raise ctx.fail("[server]", None, "missing table; add [server] with at least kind = \"sglang\", \"simulator\", \"attach\" or \"command\"")
    server_fields = ctx.take("[server]", raw["server"], _SERVER_KEYS)
    if "kind" not in server_fields:
        raise ctx.fail("[server]", "kind", 'missing; expected one of "sglang", "simulator", "attach", "command"')
    server = ServerSpec(**server_fields)
    _check_server(ctx, server)

    telemetry_raw = raw.get("telemetry", {})
    if not isinstance(telemetry_raw, dict):
        raise ctx.fail("[telemetry]", None, "expected a table")
    telemetry = TelemetrySpec(**ctx.take("[telemetry]", telemetry_raw, _TELEMETRY_KEYS))
    if telemetry.source == "dcgm" and not telemetry.dcgm_endpoints:
        raise ctx.fail("[telemetry]", "dcgm_endpoints", 'source = "dcgm" needs at least one endpoint, e.g. ["http://gpu-host:9400/metrics"]')

    gate_raw = raw.get("gate", {})
    if not isinstance(gate_raw, dict):
        raise ctx.fail("[gate]", None, "expected a table")
    gate_fields = ctx.take("[gate]", gate_raw, _GATE_KEYS)
    if "tolerance" in gate_fields:
        gate_fields["tolerance"] = {**DEFAULT_TOLERANCE, **gate_fields["tolerance"]}
    gate = GateSpec(**gate_fields)
    if gate.alpha >= 1.0:
        raise ctx.fail("[gate]", "alpha", f"expected a number between 0 and 1 (exclusive), got {gate.alpha!r}")

    workloads_raw = raw.get("workload")
    if not isinstance(workloads_raw, list) or not workloads_raw:
        raise ctx.fail("[[workload]]", None, "missing; add at least one [[workload]] table with num_prompts, concurrency, input_len and output_len")
    workloads: list[Workload] = []
    for i, w in enumerate(workloads_raw, start=1):
        where = f"[[workload]] #{i}"
        if not isinstance(w, dict):
            raise ctx.fail(where, None, "expected a table")
        if isinstance(w.get("name"), str):
            where += f" ({w['name']})"
        fields = ctx.take(where, w, _WORKLOAD_KEYS)
        for key in _REQUIRED_WORKLOAD:
            if key not in fields:
                raise ctx.fail(where, key, "missing; every workload needs num_prompts, concurrency, input_len and output_len")
        fields.setdefault("name", _workload_id(fields))
        if fields.get("client_processes", 1) > fields["concurrency"]:
            raise ctx.fail(where, "client_processes", f"{fields['client_processes']} processes cannot share concurrency = {fields['concurrency']}; every process needs at least one stream (use at most {fields['concurrency']})")
        workloads.append(Workload(**fields))
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
    if server.base_url and not server.base_url.startswith(("http://", "https://")):
        raise ctx.fail("[server]", "base_url", f"expected an http:// or https:// URL, got {server.base_url!r}")
    if server.port > 65535:
        raise ctx.fail("[server]", "port", f"expected a port number 0-65535 (0 picks a free port), got {server.port}")


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
