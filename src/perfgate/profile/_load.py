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
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

from perfgate import _toml, catalogue
from perfgate._files import read_named
from perfgate._names import collision_keys, file_stem, name_problem
from perfgate._redact import without_userinfo
from perfgate.errors import ProfileError
from perfgate.profile._keys import Bad, Check, checks, required
from perfgate.profile._model import (
    DEFAULT_TOLERANCE,
    PROBED_BY_DEFAULT,
    CorrectnessSpec,
    ExplainSpec,
    GateSpec,
    Profile,
    ServerKind,
    ServerSpec,
    Sweep,
    TelemetrySpec,
    Workload,
)

# The simulator's option declarations, not its server: perfgate.sim imports no stage of
# perfgate, so this is no upward import, and nothing HTTP-related loads with a profile.
from perfgate.sim import LAUNCHER_SETS, conflicts, option_text, sim_options

_TOP_KEYS = {"name", "description", "server", "telemetry", "workload", "gate", "correctness", "explain"}


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
                raise self.fail(where, key, f"expected {e.expected}, got {without_userinfo(repr(value))}") from None
        return out


def _workload_id(w: Workload, concurrency: str) -> str:
    """The default name: what is sent and at which load, e.g. ``c64-sp8x1024-in128-out256``."""
    if w.dataset == "sharegpt":
        shape = "sharegpt" + (f"-out{w.output_len}" if w.output_len else "")
    else:
        mean_in = w.input_len if w.input_len is not None else round(w.input_len_distribution.mean())  # type: ignore[union-attr]
        prefix = f"sp{w.num_groups}x{w.system_prompt_len}-" if w.dataset == "shared-prefix" else ""
        if w.dataset == "multi-turn":
            prefix = f"mt{w.num_turns}-"
        shape = f"{prefix}in{mean_in}-out{w.output_len}"
    name = f"c{concurrency}-{shape}"
    if isinstance(w.request_rate, tuple):
        name += f"-r{w.request_rate[0]:g}-{w.request_rate[-1]:g}"
    elif not math.isinf(w.request_rate):
        name += f"-r{w.request_rate:g}"
    return name


# Keys that only mean something for some datasets: given for another, they would be ignored.
_DATASET_KEYS: dict[str, tuple[str, ...]] = {
    "system_prompt_len": ("shared-prefix",),
    "num_groups": ("shared-prefix",),
    "dataset_path": ("sharegpt",),
    "context_len": ("sharegpt",),
    "tokenize": ("sharegpt",),
    "input_len": ("random", "shared-prefix", "multi-turn"),
    "input_len_distribution": ("random", "shared-prefix", "multi-turn"),
    "output_len_distribution": ("random", "shared-prefix", "multi-turn"),
    "num_turns": ("multi-turn",),
    "think_time_s": ("multi-turn",),
}


def _check_warmup(ctx: _Ctx, where: str, fields: dict[str, Any]) -> None:
    if fields.get("warmup", "requests") != "steady":
        for key in ("warmup_tolerance", "warmup_max_s"):
            if key in fields:
                raise ctx.fail(where, key, 'applies to warmup = "steady" only; remove it or set warmup = "steady"')
        return
    rounds = fields.get("warmup_requests", 1)
    concurrency = fields.get("concurrency")
    # A sweep's concurrency is a list: its largest load must also be reached by a round.
    most = max(concurrency) if isinstance(concurrency, (list, tuple)) else concurrency
    if isinstance(most, (int, float)) and rounds < most:
        raise ctx.fail(
            where,
            "warmup_requests",
            f'{rounds} is below concurrency {most:g}: with warmup = "steady" each round of warmup_requests requests '
            f"must run at the workload's concurrency; set warmup_requests >= {most:g} (twice that is a good round)",
        )


