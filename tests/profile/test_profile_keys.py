"""Profile keys declared once: the loader, the generated reference and [server.sim] checks."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfgate.errors import ProfileError
from perfgate.load._dataset import DEFAULT_TOKEN_ID_RANGE
from perfgate.profile import (
    CorrectnessSpec,
    ExplainSpec,
    GateSpec,
    Profile,
    ServerSpec,
    TelemetrySpec,
    Workload,
    key_check,
    option_type,
    parse_profile,
)
from perfgate.profile.__main__ import main as profile_main
from perfgate.profile._keys import Bad, Check, checks, key_docs, toml_value
from perfgate.profile._reference import SECTION, reference_markdown
from perfgate.sim._options import sim_options

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / SECTION.page

SIM = """
[server]
kind = "simulator"

[server.sim]
{sim}

[[workload]]
num_prompts = 16
concurrency = 4
input_len = 32
output_len = 8
"""


def parse(text: str) -> Profile:
    return parse_profile(text, Path("profiles/x.toml"))


def sim_error(line: str) -> str:
    with pytest.raises(ProfileError) as err:
        parse(SIM.format(sim=line))
    return str(err.value)


# -- the reference -------------------------------------------------------------------------


def test_the_docs_profile_key_reference_is_the_generated_one():
    assert SECTION.read(PAGE) == reference_markdown(), (
        f"{SECTION.page}'s profile key reference differs from the key declarations; regenerate it with: "
        f"{SECTION.regenerate}"
    )


@pytest.mark.parametrize("spec", [ServerSpec, TelemetrySpec, GateSpec, Workload])
def test_every_field_is_a_declared_key_with_a_doc(spec):
    docs = key_docs(spec)
    assert [d.name for d in docs] == [f.name for f in dataclasses.fields(spec)]
    assert all(d.doc and d.type and d.default for d in docs)


def test_shown_defaults_match_what_the_code_uses():
    token_ids = next(d for d in key_docs(Workload) if d.name == "token_id_range")
    assert token_ids.default == f"`{toml_value(list(DEFAULT_TOKEN_ID_RANGE))}`"


def test_reference_command_prints_and_updates(tmp_path, capsys):
    assert profile_main(["--reference"]) == 0
    assert capsys.readouterr().out == reference_markdown()
    stale = tmp_path / "profiles.md"
    stale.write_text(PAGE.read_text().replace("| `kind` | string |", "| `kind` | str |"))
    assert profile_main(["--reference", "--update", str(stale)]) == 0
    assert "updated" in capsys.readouterr().out
    assert stale.read_text() == PAGE.read_text()
    assert profile_main(["--reference", "--update", str(tmp_path / "missing.md")]) == 2
    assert "missing.md" in capsys.readouterr().err


# -- the loader derives its checks from the declarations --------------------------------------


def test_declared_checks_convert_and_refuse_with_todays_messages():
    port = checks(ServerSpec)["port"]
    assert port.convert(8080) == 8080
    for value, expected in ((-1, "an integer >= 0"), (70000, "a port number 0-65535 (0 picks a free port)")):
        with pytest.raises(ProfileError, match=rf"\[server\] key 'port': expected {re.escape(expected)}, got {value}$"):
            parse(SIM.format(sim="").replace('kind = "simulator"', f'kind = "simulator"\nport = {value}'))


@pytest.mark.parametrize(
    "line, tail",
    [
        ("alpha = 0", "expected a number > 0, got 0"),
        ("alpha = 1.0", "expected a number between 0 and 1 (exclusive), got 1.0"),
        ("repeats = true", "expected an integer >= 1, got True"),
        (
            "tolerance = { mean_tpot_ms = -0.1 }",
            "expected a table of metric = number; 'mean_tpot_ms' must be a number >= 0, got {'mean_tpot_ms': -0.1}",
        ),
        ("client_max_cpu_share = 1e999", "expected a number > 0, got inf"),
        ("repeats = 3\nrepeat = 3", "key 'repeat': unknown key; did you mean 'repeats'?"),
    ],
)
def test_gate_keys(line, tail):
    with pytest.raises(ProfileError) as err:
        parse(SIM.format(sim="") + f"\n[gate]\n{line}\n")
    assert str(err.value).startswith("profile profiles/x.toml: [gate] key ")
    assert str(err.value).endswith(tail)


def test_huge_integer_is_a_profile_error_not_an_overflow():
    text = SIM.format(sim="") + "\n[telemetry]\ninterval_s = " + "9" * 400 + "\n"
    with pytest.raises(ProfileError, match=r"\[telemetry\] key 'interval_s': expected a number >= 0.01, got 9{400}$"):
        parse(text)


# -- every number bounded, one set of bounds for a key and an option -----------------------------

TABLES = (ServerSpec, TelemetrySpec, ExplainSpec, Workload, GateSpec, CorrectnessSpec)
NUMBER_KEYS = [
    (table, name, check)
    for table in TABLES
    for name, check in checks(table).items()
    if check.type.startswith(("number", "integer", "table of metric"))
]


@pytest.mark.parametrize(("table", "name", "check"), NUMBER_KEYS, ids=[f"{t.__name__}.{n}" for t, n, _ in NUMBER_KEYS])
def test_every_number_key_has_an_upper_bound(table: type, name: str, check: Check) -> None:
    # 1e308 seconds crashed a sampling thread (OverflowError) while the run went on and recorded.
    for huge in (1e308, 10**400):
        value = {"output_throughput": huge} if check.type.startswith("table of metric") else huge
        with pytest.raises(Bad):
            check.convert(value)


@pytest.mark.parametrize(
    ("section", "line", "tail"),
    [
        ("[telemetry]", "interval_s = 1e308", "expected a number >= 0.01 and <= 86,400, got 1e+308"),
        (
            "[[workload]]\nnum_prompts = 4\nconcurrency = 4\ninput_len = 8\noutput_len = 8",
            "request_rate = 1e-300",
            'expected a number >= 0.001 or "inf", got 1e-300',
        ),
    ],
)
def test_a_number_no_run_could_have_is_refused_at_load(section: str, line: str, tail: str) -> None:
    # request_rate = 1e-300 made a run whose arrivals never end.
    with pytest.raises(ProfileError) as err:
        parse(SIM.format(sim="") + f"\n{section}\n{line}\n")
    assert str(err.value).endswith(tail)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("x = " + "9" * 5000, "an integer of more digits than Python reads (4,300)"),
        ("x = " + "[" * 100_000 + "]" * 100_000, "nested deeper than the parser can read (at most 64 levels are read)"),
        ("x = " + "{ a = " * 80 + "1" + " }" * 80, "nested 81 levels deep (at most 64 are read)"),
    ],
)
def test_toml_the_parser_cannot_take_is_one_line_naming_the_file(text: str, why: str) -> None:
    with pytest.raises(ProfileError) as err:
        parse(text + "\n" + SIM.format(sim=""))
    assert str(err.value) == f"profile profiles/x.toml: not valid TOML: {why}"


@settings(max_examples=200)
@given(st.one_of(st.integers(-10, 2000), st.floats(allow_nan=True), st.sampled_from(["1e308", "9" * 5000, "x", "inf"])))
def test_an_option_is_bounded_as_the_key_it_overrides(value: object) -> None:
    # --perf-repeats=1000000 was taken while [gate] repeats stops at 1,000.
    check = key_check(GateSpec, "repeats")
    text = str(value)
    try:
        from_option = option_type(check)(text)
    except argparse.ArgumentTypeError as e:
        from_option = str(e)
    try:
        from_key = check.convert(value if not isinstance(value, str) else parse_number(value))
    except Bad as e:
        from_key = f"expected {e.expected}, got {text!r}"
    assert from_option == from_key


def parse_number(text: str) -> object:
    """A value as TOML would give it for ``text`` (an integer, a float, else the text)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


