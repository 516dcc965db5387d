"""Runs that measured nothing must not pass (issue #18): token counts checked against what the
client saw, validity enforced by every gate test, no baseline of a run without a completed
request, baselines checked for sense before boot, and the smaller holes around them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.baseline import Baseline, BaselineStore
from perfgate.catalogue import metric as declared
from perfgate.cli import main
from perfgate.errors import BaselineError, ProfileError
from perfgate.load._backends import OpenAICompletionsBackend, StreamState
from perfgate.load._stream import count_error
from perfgate.profile import parse_profile
from tests.baseline.baseline_factories import fingerprint
from tests.faults.conftest import Gate, quirky_command
from tests.faults.test_cli_faults import results
from tests.support import workload_baselines

FAILED, INTERRUPTED = int(pytest.ExitCode.TESTS_FAILED), int(pytest.ExitCode.INTERRUPTED)


def no_traceback(out: str) -> None:
    assert "Traceback" not in out and "During handling of the above exception" not in out, out[-4000:]


# -- 8: the server's token counts are checked, not trusted -------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--count-factor", "10"), "token count: the server counted 160 output tokens, more than the 16 asked"),
        (("--extra-tokens", "16"), "token count: 32 content chunks streamed for at most 16 tokens asked"),
        (("--extra-tokens", "16", "--no-counts"), "token count: 32 content chunks streamed for at most 16 tokens"),
        (
            ("--prompt-tokens-offset", "100"),
            "token count: the server counted 132 prompt tokens, 32 token ids were sent",
        ),
    ],
    ids=["usage-10x", "twice-max-tokens", "twice-max-tokens-uncounted", "prompt-count"],
)
def test_miscounting_server_fails_every_request_and_the_run(gate: Gate, flags: tuple[str, ...], message: str) -> None:
    before = gate.baseline_bytes()
    outcome = gate.run(
        "--perf-update-baselines", kind="command", server=quirky_command(*flags), workload="max_error_rate = 0.5"
    )
    assert outcome.ret == FAILED, outcome.out[-3000:]
    outcome.shown_once(message)
    assert gate.baseline_bytes() == before == {}
    no_traceback(outcome.out)


@pytest.mark.parametrize(
    "flags",
    [(), ("--tokens-per-chunk", "3"), ("--tokens-per-chunk", "3", "--no-counts"), ("--prompt-tokens-offset", "0")],
    ids=["one-per-chunk", "three-per-chunk", "three-per-chunk-uncounted", "prompt-count-exact"],
)
def test_honest_counts_pass(gate: Gate, flags: tuple[str, ...]) -> None:
    outcome = gate.run(kind="command", server=quirky_command(*flags))
    assert outcome.ret == 0, outcome.out[-3000:]
    assert "token count:" not in outcome.out


def test_a_server_that_sends_each_answer_at_once_has_no_tpot_and_records_nothing(gate: Gate) -> None:
    # A buffering proxy in front of the server: before, TPOT was 0 ms, and as a baseline no later
    # run could be slower.
    outcome = gate.run("--perf-update-baselines", kind="command", server=quirky_command("--buffered"))
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert (
        "gated mean_tpot_ms, p99_tpot_ms not measured (TPOT not measured: every request's tokens arrived in one "
        "read of its stream)" in outcome.out
    ), outcome.out[-3000:]
    assert gate.baseline_bytes() == {}
    no_traceback(outcome.out)
    # Gated against an honest server's baseline: before, TPOT "improved" to 0 and the run passed.
    assert gate.run("--perf-update-baselines", kind="command", server=quirky_command()).ret == 0
    recorded = gate.baseline_bytes()
    outcome = gate.run(kind="command", server=quirky_command(), env={"QUIRKY_BUFFERED": "1"})
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert "run invalid, so its latency is not judged" in outcome.out, outcome.out[-3000:]
    assert "no baseline for this fingerprint" not in outcome.out
    assert gate.baseline_bytes() == recorded


@given(
    max_tokens=st.integers(1, 5000),
    chunks=st.integers(0, 6000),
    server=st.none() | st.integers(0, 6000),
    prompt=st.none() | st.integers(0, 20000),
    sent=st.integers(1, 4000),
    ids=st.booleans(),
)
def test_count_rule(max_tokens: int, chunks: int, server: int | None, prompt: int | None, sent: int, ids: bool) -> None:
    """The documented bound: chunks <= count <= max_tokens, prompt == sent for ids, bounded for text."""
    state = StreamState(server_tokens=server, server_prompt_tokens=prompt, content_chunks=chunks)
    output_ok = chunks <= max_tokens and (server is None or chunks <= server <= max_tokens)
    if prompt is None:
        prompt_ok = True
    elif ids:
        prompt_ok = prompt == sent
    else:
        prompt_ok = sent // 4 <= prompt <= 4 * sent + 512
    error = count_error(state, sent, max_tokens, ids)
    assert (error == "") == (output_ok and prompt_ok), error
    assert error == "" or error.startswith("token count: ")


def test_openai_usage_below_the_chunks_streamed_fails() -> None:
    """OpenAI chunks are content whether or not the usage moved with them: four text chunks with a
    running usage that ends at 3 cannot be three tokens."""
    backend = OpenAICompletionsBackend("m", ignore_eos=False, extra_body={})
    state = StreamState()
    for count in (1, 2, 2, 3):
        chunk = {"choices": [{"text": "ab", "finish_reason": None}], "usage": {"completion_tokens": count}}
        backend.feed(json.dumps(chunk).encode(), state)
    assert state.content_chunks == 4
    assert count_error(state, 8, 16, True) == (
        "token count: the server counted 3 output tokens but streamed 4 content chunks "
        "(each carries at least one token)"
    )


def test_chat_prompt_count_far_from_the_text_fails() -> None:
    # Chat prompts are text: a template adds tokens, but not ten times the prompt.
    state = StreamState(server_tokens=16, server_prompt_tokens=5000, content_chunks=16)
    assert "5000 prompt tokens for a prompt of about 100 tokens (outside 25..912)" in count_error(state, 100, 16, False)
    assert count_error(StreamState(server_tokens=16, server_prompt_tokens=130, content_chunks=16), 100, 16, False) == ""


# -- 9: validity is enforced by every gate test -----------------------------------------------


@pytest.mark.parametrize("select", ["throughput or latency", "throughput", "gpu_power"])
def test_invalid_run_fails_the_selected_gate_tests(gate: Gate, select: str) -> None:
    """test_run_is_valid deselected: the tests that judge the run fail on its invalidity."""
    before = gate.baseline_bytes()
    outcome = gate.run("-k", select, gate="client_max_cpu_share = 0.0001")
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert "run invalid, so its" in outcome.out and "the load client, not the server, set the pace" in outcome.out
    assert "passed" not in outcome.out.splitlines()[-1], outcome.out[-1000:]
    assert gate.baseline_bytes() == before


# -- 10: a run with no completed request is never valid ---------------------------------------


def test_every_request_failing_within_max_error_rate_1_is_invalid_and_never_recorded(gate: Gate) -> None:
    outcome = gate.run("--perf-update-baselines", sim="http_error_rate = 1.0", workload="max_error_rate = 1.0")
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert "repeat 1: no request completed (32 of 32 failed; first: HTTP 500 from /generate" in outcome.out
    assert "not recorded: the run was invalid" in outcome.out
    assert gate.baseline_bytes() == {}
    no_traceback(outcome.out)


def _zero_completed(path: Path) -> Path:
    doc = json.loads(path.read_text())
    for r in doc["workloads"][0]["repeats"]:
        r["values"].update(completed=0.0, output_throughput=0.0)
    path.write_text(json.dumps(doc))
    return path


def test_compare_refuses_a_workload_that_completed_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = results(tmp_path / "a.json", {"c64": [1000.0] * 3})
    empty = _zero_completed(results(tmp_path / "b.json", {"c64": [1000.0] * 3}))
    for a, b in ((good, empty), (empty, good)):
        assert main(["compare", str(a), str(b)]) == 2
        out = capsys.readouterr().out
        assert f"ERROR c64: not compared, repeat 1 in {empty} completed no request" in out
        assert "no regression" not in out
    invalid = results(tmp_path / "c.json", {"c64": [1000.0] * 3})
    doc = json.loads(invalid.read_text())
    doc["workloads"][0]["invalid_reasons"] = ["repeat 1: no request completed"]
    invalid.write_text(json.dumps(doc))
    assert main(["compare", str(good), str(invalid)]) == 2
    assert f"the run in {invalid} was invalid (repeat 1: no request completed)" in capsys.readouterr().out


# -- compare: different profiles or fingerprints ----------------------------------------------


def _with(path: Path, *, profile: str, fingerprint: dict[str, object]) -> Path:
    doc = json.loads(path.read_text())
    doc["profile"] = {"name": profile, "path": f"profiles/{profile}.toml"}
    for wl in doc["workloads"]:
        wl["fingerprint"] = fingerprint
    path.write_text(json.dumps(doc))
    return path


def test_compare_of_different_profiles_or_fingerprints_needs_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fp = {"gpu_model": "H200", "gpu_count": 8, "engine": "sglang"}
    a = _with(results(tmp_path / "a.json", {"c64": [1000.0] * 3}), profile="p", fingerprint=fp)
    same = _with(results(tmp_path / "s.json", {"c64": [1000.0] * 3}), profile="p", fingerprint=fp)
    other_profile = _with(results(tmp_path / "b.json", {"c64": [1000.0] * 3}), profile="q", fingerprint=fp)
    other_gpus = _with(
        results(tmp_path / "c.json", {"c64": [1000.0] * 3}), profile="p", fingerprint={**fp, "gpu_count": 4}
    )
    assert main(["compare", str(a), str(same)]) == 0
    capsys.readouterr()
    cases = ((other_profile, "different profiles ('p' and 'q')"), (other_gpus, "fingerprints differ (gpu_count)"))
    for b, why in cases:
        assert main(["compare", str(a), str(b)]) == 2
        err = capsys.readouterr().err
        assert "do not measure the same thing" in err and why in err and "pass --force" in err
        assert main(["compare", "--force", str(a), str(b)]) == 0
        out = capsys.readouterr().out
        assert why in out and "compared anyway: --force" in out and "no regression" in out


# -- 11: baselines are checked for sense when read ---------------------------------------------


def _recorded(gate: Gate) -> Path:
    outcome = gate.run("--perf-update-baselines")
    assert outcome.ret == 0, outcome.out[-3000:]
    (path,) = workload_baselines(gate.baselines)
    return path


@pytest.mark.long
def test_senseless_baselines_stop_the_gate_before_boot(gate: Gate) -> None:
    """One recording, then each bad variant of its file: refused before boot, naming file, key and fix."""
    path = _recorded(gate)
    good = path.read_text()
    doc = json.loads(good)

    def variant(edit: str) -> str:
        d = json.loads(good)
        rep = d["repeats"][0]
        if edit == "huge":
            rep["output_throughput"] = 1e308
        elif edit == "negative":
            rep["mean_tpot_ms"] = -5.0
        elif edit == "nan":
            rep["output_throughput"] = float("nan")  # json.dumps writes NaN, as a hand edit would
        elif edit == "string":
            rep["output_throughput"] = "fast"
        elif edit == "missing":
            for r in d["repeats"]:
                del r["output_throughput"]
        elif edit == "zero":
            rep["total_throughput"] = 0.0
        elif edit == "no-schema":
            del d["schema_version"]
        return json.dumps(d)

    cases = {
        "huge": "repeat #1 metric 'output_throughput' is 1e+308: no measurement is negative or above 1e+15",
        "negative": "repeat #1 metric 'mean_tpot_ms' is -5.0: no measurement is negative",
        # NaN is no JSON: the strict reader (perfgate._json) refuses it before the schema is read.
        "nan": "NaN, which is no JSON number (perfgate writes null for a value not measured)",
        "string": "repeat #1 metric 'output_throughput' must be a finite number, got 'fast'",
        "missing": "gated metric 'output_throughput' is missing from repeat(s) 1, 2, 3",
        "zero": "gated metric 'total_throughput' is 0 in repeat(s) 1: a run that measured nothing",
        "no-schema": "no schema_version key, and it is not a schema 0 baseline",
    }
    assert doc["schema_version"] == 1
    for edit, message in cases.items():
        path.write_text(variant(edit))
        before = gate.baseline_bytes()
        outcome = gate.run()
        assert outcome.ret == INTERRUPTED, (edit, outcome.out[-3000:])
        assert message in outcome.out and str(path) in outcome.out, (edit, outcome.out[-3000:])
        assert "nothing was run" in outcome.out, edit
        assert gate.baseline_bytes() == before
        no_traceback(outcome.out)
    # Two files of one fingerprint: which gates is unknown, so neither does (also when recording).
    path.write_text(good)
    twin = path.with_name(path.name.split("--", 1)[0] + "--copy.json")
    twin.write_text(good)
    for args in ((), ("--perf-update-baselines",)):
        before = gate.baseline_bytes()
        outcome = gate.run(*args)
        assert outcome.ret == INTERRUPTED, outcome.out[-3000:]
        assert f"both hold workload 'c16-in32-out16' for fingerprint {doc['fingerprint_digest']}" in outcome.out
        assert str(path) in outcome.out and str(twin) in outcome.out and "delete the other" in outcome.out
        assert gate.baseline_bytes() == before


def test_senseless_baseline_is_moved_aside_by_a_recording(gate: Gate) -> None:
    path = _recorded(gate)
    doc = json.loads(path.read_text())
    doc["repeats"][0]["total_throughput"] = 0.0
    path.write_text(json.dumps(doc))
    outcome = gate.run("--perf-update-baselines")
    assert outcome.ret == 0, outcome.out[-3000:]
    assert "moved the unusable baseline" in outcome.out
    assert json.loads(path.read_text())["repeats"][0]["total_throughput"] > 0


def _baseline(repeats: list[dict[str, float]]) -> Baseline:
    return Baseline("p", "w", fingerprint(), repeats)


def test_store_never_saves_what_it_would_refuse(tmp_path: Path) -> None:
    from perfgate.verdict import MetricRule, ToleranceCheck

    rules = [
        MetricRule("output_throughput", "higher", tolerance=0.05),
        MetricRule("server_queue_reqs_mean", "lower", ceiling=4.0),
    ]
    store = BaselineStore(tmp_path)
    with pytest.raises(BaselineError, match=r"gated metric 'output_throughput' is 0 in repeat\(s\) 1, 2"):
        store.save(
            _baseline([{"output_throughput": 0.0, "server_queue_reqs_mean": 0.0}] * 2), check=ToleranceCheck(rules)
        )
    with pytest.raises(BaselineError, match=r"gated metric 'output_throughput' is missing from repeat\(s\) 2"):
        store.save(
            _baseline([{"output_throughput": 5.0}, {"server_queue_reqs_mean": 0.0}]), check=ToleranceCheck(rules)
        )
    # An empty queue is a measurement.
    assert store.save(
        _baseline([{"output_throughput": 5.0, "server_queue_reqs_mean": 0.0}]), check=ToleranceCheck(rules)
    ).exists()


@pytest.mark.parametrize(
    ("metric", "zero_ok"),
    [
        ("output_throughput", False),
        ("request_throughput", False),
        ("goodput", False),
        ("capacity", True),
        ("mean_tpot_ms", False),
        ("p99_ttft_ms", False),
        ("duration_s", False),
        ("std_tpot_ms", True),
        ("gpu_imbalance", True),
        ("server_queue_reqs_mean", True),
    ],
)
def test_which_metrics_may_be_zero(metric: str, zero_ok: bool) -> None:
    assert declared(metric).zero_ok is zero_ok


def test_committed_baselines_still_load() -> None:
    from perfgate.profile import load_profile
    from perfgate.session import Session, SessionOptions

    repo = Path(__file__).resolve().parents[2]
    for name in ("sim-glm5", "h200-transformers-serve"):
        profile = load_profile(repo / "profiles" / f"{name}.toml")
        session = Session(profile, SessionOptions(baselines_dir=repo / "baselines", log_dir=repo / "unused"))
        assert session.store_notes == []
        session.stack.close()


# -- the profile's integers are bounded; a single point needs num_prompts >= concurrency ------

PROFILE = """
[server]
kind = "simulator"
[[workload]]
num_prompts = 16
concurrency = 4
input_len = 8
output_len = 8
"""


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("output_len = 8", f"output_len = {2**63 - 1}", "'output_len': expected an integer from 1 to 10,000,000"),
        ("input_len = 8", "input_len = 10000001", "'input_len': expected an integer from 1 to 10,000,000"),
        ("num_prompts = 16", f"num_prompts = {2**40}", "'num_prompts': expected an integer from 1 to 1,000,000"),
        ("concurrency = 4", "concurrency = [4, 2000000]", "'concurrency': expected an integer from 1 to 1,000,000"),
        ("output_len = 8", f"output_len = 8\nseed = {2**32}", "'seed': expected an integer from 0 to 4,294,967,295"),
        ("output_len = 8", "output_len = 8\nclient_processes = 5000", 'from 1 to 1,024 or "auto"'),
        ("output_len = 8", "output_len = 8\ntoken_id_range = [0, 4294967297]", "lo < hi <= 4294967296"),
        (
            "concurrency = 4",
            "concurrency = 32",
            "'concurrency': 32 is more than num_prompts = 16: at most num_prompts requests can be in flight",
        ),
    ],
    ids=["output-2**63", "input-len", "num-prompts", "sweep-c", "seed", "client-processes", "id-range", "c>n"],
)
def test_profile_integers_are_bounded(old: str, new: str, message: str) -> None:
    with pytest.raises(ProfileError) as exc:
        parse_profile(PROFILE.replace(old, new, 1), Path("profiles/x.toml"))
    assert message in str(exc.value) and str(exc.value).startswith("profile profiles/x.toml:")


def test_num_prompts_below_concurrency_is_refused_before_boot(gate: Gate) -> None:
    # A profile error stops collection, as every other profile error does (exit 2).
    text = gate.profile().read_text().replace("num_prompts = 32", "num_prompts = 8")
    outcome = gate.run(profile=gate.write("few-prompts.toml", text))
    assert outcome.ret == INTERRUPTED, outcome.out[-3000:]
    assert "'concurrency': 16 is more than num_prompts = 8" in outcome.out
    assert gate.baseline_bytes() == {}
    no_traceback(outcome.out)


def test_output_len_beyond_any_context_is_refused_before_boot(gate: Gate) -> None:
    outcome = gate.run(workload=f"output_len = {2**63 - 1}")
    assert outcome.ret == INTERRUPTED, outcome.out[-3000:]
    assert "'output_len': expected an integer from 1 to 10,000,000, got 9223372036854775807" in outcome.out
    no_traceback(outcome.out)