def _check_dataset(ctx: _Ctx, where: str, fields: dict[str, Any]) -> None:
    dataset = fields.get("dataset", "random")
    for key, datasets in _DATASET_KEYS.items():
        if key in fields and dataset not in datasets:
            names = " or ".join(f'"{d}"' for d in datasets)
            raise ctx.fail(where, key, f'applies to dataset = {names}, not "{dataset}"; remove it')
    hist = fields.get("input_len_distribution")
    if dataset == "sharegpt":
        if not fields.get("dataset_path"):
            raise ctx.fail(
                where,
                "dataset_path",
                'missing; dataset = "sharegpt" needs the local ShareGPT JSON file, e.g. dataset_path = '
                '"data/sharegpt.json"',
            )
        return
    if hist is not None and hist.kind == "histogram":
        if "input_len" in fields:
            raise ctx.fail(
                where,
                "input_len",
                "conflicts with input_len_distribution of kind histogram, whose bins give the lengths; "
                "remove input_len",
            )
    elif "input_len" not in fields:
        raise ctx.fail(where, "input_len", f'missing; dataset = "{dataset}" needs input_len and output_len')
    if "output_len" not in fields:
        raise ctx.fail(where, "output_len", f'missing; dataset = "{dataset}" needs input_len and output_len')
    out_hist = fields.get("output_len_distribution")
    if out_hist is not None and out_hist.kind == "histogram":
        raise ctx.fail(
            where,
            "output_len_distribution",
            "a histogram gives prompt lengths only (input_len_distribution); use normal or lognormal around output_len",
        )
    for side in ("input", "output"):
        dist, mean = fields.get(f"{side}_len_distribution"), fields.get(f"{side}_len")
        if (
            dist is not None
            and dist.kind != "histogram"
            and mean is not None
            and not (dist.min <= mean <= (dist.max or mean))
        ):
            bounds = f"[{dist.min}, {dist.max if dist.max is not None else 'no max'}]"
            raise ctx.fail(
                where,
                f"{side}_len_distribution",
                f"the mean {side}_len = {mean} lies outside min and max {bounds}; widen them or move the mean",
            )
    if dataset == "shared-prefix" and "system_prompt_len" not in fields:
        raise ctx.fail(
            where,
            "system_prompt_len",
            'missing; dataset = "shared-prefix" needs system_prompt_len (tokens of each group\'s shared system prompt)',
        )
    if dataset == "multi-turn":
        turns = fields.get("num_turns")
        if turns is None:
            raise ctx.fail(
                where,
                "num_turns",
                'missing; dataset = "multi-turn" needs num_turns (requests per chat session), e.g. num_turns = 4',
            )
        prompts = fields.get("num_prompts")
        if isinstance(prompts, int) and prompts % turns:
            raise ctx.fail(
                where,
                "num_prompts",
                f"{prompts} is not a multiple of num_turns = {turns}: every chat session runs all its turns; use "
                f"e.g. num_prompts = {max(1, prompts // turns) * turns}",
            )