# -- [server.sim] against the simulator's own option declarations -----------------------------


def test_simulator_options_are_accepted_as_the_launcher_passes_them():
    p = parse(SIM.format(sim='time_scale = 0.25\nstream_interval = 4\nzero_cost = true\ndcgm_names = "new"\ngpus = 2'))
    assert dict(p.server.sim) == {
        "time_scale": 0.25,
        "stream_interval": 4,
        "zero_cost": True,
        "dcgm_names": "new",
        "gpus": 2,
    }


def test_misspelt_simulator_option_is_one_line_with_did_you_mean():
    assert sim_error("time_scal = 0.25") == (
        "profile profiles/x.toml: [server.sim] key 'time_scal': unknown key; did you mean 'time_scale'?"
    )


@pytest.mark.parametrize(
    "line, expected",
    [
        ('time_scale = "fast"', "expected a number > 0.0 and <= 1000.0, got 'fast'"),
        ("time_scale = 0", "expected a number > 0.0 and <= 1000.0, got 0"),
        ("time_scale = 1e308", "expected a number > 0.0 and <= 1000.0, got 1e+308"),
        ("startup_delay_s = 1e308", "expected a number >= 0.0 and <= 86400.0, got 1e+308"),
        ("stream_interval = 1.5", "expected an integer from 1 to 10,000,000, got 1.5"),
        ("seed = 0.5", "expected an integer from 0 to 4,294,967,295, got 0.5"),
        ('zero_cost = "maybe"', "expected true or false, got 'maybe'"),
        ('dcgm_names = "old"', "expected one of 'classic', 'new', got 'old'"),
        ("http_error_rate = 2", "expected a number >= 0.0 and <= 1.0, got 2"),
        ("idle_gpus = 3\ngpus = 2", "3 idle GPUs is more than gpus = 2"),
        ("idle_gpus = 9", "9 idle GPUs is more than gpus = 8"),
        ("port = 30000", "set by perfgate when it launches the simulator; use [server] port"),
    ],
)
def test_bad_simulator_option_says_what_the_simulator_expects(line, expected):
    message = sim_error(line)
    assert message.startswith("profile profiles/x.toml: [server.sim] key ") and message.endswith(expected)
    assert "\n" not in message


