import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.errors import ProfileError
from perfgate.profile import load_profile, parse_profile

REPO = Path(__file__).resolve().parents[2]

MINIMAL = """
[server]
kind = "simulator"

[[workload]]
num_prompts = 16
concurrency = 4
input_len = 32
output_len = 8
"""


def parse(text: str):
    return parse_profile(text, Path("profiles/x.toml"))


def test_minimal_profile_gets_defaults_and_readable_id():
    p = parse(MINIMAL)
    assert p.name == "x"
    assert p.server.kind == "simulator"
    (w,) = p.workloads
    assert w.name == "c4-in32-out8"
    assert math.isinf(w.request_rate)
    assert w.backend == "sglang" and w.ignore_eos
    assert p.gate.tolerance["output_throughput"] > 0
    assert p.repeats_for(w) == p.gate.repeats


def test_client_processes_default_to_one_and_accept_up_to_concurrency():
    assert parse(MINIMAL).workloads[0].client_processes == 1
    assert (
        parse(MINIMAL.replace("output_len = 8", "output_len = 8\nclient_processes = 4")).workloads[0].client_processes
        == 4
    )
    auto = parse(MINIMAL.replace("output_len = 8", 'output_len = 8\nclient_processes = "auto"'))
    assert auto.workloads[0].client_processes == "auto"


def test_finite_rate_is_part_of_the_id():
    p = parse(MINIMAL.replace("output_len = 8", "output_len = 8\nrequest_rate = 12.5"))
    assert p.workloads[0].name == "c4-in32-out8-r12.5"


@pytest.mark.parametrize(
    "mutation, fragments",
    [
        (("concurrency = 4", "concurrency = 0"), ["[[workload]] #1", "'concurrency'", "integer >= 1", "got 0"]),
        (("concurrency = 4", "concurency = 4"), ["'concurency'", "did you mean 'concurrency'"]),
        (("concurrency = 4", 'concurrency = "4"'), ["'concurrency'", "got '4'"]),
        (('kind = "simulator"', 'kind = "sglang-ish"'), ["[server]", "'kind'", "'sglang'"]),
        (('kind = "simulator"', 'kind = "sglang"'), ["'model_path'", "needs the model"]),
        (('kind = "simulator"', 'kind = "attach"'), ["'base_url'", "--perf-base-url"]),
        (("output_len = 8", "output_len = 8\nrequest_rate = -1"), ["'request_rate'", '"inf"']),
        (("output_len = 8", "output_len = 8\nrange_ratio = 1.5"), ["'range_ratio'", "between 0 and 1"]),
        (("output_len = 8", "output_len = 8\ntoken_id_range = [5, 5]"), ["'token_id_range'", "lo < hi"]),
        (("[server]", "[servr]\n[server]"), ["top level", "'servr'", "did you mean 'server'"]),
        (("output_len = 8", ""), ["'output_len'", "missing"]),
        (("output_len = 8", "output_len = 8\n[gate]\nalpha = 2"), ["[gate]", "'alpha'", "between 0 and 1"]),
        (("kind", "= broken"), ["not valid TOML"]),
        (
            ("output_len = 8", "output_len = 8\nclient_processes = 0"),
            ["'client_processes'", 'integer >= 1 or "auto"', "got 0"],
        ),
        (
            ("output_len = 8", 'output_len = 8\nclient_processes = "many"'),
            ["'client_processes'", 'or "auto"', "got 'many'"],
        ),
        (
            ("output_len = 8", "output_len = 8\nclient_processes = 5"),
            ["'client_processes'", "concurrency = 4", "at most 4"],
        ),
    ],
)
def test_bad_profiles_name_file_key_and_expectation(mutation, fragments):
    old, new = mutation
    with pytest.raises(ProfileError) as exc:
        parse(MINIMAL.replace(old, new, 1))
    msg = str(exc.value)
    assert msg.startswith("profile profiles/x.toml:")
    for f in fragments:
        assert f in msg