def _expand(ctx: _Ctx, where: str, fields: dict[str, Any]) -> tuple[list[Workload], Sweep | None]:
    """The workload of ``fields``; a concurrency or request_rate list is a sweep of point workloads."""
    concurrency, rate = fields["concurrency"], fields.get("request_rate", math.inf)
    if isinstance(concurrency, tuple) and isinstance(rate, tuple):
        raise ctx.fail(
            where,
            "request_rate",
            "a sweep varies one load at a time: give a list for concurrency or for request_rate, not both",
        )
    axis = "concurrency" if isinstance(concurrency, tuple) else "request_rate" if isinstance(rate, tuple) else ""
    loads: tuple[float, ...] = concurrency if axis == "concurrency" else rate if axis else ()
    first = {**fields, axis: loads[0]} if axis else fields
    shown_c = f"{concurrency[0]}-{concurrency[-1]}" if axis == "concurrency" else str(concurrency)
    base = Workload(**{"name": "", **first})
    if "name" not in fields:
        base = replace(base, name=_workload_id(replace(base, request_rate=rate), shown_c))
    if not axis:
        if base.concurrency > base.num_prompts:
            raise ctx.fail(
                where,
                "concurrency",
                f"{base.concurrency} is more than num_prompts = {base.num_prompts}: at most num_prompts requests can "
                "be in flight, so the load asked for is never reached; raise num_prompts or lower concurrency",
            )
        if base.client_processes != "auto" and base.client_processes > base.concurrency:
            raise ctx.fail(
                where,
                "client_processes",
                f"{base.client_processes} processes cannot share concurrency = {base.concurrency}; every process "
                f"needs at least one stream (use at most {base.concurrency})",
            )
        for key in ("capacity_percentile", "capacity_bisect_steps"):
            if key in fields:
                raise ctx.fail(where, key, "applies to sweeps only (concurrency = [...] or request_rate = [...])")
        return [base], None
    if base.slo is None:
        raise ctx.fail(
            where,
            "slo",
            f"missing; a sweep over {axis} finds the highest load that meets the SLO: add e.g. slo = "
            f"{{ ttft_ms = 2000, tpot_ms = 100 }}",
        )
    if axis == "concurrency" and loads[-1] > base.num_prompts:
        raise ctx.fail(
            where,
            "concurrency",
            f"{loads[-1]:g} is more than num_prompts = {base.num_prompts}: at most num_prompts requests can be in "
            "flight, so loads beyond it repeat the same run; raise num_prompts or drop those loads",
        )
    if base.client_processes != "auto" and base.client_processes > min(loads):
        raise ctx.fail(
            where,
            "client_processes",
            f"{base.client_processes} processes cannot share concurrency = {min(loads):g} at the sweep's first "
            f"point; use at most {min(loads):g}",
        )
    sweep = Sweep(name=base.name, axis=axis, loads=loads, points=(), base=base)  # type: ignore[arg-type]
    points = [sweep.point(load) for load in loads]
    return points, replace(sweep, points=tuple(p.name for p in points))


