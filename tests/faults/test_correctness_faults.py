"""The correctness guard's fault matrix: a server that is fast but computes a consistently wrong
model fails ``test_correctness`` and nothing else; one whose answers are degenerate or wrong only in
a full batch also fails the workloads, whose own answers are scored (issue 34); an unusable stored
reference stops the run before boot.

Each case runs the gate as a user would (a subprocess on a copy of perf_tests/) against the
simulator, whose faults (``PERFGATE_SIM_CORRUPT_RATE``, ``_NAN_LOGPROBS``, ``_CORRUPT_ABOVE_BATCH``)
change its answers and not its speed.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.faults.conftest import Gate, Outcome

FAILED, INTERRUPTED, USAGE = (
    int(pytest.ExitCode.TESTS_FAILED),
    int(pytest.ExitCode.INTERRUPTED),
    int(pytest.ExitCode.USAGE_ERROR),
)
# A small probe keeps each run short; the workload runs at concurrency 16, so the passes are 8 and 16.
PROBE = "\n[correctness]\nprompts = 8\noutput_len = 16\nduplicates = 2\n"
# The cases are about correctness: the speed tests must not trip on a loaded 2-core machine.
LOOSEST = "{ output_throughput = 0.9, total_throughput = 0.9, mean_tpot_ms = 9.0, p99_tpot_ms = 9.0 }"


def _profile(gate: Gate, table: str = PROBE) -> Path:
    return gate.profile(tolerance=LOOSEST, correctness=table)


def _failed_tests(outcome: Outcome) -> list[str]:
    return sorted(set(re.findall(r"^FAILED \S+::(\w+)", outcome.out, re.M)))


def _correctness_file(gate: Gate) -> Path:
    (path,) = sorted(gate.baselines.rglob("correctness--*.json"))
    return path


# The load's sampled answers, scored teacher-forced, name the workload, the request and the position.
LOAD_ANSWERS_WRONG = (
    r"workload c\d+-in\d+-out\d+: the load's answers are not the model's greedy tokens: request \d+, output "
    r"position \d+: "
)


WORKLOAD_TESTS = ("test_run_is_valid", "test_throughput", "test_latency", "test_gpu_power")


def _no_traceback(out: str) -> None:
    assert "Traceback" not in out and "During handling of the above exception" not in out, out[-4000:]


def test_a_wrong_model_fails_correctness_and_nothing_else(gate: Gate) -> None:
    profile = _profile(gate)
    recorded = gate.run("--perf-update-baselines", profile=profile)
    assert recorded.ret == 0, recorded.out[-3000:]
    doc = json.loads(_correctness_file(gate).read_text())
    assert doc["workload"] == "correctness" and len(doc["record"]["prompts"]) == 8
    same = gate.run("-rA", profile=profile)
    assert same.ret == 0, same.out[-3000:]
    assert re.search(r"PASSED \S+::test_correctness", same.out), same.out[-3000:]
    wrong = gate.run("-rfE", profile=profile, env={"PERFGATE_SIM_CORRUPT_RATE": "0.05"})
    assert wrong.ret == FAILED, wrong.out[-3000:]
    assert _failed_tests(wrong) == ["test_correctness"], wrong.out[-3000:]
    # One clear message: the metric, the reference, the prompt and position, expected and got.
    assert "correctness probe failed" in wrong.out
    assert re.search(
        r"correctness_logprob_delta_max at concurrency \d+, prompt \d+, position \d+: expected token", wrong.out
    )
    assert "its reference did (the recorded reference " in wrong.out
    _no_traceback(wrong.out)


def test_a_server_that_dies_during_the_probe_is_named_as_the_cause(gate: Gate) -> None:
    # The probe's fifth request kills the simulator: a broken connection alone would say nothing.
    profile = gate.profile(tolerance=LOOSEST, correctness=PROBE, sim="crash_after_requests = 5")
    outcome = gate.run("-rfE", "--perf-update-baselines", profile=profile)
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert re.search(
        r"correctness probe stopped: correctness probe: /generate for prompt \d+ failed: \w+\(.*\); the server "
        r"exited with code 1 during the correctness probe",
        outcome.out,
    ), outcome.out[-3000:]
    assert not list(gate.baselines.rglob("*.json"))
    _no_traceback(outcome.out)


def test_nan_logprobs_fail_without_any_reference(gate: Gate) -> None:
    outcome = gate.run("-rfE", profile=_profile(gate), env={"PERFGATE_SIM_NAN_LOGPROBS": "1"})
    assert outcome.ret == FAILED, outcome.out[-3000:]
    # The probe, and the workload through its own answers: every scored position is NaN.
    assert {"test_correctness", "test_run_is_valid"} <= set(_failed_tests(outcome)), outcome.out[-3000:]
    assert "correctness_nonfinite" in outcome.out and "are NaN or infinite" in outcome.out
    assert re.search(LOAD_ANSWERS_WRONG + r"the server scores its token \d+ with NaN or infinite logprobs", outcome.out)


def test_a_wrong_model_fails_the_run_when_test_correctness_is_not_selected(gate: Gate) -> None:
    """-k that leaves test_correctness out still runs the probe at boot; its failure fails the run
    (it passed with exit 0 before: a fast, wrong server green because its test was deselected)."""
    profile = _profile(gate)
    clean = gate.run("-rfE", "-k", "not test_correctness", "--perf-update-baselines", profile=profile)
    assert clean.ret == 0, clean.out[-3000:]
    assert "test_correctness was not selected" not in clean.out
    # A consistently wrong model: its load answers are its own argmax, only the probe's reference tells.
    wrong = gate.run("-rfE", "-k", "not test_correctness", profile=profile, env={"PERFGATE_SIM_CORRUPT_RATE": "0.05"})
    assert wrong.ret == FAILED, wrong.out[-3000:]
    # No test failed; the summary says why the run did.
    assert _failed_tests(wrong) == [], wrong.out[-3000:]
    assert "correctness: FAILED, and test_correctness was not selected: the run fails all the same" in wrong.out
    assert "correctness_logprob_delta_max" in wrong.out
    _no_traceback(wrong.out)


def test_a_batch_dependent_fault_fails_at_the_workload_concurrency(gate: Gate) -> None:
    # Clean at the low pass (8 in a step), wrong above 8: the high pass disagrees with the low one.
    outcome = gate.run("-rfE", profile=_profile(gate), env={"PERFGATE_SIM_CORRUPT_ABOVE_BATCH": "8"})
    assert outcome.ret == FAILED, outcome.out[-3000:]
    # The workload's own answers, scored, may fail it too: whether its batch stayed above 8 while
    # the sampled answers were computed depends on the machine's load.
    failed = set(_failed_tests(outcome))
    assert "test_correctness" in failed and failed <= {"test_correctness", *WORKLOAD_TESTS}, outcome.out[-3000:]
    # The prompts' answers against the low pass, or a duplicate's against its prompt's: which one
    # depends on how many of the 16 the simulator batched at once (on a loaded CI machine the
    # client sends slower and the prompts' steps can stay at or below 8; the duplicates, sent
    # last, then meet the bigger batch).
    found = r"correctness_(argmax_mismatch|batch_disagreements) at concurrency 16, prompt \d+"
    assert re.search(found, outcome.out), outcome.out[-3000:]


def test_a_fault_above_the_probes_own_requests_fails_at_the_workloads_batch(gate: Gate) -> None:
    """Issue #34: the high pass had at most prompts + duplicates in flight (10 here), so a server
    wrong only in batches above 36 passed a workload of 64 (exit 0). Padded to 64, it fails, and
    says the batch it reached. time_scale 0.5: the prompts' decode steps outlast the sending of
    the 64 requests on a loaded 2-core machine."""
    profile = gate.profile(tolerance=LOOSEST, correctness=PROBE, sim="time_scale = 0.5")
    profile.write_text(
        profile.read_text().replace("num_prompts = 32\nconcurrency = 16", "num_prompts = 64\nconcurrency = 64")
    )
    outcome = gate.run(
        "-rfE", f"--perf-results={gate.results}", profile=profile, env={"PERFGATE_SIM_CORRUPT_ABOVE_BATCH": "36"}
    )
    assert outcome.ret == FAILED, outcome.out[-3000:]
    # The probe, and the workload through its own answers: the sampled ones were computed at its batch.
    assert _failed_tests(outcome) == sorted(["test_correctness", *WORKLOAD_TESTS]), outcome.out[-3000:]
    assert re.search(LOAD_ANSWERS_WRONG + r"it answered token \d+ \(logprob -?[\d.]+\), the server's most", outcome.out)
    # Caught at the workload's batch: the prompts' answers against the low pass (argmax mismatch),
    # or the padding's, computed at the peak, against the prompts' (batch disagreements).
    found = r"correctness_(argmax_mismatch|batch_disagreements) at concurrency 64, prompt \d+"
    assert re.search(found, outcome.out), outcome.out[-3000:]
    # The batch reached is what was on the wire at once: above the fault's 36, up to 64 (a loaded
    # client gets the first answers back before it has sent the last requests).
    reached = re.search(r"requests in flight: 8 at concurrency 8, (\d+) at concurrency 64", outcome.out)
    assert reached and 36 < int(reached[1]) <= 64, outcome.out[-3000:]
    (results,) = gate.results.glob("results-*.json")
    doc = json.loads(results.read_text())
    answers = [rep["answers"] for rep in doc["workloads"][0]["repeats"]]
    assert all(a["requests"] == 8 and a["positions"] == 8 * 16 for a in answers), answers
    assert any(a["problem"] and a["mismatches"] > 0.02 * a["positions"] for a in answers), answers
    high = doc["correctness"]["passes"][-1]
    assert (high["concurrency"], high["in_flight"], high["padding"], high["duplicates"]) == (64, int(reached[1]), 54, 2)
    assert not list(gate.baselines.rglob("*.json"))
    _no_traceback(outcome.out)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        # Issue #34: /generate answers cut to 0 or 8 of 16 tokens passed; without output_top_logprobs
        # a wrong model's tokens were not seen (argmax mismatch 0).
        ({"PERFGATE_SIM_CUT_ANSWERS": "0"}, r"/generate gave 0 tokens for prompt \d+, asked for 16"),
        ({"PERFGATE_SIM_CUT_ANSWERS": "8"}, r"/generate gave 8 tokens for prompt \d+, asked for 16"),
        (
            {"PERFGATE_SIM_NO_TOP_LOGPROBS": "1", "PERFGATE_SIM_CORRUPT_RATE": "0.05"},
            r"/generate gave no top logprobs \(meta_info.output_top_logprobs\) for prompt \d+ at 16 of 16 positions",
        ),
    ],
)
def test_an_answer_lacking_what_the_probe_compares_fails(gate: Gate, env: dict[str, str], message: str) -> None:
    profile = _profile(gate)
    assert gate.run("--perf-update-baselines", "-k", "test_correctness", profile=profile).ret == 0
    before = gate.baseline_bytes()
    outcome = gate.run("-rfE", "--perf-update-baselines", "-k", "test_correctness", profile=profile, env=env)
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert _failed_tests(outcome) == ["test_correctness"], outcome.out[-3000:]
    assert re.search("correctness probe stopped: correctness probe: " + message, outcome.out), outcome.out[-3000:]
    assert gate.baseline_bytes() == before
    _no_traceback(outcome.out)


@pytest.mark.long
def test_recording_a_different_model_needs_a_reason(gate: Gate) -> None:
    profile = _profile(gate)
    assert gate.run("--perf-update-baselines", profile=profile).ret == 0
    before = _correctness_file(gate).read_bytes()
    corrupt = {"PERFGATE_SIM_CORRUPT_RATE": "0.05"}
    refused = gate.run("--perf-update-baselines", "-k", "test_correctness", profile=profile, env=corrupt)
    assert refused.ret == FAILED, refused.out[-3000:]
    assert "not recorded: the answers disagree with the recorded reference" in refused.out
    assert _correctness_file(gate).read_bytes() == before
    accepted = gate.run(
        "--perf-update-baselines",
        "-k",
        "test_correctness",
        "--perf-accept-regression=new weights",
        profile=profile,
        env=corrupt,
    )
    assert accepted.ret == 0, accepted.out[-3000:]
    doc = json.loads(_correctness_file(gate).read_text())
    assert doc["provenance"]["reason"] == "new weights"
    # The new reference is the corrupted model's: it now passes, the unchanged one fails.
    assert gate.run("-k", "test_correctness", profile=profile, env=corrupt).ret == 0
    assert gate.run("-k", "test_correctness", profile=profile).ret == FAILED


def test_degenerate_answers_are_never_recorded(gate: Gate) -> None:
    outcome = gate.run(
        "--perf-update-baselines",
        "-k",
        "test_correctness",
        profile=_profile(gate),
        env={"PERFGATE_SIM_NAN_LOGPROBS": "1"},
    )
    assert outcome.ret == FAILED, outcome.out[-3000:]
    assert "not recorded: degenerate answers (correctness_nonfinite" in outcome.out
    assert not list(gate.baselines.rglob("correctness--*.json"))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{broken", "not valid JSON"),
        ("record", "not a valid probe record (prompts must be a non-empty list)"),
        ("schema", "not a valid probe record (correctness record schema 7; this perfgate reads 1)"),
        ("fifo", "it is a FIFO (named pipe), not a regular file"),
    ],
)
def test_an_unusable_reference_stops_the_run_before_boot(gate: Gate, content: str, message: str) -> None:
    profile = _profile(gate)
    assert gate.run("--perf-update-baselines", "-k", "test_correctness", profile=profile).ret == 0
    path = _correctness_file(gate)
    doc = json.loads(path.read_text())
    if content == "fifo":
        path.unlink()
        os.mkfifo(path)
    elif content == "record":
        doc["record"]["prompts"] = "x"
        path.write_text(json.dumps(doc))
    elif content == "schema":
        doc["record"]["schema"] = 7
        path.write_text(json.dumps(doc))
    else:
        path.write_text(content)
    outcome = gate.run(profile=profile)
    assert outcome.ret == INTERRUPTED, outcome.out[-3000:]
    assert message in outcome.out and str(path) in outcome.out, outcome.out[-3000:]
    assert "ready in" not in outcome.out
    _no_traceback(outcome.out)


def test_turning_the_probe_off_needs_a_reason(gate: Gate) -> None:
    refused = gate.run(profile=_profile(gate, "\n[correctness]\nenabled = false\n"))
    assert refused.ret == INTERRUPTED, refused.out[-3000:]
    assert "[correctness] key 'enabled'" in refused.out and 'reason = "why"' in refused.out
    off = gate.run("-rs", profile=_profile(gate, '\n[correctness]\nenabled = false\nreason = "no logprobs here"\n'))
    assert off.ret == 0, off.out[-3000:]
    assert "correctness probe off ([correctness] enabled = false: no logprobs here)" in off.out


@pytest.mark.long
def test_an_engine_that_dies_scoring_is_probed_greedily_with_score_false(gate: Gate) -> None:
    """SGLang 0.5.12's CPU engine answers greedy requests and dies scoring given tokens; the
    simulator's crash_on_prompt_logprobs does the same. score = false keeps the greedy view, which
    still fails a wrong model under the same name."""
    sim = "crash_on_prompt_logprobs = true"
    scored = gate.run("-rfE", profile=gate.profile(tolerance=LOOSEST, correctness=PROBE, sim=sim))
    assert scored.ret == FAILED, scored.out[-3000:]
    assert "the last error in its log: RuntimeError: perfgate.sim cannot score prompt tokens" in scored.out
    refused = gate.run(profile=gate.profile(tolerance=LOOSEST, correctness=PROBE + "score = false\n", sim=sim))
    assert refused.ret == INTERRUPTED and "[correctness] key 'score'" in refused.out, refused.out[-3000:]
    greedy = gate.profile(
        tolerance=LOOSEST, correctness=PROBE + 'score = false\nreason = "dies scoring input logprobs"\n', sim=sim
    )
    recorded = gate.run("-rA", "--perf-update-baselines", f"--perf-results={gate.results}", profile=greedy)
    assert recorded.ret == 0, recorded.out[-3000:]
    (results,) = gate.results.glob("results-*.json")
    probe = json.loads(results.read_text())["correctness"]
    assert probe["recorded"] and {v for p in probe["passes"] for a in p["prompts"] for v in a["views"]} == {"greedy"}
    assert probe["reference"].endswith(", greedy view only (score = false: dies scoring input logprobs)")
    wrong = gate.run("-rfE", profile=greedy, env={"PERFGATE_SIM_CORRUPT_RATE": "0.05"})
    assert wrong.ret == FAILED, wrong.out[-3000:]
    assert _failed_tests(wrong) == ["test_correctness"], wrong.out[-3000:]
    assert "greedy, the reference's token" in wrong.out, wrong.out[-3000:]
    _no_traceback(wrong.out)