def test_duplicate_workload_names_are_rejected():
    text = MINIMAL + MINIMAL.split('[server]\nkind = "simulator"\n', 1)[1]
    with pytest.raises(ProfileError, match="appears more than once"):
        parse(text)


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(ProfileError, match="file not found; pass an existing profile with --perf-profile"):
        load_profile(tmp_path / "nope.toml")


def test_workload_tolerance_merges_over_gate_defaults():
    p = parse(MINIMAL + "\n[gate]\ntolerance = { mean_tpot_ms = 0.2 }\n")
    assert p.gate.tolerance["mean_tpot_ms"] == 0.2
    assert "output_throughput" in p.gate.tolerance


@pytest.mark.parametrize("path", sorted((REPO / "profiles").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_profiles_are_valid(path):
    profile = load_profile(path)
    assert profile.workloads


@given(concurrency=st.integers(min_value=-5, max_value=5000), prompts=st.integers(min_value=-5, max_value=5000))
def test_integer_keys_accept_exactly_the_valid_range(concurrency, prompts):
    text = MINIMAL.replace("concurrency = 4", f"concurrency = {concurrency}").replace(
        "num_prompts = 16", f"num_prompts = {prompts}"
    )
    if 1 <= concurrency <= prompts:
        w = parse(text).workloads[0]
        assert (w.concurrency, w.num_prompts) == (concurrency, prompts)
    else:
        with pytest.raises(ProfileError):
            parse(text)


def with_affinity(value: str, kind: str = 'kind = "simulator"') -> str:
    return MINIMAL.replace('kind = "simulator"', f"{kind}\ncpu_affinity = {value}")


@pytest.mark.parametrize(
    ("value", "held"),
    [('""', ""), ('"0"', "0"), ('"0-7"', "0-7"), ('"0,2,4-6"', "0,2,4-6"), ('" 6,0-1, 1,2 "', "0-2,6")],
)
def test_cpu_affinity_is_held_in_the_kernels_cpulist_form(value, held):
    assert parse(with_affinity(value)).server.cpu_affinity == held
    assert parse(MINIMAL).server.cpu_affinity == ""


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ('"7-0"', "'7-0' runs backwards; write 0-7, got '7-0'"),
        ('"-1"', "'-1' is negative or a range without a start; CPUs are numbered from 0"),
        ('"0,,2"', "'0,,2' has an empty entry"),
        ('"0-"', "'0-' is a range without an end"),
        ('"cpu0"', "'cpu0' is not a CPU number or a range a-b of them"),
        ('" "', "it names no CPU"),
        ('"0-4294967296"', "names a CPU above 65,535"),
        ("3", 'or "" to inherit perfgate\'s, got 3'),
        ("[0, 1]", "got [0, 1]"),
    ],
)
def test_a_bad_cpu_affinity_names_file_key_problem_and_syntax(value, why):
    with pytest.raises(ProfileError) as exc:
        parse(with_affinity(value))
    msg = str(exc.value)
    assert msg.startswith("profile profiles/x.toml: [server] key 'cpu_affinity': expected a CPU list such as ")
    assert '"0-7" or "0,2,4-6" (the `taskset -c` syntax)' in msg and why in msg
    assert "\n" not in msg


def test_cpu_affinity_is_refused_for_an_attached_server():
    attach = 'kind = "attach"\nbase_url = "http://127.0.0.1:1"'
    assert parse(with_affinity('""', attach)).server.kind == "attach"
    with pytest.raises(ProfileError) as exc:
        parse(with_affinity('"0-3"', attach))
    assert str(exc.value) == (
        "profile profiles/x.toml: [server] key 'cpu_affinity': kind = \"attach\" connects to a server perfgate did "
        "not start, so perfgate cannot place it on CPUs; remove cpu_affinity and pin the server where it is started "
        "(e.g. taskset -c 0-7 ...)"
    )
