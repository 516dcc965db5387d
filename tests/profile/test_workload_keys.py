"""Datasets, SLOs and sweeps in a profile: what loads, what it becomes, and one clear line for what does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.errors import ProfileError
from perfgate.profile import LengthDist, Slo, parse_profile

HEAD = '[server]\nkind = "simulator"\n\n[[workload]]\nnum_prompts = 64\n'


def parse(workload: str, tail: str = ""):
    return parse_profile(HEAD + workload + "\n" + tail, Path("profiles/x.toml"))


def error(workload: str, tail: str = "") -> str:
    with pytest.raises(ProfileError) as err:
        parse(workload, tail)
    message = str(err.value)
    assert message.startswith("profile profiles/x.toml: ") and "\n" not in message
    return message


def test_shared_prefix_gets_a_name_and_a_fingerprint_with_its_shape():
    (w,) = parse(
        'concurrency = 16\ndataset = "shared-prefix"\nnum_groups = 8\nsystem_prompt_len = 1024\n'
        "input_len = 128\noutput_len = 64"
    ).workloads
    assert w.name == "c16-sp8x1024-in128-out64"
    assert (
        w.spec()["dataset"] == "shared-prefix" and w.spec()["system_prompt_len"] == 1024 and w.spec()["num_groups"] == 8
    )


def test_new_keys_stay_out_of_an_old_workloads_fingerprint():
    (w,) = parse("concurrency = 16\ninput_len = 128\noutput_len = 64").workloads
    assert set(w.spec()) == {
        "num_prompts",
        "concurrency",
        "input_len",
        "output_len",
        "request_rate",
        "backend",
        "ignore_eos",
        "range_ratio",
        "seed",
        "pacing",
        "token_id_range",
    }


def test_length_distributions_and_slo_load():
    (w,) = parse(
        "concurrency = 4\ninput_len = 500\noutput_len = 100\n"
        'input_len_distribution = { kind = "lognormal", stddev = 200, max = 4000 }\n'
        'output_len_distribution = { kind = "normal", stddev = 20, min = 10 }\n'
        "slo = { ttft_ms = 2000, tpot_ms = 50 }"
    ).workloads
    assert w.input_len_distribution == LengthDist("lognormal", stddev=200.0, min=1, max=4000)
    assert w.output_len_distribution == LengthDist("normal", stddev=20.0, min=10, max=None)
    assert w.slo == Slo(ttft_ms=2000.0, tpot_ms=50.0)
    assert w.spec()["slo"] == {"ttft_ms": 2000.0, "tpot_ms": 50.0}
    (h,) = parse(
        "concurrency = 4\noutput_len = 100\n"
        'input_len_distribution = { kind = "histogram", bins = [[1, 100, 3], [1000, 2000, 1]] }'
    ).workloads
    assert h.input_len is None and h.name == "c4-in413-out100"


def test_sharegpt_needs_only_its_file():
    (w,) = parse('concurrency = 4\ndataset = "sharegpt"\ndataset_path = "data/sg.json"\ncontext_len = 2048').workloads
    assert w.name == "c4-sharegpt" and w.input_len is None and w.output_len is None
    assert w.spec()["context_len"] == 2048


def test_a_concurrency_list_is_a_sweep_of_point_workloads():
    p = parse(
        'name = "cap"\nconcurrency = [16, 32, 64]\ninput_len = 128\noutput_len = 64\n'
        'slo = { tpot_ms = 50 }\ncapacity_percentile = "p99"\ncapacity_bisect_steps = 2'
    )
    assert [w.name for w in p.workloads] == ["cap@c16", "cap@c32", "cap@c64"]
    assert [w.concurrency for w in p.workloads] == [16, 32, 64]
    # Each load draws its own prompts, so none finds another's in a prefix cache.
    assert len({w.seed for w in p.workloads}) == 3
    (sweep,) = p.sweeps
    assert (sweep.name, sweep.axis, sweep.loads, sweep.points) == (
        "cap",
        "concurrency",
        (16, 32, 64),
        ("cap@c16", "cap@c32", "cap@c64"),
    )
    assert sweep.spec()["concurrency"] == [16, 32, 64] and sweep.spec()["capacity_percentile"] == "p99"
    assert p.sweep_of(p.workloads[1]) is sweep
    assert sweep.point(48).name == "cap@c48" and sweep.point(48).concurrency == 48


def test_a_request_rate_list_is_a_sweep_too():
    p = parse(
        "concurrency = 256\ninput_len = 128\noutput_len = 64\nrequest_rate = [2, 4.5, 8]\nslo = { ttft_ms = 500 }"
    )
    assert [w.name for w in p.workloads] == [
        "c256-in128-out64-r2-8@r2",
        "c256-in128-out64-r2-8@r4.5",
        "c256-in128-out64-r2-8@r8",
    ]
    assert [w.request_rate for w in p.workloads] == [2.0, 4.5, 8.0]


@pytest.mark.parametrize(
    "workload, fragments",
    [
        (
            "concurrency = 4\ninput_len = 8",
            ["'output_len': missing; dataset = \"random\" needs input_len and output_len"],
        ),
        ('concurrency = 4\ndataset = "sharegpt"', ["'dataset_path': missing", "local ShareGPT JSON file"]),
        ('concurrency = 4\ndataset = "shared-prefix"\ninput_len = 8\noutput_len = 8', ["'system_prompt_len': missing"]),
        (
            "concurrency = 4\ninput_len = 8\noutput_len = 8\nsystem_prompt_len = 100",
            ['\'system_prompt_len\': applies to dataset = "shared-prefix", not "random"; remove it'],
        ),
        (
            'concurrency = 4\ndataset = "sharegpt"\ndataset_path = "x.json"\ninput_len = 8',
            ['\'input_len\': applies to dataset = "random" or "shared-prefix" or "multi-turn", not "sharegpt"'],
        ),
        ('concurrency = 4\ndataset = "tweets"', ["'dataset': expected one of 'random', 'shared-prefix', 'sharegpt'"]),
        (
            'concurrency = 4\ninput_len = 8\noutput_len = 8\ntokenize = "server"',
            ['\'tokenize\': applies to dataset = "sharegpt", not "random"; remove it'],
        ),
        (
            'concurrency = 4\ndataset = "sharegpt"\ndataset_path = "x.json"\ntokenize = "bpe"',
            ["'tokenize': expected one of 'approximate', 'server'"],
        ),
        (
            'concurrency = 4\ninput_len = 8\noutput_len = 8\ninput_len_distribution = { kind = "normal" }',
            [
                "'input_len_distribution': expected { kind = \"normal\", stddev = N (> 0), min = N, max = N } (min "
                "and max optional)"
            ],
        ),
        (
            'concurrency = 4\ninput_len = 8\noutput_len = 8\ninput_len_distribution = { kind = "normal", stddev = '
            "5, min = 10 }",
            ["the mean input_len = 8 lies outside min and max [10, no max]"],
        ),
        (
            'concurrency = 4\ninput_len = 8\noutput_len = 8\ninput_len_distribution = { kind = "histogram", bins = '
            "[[5, 1, 1]] }",
            ["bins = [[lo, hi, weight], ...] with 1 <= lo <= hi"],
        ),
        (
            'concurrency = 4\ninput_len = 8\noutput_len = 8\ninput_len_distribution = { kind = "histogram", bins = '
            "[[1, 9, 1]] }",
            ["'input_len': conflicts with input_len_distribution of kind histogram"],
        ),
        (
            "concurrency = 4\ninput_len = 8\noutput_len = 8\nslo = { ttft = 100 }",
            ["'slo': expected a table of ttft_ms, tpot_ms and/or e2e_ms in milliseconds (> 0)"],
        ),
        ("concurrency = 4\ninput_len = 8\noutput_len = 8\nslo = { ttft_ms = 0 }", ["'slo': expected a table"]),
        (
            "concurrency = [16, 8]\ninput_len = 8\noutput_len = 8",
            ["'concurrency': expected an integer >= 1, or a list of them in increasing order"],
        ),
        ("concurrency = [16]\ninput_len = 8\noutput_len = 8", ["'concurrency': expected an integer >= 1, or a list"]),
        (
            "concurrency = [4, 8]\ninput_len = 8\noutput_len = 8",
            ["'slo': missing; a sweep over concurrency finds the highest load that meets the SLO"],
        ),
        (
            "concurrency = [4, 8]\nrequest_rate = [1, 2]\ninput_len = 8\noutput_len = 8\nslo = { ttft_ms = 9 }",
            ["'request_rate': a sweep varies one load at a time"],
        ),
        (
            'concurrency = 4\nrequest_rate = [1, "inf"]\ninput_len = 8\noutput_len = 8',
            ["a list of finite rates >= 0.001, <= 1,000,000,000 in increasing order"],
        ),
        (
            "concurrency = [2, 8]\nclient_processes = 4\ninput_len = 8\noutput_len = 8\nslo = { ttft_ms = 9 }",
            ["'client_processes': 4 processes cannot share concurrency = 2 at the sweep's first point"],
        ),
        (
            'concurrency = 4\ninput_len = 8\noutput_len = 8\ncapacity_percentile = "p99"',
            ["'capacity_percentile': applies to sweeps only"],
        ),
        (
            "concurrency = [32, 128]\ninput_len = 8\noutput_len = 8\nslo = { ttft_ms = 9 }",
            ["'concurrency': 128 is more than num_prompts = 64: at most num_prompts requests can be in flight"],
        ),
    ],
)
def test_bad_workload_keys_are_one_line_naming_the_key(workload, fragments):
    message = error(workload)
    for f in fragments:
        assert f in message


def test_a_sweep_and_a_workload_cannot_share_a_name():
    message = error(
        'name = "x"\nconcurrency = [4, 8]\ninput_len = 8\noutput_len = 8\nslo = { ttft_ms = 9 }',
        '[[workload]]\nname = "x"\nnum_prompts = 4\nconcurrency = 4\ninput_len = 8\noutput_len = 8\n',
    )
    assert "'x' names both a sweep and a workload" in message


@pytest.mark.parametrize(
    "line, expected",
    [
        ('server_metrics_path = "metrics"', 'expected a path starting with "/", or "" for none, got \'metrics\''),
        ("server_metrics_interval_s = 0", "expected a number >= 0.05, got 0"),
    ],
)
def test_server_metrics_keys(line, expected):
    assert error("concurrency = 4\ninput_len = 8\noutput_len = 8", f"[telemetry]\n{line}\n").endswith(expected)


def test_multi_turn_gets_a_name_and_a_fingerprint_with_its_turns():
    (w,) = parse(
        'concurrency = 8\ndataset = "multi-turn"\nnum_turns = 4\nthink_time_s = 0.5\ninput_len = 64\noutput_len = 32'
    ).workloads
    assert w.name == "c8-mt4-in64-out32"
    assert w.spec()["dataset"] == "multi-turn" and w.spec()["num_turns"] == 4 and w.spec()["think_time_s"] == 0.5


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        (
            'concurrency = 8\ndataset = "multi-turn"\ninput_len = 64\noutput_len = 32',
            "[[workload]] #1 key 'num_turns': missing; dataset = \"multi-turn\" needs num_turns (requests per chat "
            "session)",
        ),
        (
            'concurrency = 8\ndataset = "multi-turn"\nnum_turns = 5\ninput_len = 64\noutput_len = 32',
            "[[workload]] #1 key 'num_prompts': 64 is not a multiple of num_turns = 5: every chat session runs all "
            "its turns; "
            "use e.g. num_prompts = 60",
        ),
        (
            "concurrency = 8\nnum_turns = 4\ninput_len = 64\noutput_len = 32",
            '[[workload]] #1 key \'num_turns\': applies to dataset = "multi-turn", not "random"; remove it',
        ),
        (
            'concurrency = 8\ndataset = "shared-prefix"\nsystem_prompt_len = 9\nthink_time_s = 1\ninput_len = '
            "64\noutput_len = 32",
            '[[workload]] #1 key \'think_time_s\': applies to dataset = "multi-turn", not "shared-prefix"; remove it',
        ),
        (
            'concurrency = 8\ndataset = "multi-turn"\nnum_turns = 4\nthink_time_s = -1\n'
            "input_len = 64\noutput_len = 32",
            "[[workload]] #1 key 'think_time_s': expected a number >= 0",
        ),
    ],
)
def test_multi_turn_mistakes_name_the_key(workload, expected):
    assert expected in error(workload)