def parse_profile(text: str, path: Path) -> Profile:
    """Validate profile TOML text; ``path`` is used in messages and for the default name."""
    ctx = _Ctx(path)
    try:
        raw = _toml.loads(text)
    except _toml.TOMLDecodeError as e:
        raise ProfileError(f"profile {path}: not valid TOML: {e}") from None

    for key in raw:
        if key not in _TOP_KEYS:
            raise ctx.unknown("top level", key, dict.fromkeys(_TOP_KEYS))

    for key in ("name", "description"):
        if key in raw and not isinstance(raw[key], str):
            raise ctx.fail("top level", key, f"expected a string, got {raw[key]!r}")

    kinds = [f'"{k}"' for k in get_args(ServerKind)]
    if not isinstance(raw.get("server"), dict):
        raise ctx.fail(
            "[server]", None, f"missing table; add [server] with at least kind = {', '.join(kinds[:-1])} or {kinds[-1]}"
        )
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
        raise ctx.fail(
            "[telemetry]",
            "dcgm_endpoints",
            'source = "dcgm" needs at least one endpoint, e.g. ["http://gpu-host:9400/metrics"]',
        )

    explain_raw = raw.get("explain", {})
    if not isinstance(explain_raw, dict):
        raise ctx.fail("[explain]", None, "expected a table")
    explain = ExplainSpec(**ctx.take("[explain]", explain_raw, ExplainSpec))

    gate_raw = raw.get("gate", {})
    if not isinstance(gate_raw, dict):
        raise ctx.fail("[gate]", None, "expected a table")
    gate_fields = ctx.take("[gate]", gate_raw, GateSpec)
    if "tolerance" in gate_fields:
        gate_fields["tolerance"] = {**DEFAULT_TOLERANCE, **gate_fields["tolerance"]}
    gate = GateSpec(**gate_fields)
    _check_gate_metrics(ctx, gate)
    correctness = _correctness(ctx, raw.get("correctness", {}), server)

    must = _and(required(Workload))
    workloads_raw = raw.get("workload")
    if not isinstance(workloads_raw, list) or not workloads_raw:
        raise ctx.fail(
            "[[workload]]", None, f"missing; add at least one [[workload]] table with {must}, input_len and output_len"
        )
    workloads: list[Workload] = []
    sweeps: list[Sweep] = []
    where_of: dict[str, str] = {}
    for i, w in enumerate(workloads_raw, start=1):
        where = f"[[workload]] #{i}"
        if not isinstance(w, dict):
            raise ctx.fail(where, None, "expected a table")
        if isinstance(w.get("name"), str):
            _check_name(ctx, where, "name", w["name"])
            where += f" ({w['name']})"
        fields = ctx.take(where, w, Workload)
        for key in required(Workload):
            if key not in fields:
                raise ctx.fail(where, key, f"missing; every workload needs {must}")
        _check_dataset(ctx, where, fields)
        _check_warmup(ctx, where, fields)
        points, sweep = _expand(ctx, where, fields)
        workloads += points
        if sweep is not None:
            sweeps.append(sweep)
        where_of.update(dict.fromkeys([p.name for p in points] + ([sweep.name] if sweep else []), where))
    if gate.max_repeats is not None:
        for w in workloads:
            repeats = w.repeats if w.repeats is not None else gate.repeats
            if gate.max_repeats < repeats:
                raise ctx.fail(
                    "[gate]",
                    "max_repeats",
                    f"{gate.max_repeats} is below the {repeats} repeats of workload {w.name!r}; max_repeats bounds "
                    "the extra repeats run to decide an inconclusive verdict, so it must be at least the repeats",
                )
    names = [w.name for w in workloads]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ctx.fail(
            "[[workload]]",
            "name",
            f'workload names must be unique; {", ".join(dup)} appears more than once (set name = "..." to tell '
            "them apart)",
        )
    if "correctness" in names:
        raise ctx.fail(
            "[[workload]]",
            "name",
            "'correctness' is the correctness probe's name (its test, its baseline file); name the workload otherwise",
        )
    taken = sorted({s.name for s in sweeps} & set(names))
    if taken:
        raise ctx.fail(
            "[[workload]]",
            "name",
            f"{taken[0]!r} names both a sweep and a workload; sweeps and workloads share one namespace (baselines, "
            "test ids)",
        )
    # Derived names (c16-in32-out16, sweep points name@c16) are checked here, given ones also above.
    for name, where in where_of.items():
        _check_name(ctx, where, "name", name)
    _check_collisions(ctx, where_of)
    profile_name = raw.get("name") or path.stem
    derived = "" if raw.get("name") else f"taken from the file name {path.name!r}, "
    _check_name(ctx, "top level", "name", profile_name, derived=derived)

    return Profile(
        path=path,
        name=profile_name,
        description=raw.get("description", ""),
        server=server,
        telemetry=telemetry,
        workloads=tuple(workloads),
        gate=gate,
        sweeps=tuple(sweeps),
        correctness=correctness,
        explain=explain,
    )


def _check_gate_metrics(ctx: _Ctx, gate: GateSpec) -> None:
    """The probe's metrics are held to absolute limits of their own: in [gate] they would gate nothing."""
    for table in ("tolerance", "floors", "ceilings"):
        for name in getattr(gate, table):
            m = catalogue.METRICS.get(name)
            if m is not None and m.category == "correctness":
                raise ctx.fail(
                    "[gate]",
                    table,
                    f"{name} is a correctness probe metric; set its limit in [correctness] limits = {{ {name} = ... }}",
                )