def test_every_simulator_option_has_what_it_expects():
    options = sim_options()
    assert {"time_scale", "idle_gpus", "fail_at_startup", "dcgm_names"} <= set(options)
    assert all(o.expected for o in options.values())


def test_profile_load_checks_sim_keys_without_the_simulator_server():
    code = (
        "import sys; from perfgate.profile import load_profile; "
        "load_profile('profiles/sim-glm5.toml'); "
        "print(sorted(m for m in sys.modules if m.startswith(('aiohttp', 'perfgate.sim._server', "
        "'perfgate.sim._app'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# -- fuzz: a Profile or a ProfileError with one line, never another exception ----------------

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-2, max_value=70000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1, max_value=2),
    st.text(max_size=10),
    st.sampled_from(
        [
            "inf",
            "",
            "sglang",
            "simulator",
            "attach",
            "command",
            "auto",
            "nvml",
            "dcgm",
            "none",
            "poisson",
            "constant",
            "openai-chat",
            "http://127.0.0.1:1",
            "GPU-1",
            "{base_url}/m",
            "true",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=10,
)

TABLE_KEYS = {
    "server": sorted(checks(ServerSpec)),
    "telemetry": sorted(checks(TelemetrySpec)),
    "gate": sorted(checks(GateSpec)),
    "workload": sorted(checks(Workload)),
    "sim": sorted(sim_options()),
    "top": ["name", "description", "server", "telemetry", "gate", "workload"],
}


def base() -> dict:
    return {
        "server": {"kind": "simulator", "sim": {"time_scale": 0.25}},
        "telemetry": {"source": "auto"},
        "gate": {"repeats": 3},
        "workload": [{"num_prompts": 16, "concurrency": 4, "input_len": 32, "output_len": 8}],
    }


@st.composite
def raw_profiles(draw) -> dict:
    if draw(st.booleans()) and draw(st.booleans()):
        return draw(st.dictionaries(st.sampled_from(TABLE_KEYS["top"]) | st.text(max_size=8), values, max_size=5))
    raw = base()
    for _ in range(draw(st.integers(1, 4))):
        table = draw(st.sampled_from(sorted(TABLE_KEYS)))
        key = draw(st.sampled_from(TABLE_KEYS[table]) | st.text(max_size=10))
        value = draw(values)
        target = raw if table == "top" else raw.get(table)
        if table == "workload":
            target = target[0] if isinstance(target, list) and target else None
        elif table == "sim":
            server = raw.get("server")
            target = server.setdefault("sim", {}) if isinstance(server, dict) else None
        if isinstance(target, dict):
            if draw(st.booleans()) or key not in target:
                target[key] = value
            else:
                del target[key]
    return raw


def toml(raw: dict) -> str:
    """``raw`` as TOML text: one ``"key" = value`` line per top-level key, inline tables below."""

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, float):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {value(x)}" for k, x in v.items()) + "}"

    return "".join(f"{json.dumps(k, ensure_ascii=False)} = {value(v)}\n" for k, v in raw.items())


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(raw_profiles())
def test_fuzzed_profiles_load_or_fail_with_one_clear_line(raw):
    try:
        profile = parse_profile(toml(raw), Path("profiles/fuzz.toml"))
    except ProfileError as err:
        message = str(err)
        assert message.startswith("profile profiles/fuzz.toml: ") and len(message) > len("profile profiles/fuzz.toml: ")
        assert "\n" not in message
    else:
        assert isinstance(profile, Profile) and profile.workloads
