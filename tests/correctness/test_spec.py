"""The [correctness] table: defaults per server kind, what turning it off needs, and its refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.catalogue import DEFAULT_LIMITS
from perfgate.correctness import off_reason, probe_spec
from perfgate.errors import ProfileError
from perfgate.profile import parse_profile

BASE = """
[server]
kind = "{kind}"
model_path = "m"
command = ["x", "{{port}}"]
base_url = "http://127.0.0.1:1"
[[workload]]
num_prompts = 64
concurrency = {concurrency}
input_len = 8
output_len = 8
token_id_range = [4, 2048]
"""


def _parse(tmp_path: Path, table: str = "", kind: str = "simulator", concurrency: int = 64) -> object:
    return parse_profile(BASE.format(kind=kind, concurrency=concurrency) + table, tmp_path / "p.toml")


@pytest.mark.parametrize(("kind", "on"), [("sglang", True), ("simulator", True), ("attach", False), ("command", False)])
def test_on_by_default_where_the_api_is_known(tmp_path: Path, kind: str, on: bool) -> None:
    profile = _parse(tmp_path, kind=kind)
    spec = probe_spec(profile)  # type: ignore[arg-type]
    assert (spec is not None) == on
    if spec is None:
        assert "opt-in" in off_reason(profile)  # type: ignore[arg-type]
    else:
        assert spec.concurrencies == (8, 64) and spec.api == "sglang" and spec.token_id_range == (4, 2048)
        assert spec.limits == DEFAULT_LIMITS


def test_opt_in_elsewhere_probes_the_workloads_api(tmp_path: Path) -> None:
    profile = _parse(tmp_path, "[correctness]\nenabled = true\n", kind="attach", concurrency=4)
    spec = probe_spec(profile)  # type: ignore[arg-type]
    assert spec is not None and spec.api == "sglang" and spec.concurrencies == (4,)


def test_overrides(tmp_path: Path) -> None:
    table = (
        '[correctness]\nprompts = 4\noutput_len = 8\nconcurrencies = [1, 32]\napi = "openai-completions"\n'
        "limits = { correctness_logprob_delta_max = 2.0, correctness_greedy_match = 0.9 }\n"
    )
    spec = probe_spec(_parse(tmp_path, table))  # type: ignore[arg-type]
    assert spec is not None and spec.concurrencies == (1, 32) and spec.api == "openai-completions"
    assert spec.limits["correctness_logprob_delta_max"] == 2.0 and spec.limits["correctness_greedy_match"] == 0.9
    assert len(spec.prompt_set()) == 4 and spec.prompt_set() == spec.prompt_set()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[correctness]\nenabled = false\n", 'turning it off needs reason = "why"'),
        ("[correctness]\nprompts = 0\n", "[correctness] key 'prompts'"),
        ("[correctness]\nconcurrencies = [16, 8]\n", "increasing order"),
        ("[correctness]\nlimits = { output_throughput = 1 }\n", "'output_throughput' is not a correctness metric"),
        ("[correctness]\nduplicates = 64\n", "more than the 32 prompts"),
        ("[correctness]\nmystery = 1\n", "mystery"),
        (
            "[correctness]\nscore = false\n",
            'score = false leaves the greedy view only (a prefill-only bug goes unseen); it needs reason = "why"',
        ),
        ("[gate]\ntolerance = { correctness_argmax_mismatch = 0.1 }\n", "set its limit in [correctness] limits"),
        (
            '[[workload]]\nname = "correctness"\nnum_prompts = 8\nconcurrency = 4\ninput_len = 8\noutput_len = 8\n',
            "the correctness probe's name",
        ),
    ],
)
def test_refusals_name_the_key(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ProfileError) as err:
        _parse(tmp_path, table)
    assert message in str(err.value)


def test_off_with_a_reason(tmp_path: Path) -> None:
    profile = _parse(tmp_path, '[correctness]\nenabled = false\nreason = "no logprobs"\n')
    assert probe_spec(profile) is None  # type: ignore[arg-type]
    assert off_reason(profile) == "off ([correctness] enabled = false: no logprobs)"  # type: ignore[arg-type]


def test_score_false_keeps_the_probe_on_and_says_why(tmp_path: Path) -> None:
    spec = probe_spec(_parse(tmp_path, '[correctness]\nscore = false\nreason = " dies scoring "\n'))  # type: ignore[arg-type]
    assert spec is not None and spec.no_score_reason == "dies scoring"
    assert probe_spec(_parse(tmp_path)).no_score_reason == ""  # type: ignore[arg-type, union-attr]