def _correctness(ctx: _Ctx, raw: Any, server: ServerSpec) -> CorrectnessSpec:
    where = "[correctness]"
    if not isinstance(raw, dict):
        raise ctx.fail(where, None, "expected a table")
    spec = CorrectnessSpec(**ctx.take(where, raw, CorrectnessSpec))
    if spec.enabled is False and server.kind in PROBED_BY_DEFAULT and not spec.reason.strip():
        raise ctx.fail(
            where,
            "enabled",
            f'the correctness probe is on by default for kind = "{server.kind}"; turning it off needs '
            'reason = "why" (a gate without it passes a fast server that computes the wrong thing)',
        )
    if not spec.score and not spec.reason.strip():
        raise ctx.fail(
            where,
            "score",
            'score = false leaves the greedy view only (a prefill-only bug goes unseen); it needs reason = "why"',
        )
    for name in spec.limits:
        m = catalogue.METRICS.get(name)
        if m is None or m.category != "correctness":
            known = ", ".join(n for n, x in catalogue.METRICS.items() if x.category == "correctness")
            raise ctx.fail(where, "limits", f"{name!r} is not a correctness metric; known: {known}")
    if spec.duplicates > spec.prompts:
        raise ctx.fail(
            where, "duplicates", f"{spec.duplicates} is more than the {spec.prompts} prompts; at most prompts"
        )
    return spec


_NAME_ADVICE = (
    'use letters of any script, digits, ".", "_", "-" (e.g. name = "chat-c64"); names become file names '
    "of baselines, results and plots"
)


def _check_name(ctx: _Ctx, where: str, key: str, name: str, derived: str = "") -> None:
    """Refuse a name that cannot become a file name as it is (see perfgate._names)."""
    problem = name_problem(name)
    if problem is not None:
        set_it = 'set name = "..." at the top level; ' if derived else ""
        raise ctx.fail(where, key, f"{name!r} {derived}{problem}; {set_it}{_NAME_ADVICE}")


def _check_collisions(ctx: _Ctx, where_of: Mapping[str, str]) -> None:
    """Two names of one profile must not share a file, on any file system, nor look alike."""
    seen: dict[tuple[int, str], str] = {}
    for name, where in where_of.items():
        stored_as, read_as = collision_keys(name)
        for key, how in (
            ((0, stored_as), f"would share the file name {file_stem(name)!r} (case is ignored on macOS)"),
            ((1, read_as), "differ only in case or Unicode normalisation (NFC vs NFD) and read alike"),
        ):
            other = seen.setdefault(key, name)
            if other != name:
                raise ctx.fail(
                    where,
                    "name",
                    f"{name!r} and {other!r} (at {where_of[other]}) {how}; rename one of them "
                    "(sweeps and workloads share one namespace)",
                )


def _check_server(ctx: _Ctx, server: ServerSpec) -> None:
    if server.kind == "sglang" and not server.model_path:
        raise ctx.fail(
            "[server]",
            "model_path",
            'kind = "sglang" needs the model to serve, e.g. model_path = "/models/GLM-5-NVFP4"',
        )
    if server.kind == "attach" and not server.base_url:
        raise ctx.fail(
            "[server]",
            "base_url",
            'kind = "attach" needs the running server\'s URL, e.g. base_url = "http://10.0.0.5:30000" (or pass '
            "--perf-base-url)",
        )
    if server.kind == "command" and not server.command:
        raise ctx.fail(
            "[server]",
            "command",
            'kind = "command" needs an argv template, e.g. ["vllm", "serve", "{model}", "--port", "{port}"]',
        )
    if server.kind == "attach" and server.cpu_affinity:
        raise ctx.fail(
            "[server]",
            "cpu_affinity",
            'kind = "attach" connects to a server perfgate did not start, so perfgate cannot place it on CPUs; '
            "remove cpu_affinity and pin the server where it is started (e.g. taskset -c 0-7 ...)",
        )
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
    text = read_named(
        p,
        "profile",
        ProfileError,
        missing="pass an existing profile with --perf-profile (see profiles/)",
        not_a_file="pass a profile TOML file with --perf-profile (see profiles/)",
    )
    return parse_profile(text, p)
