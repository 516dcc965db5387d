"""Names never become paths unchecked; paths that are not files never hang a run (issue #18, 4-5).

Gate cases run ``pytest perf_tests`` in a subprocess (tests/faults/conftest.py); each asserts
the exit code, the one message, the baselines byte-identical unless it records, and, for a
path that is not a file, that the run ended well within a minute (a FIFO used to hang forever).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest

from perfgate.baseline import Baseline, BaselineStore, Fingerprint
from perfgate.errors import BaselineError
from perfgate.verdict import MetricRule, ToleranceCheck
from tests.faults.conftest import Gate, Outcome
from tests.support import is_workload_baseline

FAILED, INTERRUPTED, USAGE = (
    int(pytest.ExitCode.TESTS_FAILED),
    int(pytest.ExitCode.INTERRUPTED),
    int(pytest.ExitCode.USAGE_ERROR),
)
WORKLOAD = "c16-in32-out16"
# Well short of "forever" and of the harness's 300 s; a refused run takes a few seconds.
PROMPT_S = 60.0


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string, every non-printable character escaped."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable() and ch != "\x7f":
            out.append(ch)
        else:
            out.append(f"\\U{ord(ch):08X}")
    return '"' + "".join(out) + '"'


def second_workload(name: str) -> str:
    return (
        f"\n[[workload]]\nname = {toml_string(name)}\nnum_prompts = 32\nconcurrency = 16\ninput_len = 32\n"
        "output_len = 16\nwarmup_requests = 2\n"
    )


def timed(gate: Gate, *args: str, profile: Path | None = None, **parts: str) -> tuple[Outcome, float]:
    start = time.monotonic()
    outcome = gate.run(*args, profile=profile, **parts)
    return outcome, time.monotonic() - start


def refused_before_boot(outcome: Outcome, code: int, message: str) -> None:
    assert outcome.ret == code, outcome.out[-3000:]
    assert message in outcome.out, outcome.out[-3000:]
    assert "Traceback" not in outcome.out and "ready in" not in outcome.out, outcome.out[-3000:]


# -- names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("../../../x", "contains a path separator"),
        ("/tmp/perfgate-anywhere", "contains a path separator"),
        ("team/prod", "contains a path separator"),
        ("a\\b", "contains a path separator"),
        ("..", "contains '..'"),
        ("up..x", "contains '..'"),
        ("x\x1b[2Jy", "contains the control character U+001B"),
        ("nul\x00x", "contains the control character U+0000"),
        ("evil\u202etxt.exe", "contains the control character U+202E"),
        (" padded", "starts or ends with white space"),
        ("x" * 121, "is 121 bytes of UTF-8, more than the 120"),
        ("é" * 61, "is 122 bytes of UTF-8"),
    ],
    ids=[
        "climb",
        "absolute",
        "slash",
        "backslash",
        "dotdot",
        "inner-dotdot",
        "escape",
        "nul",
        "bidi",
        "pad",
        "long",
        "long-utf8",
    ],
)
def test_a_workload_name_that_is_no_file_name_is_refused_at_load(gate: Gate, name: str, problem: str) -> None:
    outcome, elapsed = timed(gate, f"--perf-results={gate.results}", workload=f"name = {toml_string(name)}")
    refused_before_boot(outcome, INTERRUPTED, "[[workload]] #1 key 'name': ")
    assert problem in outcome.out and "names become file names" in outcome.out, outcome.out[-3000:]
    assert outcome.out.count(problem) == 1, outcome.out[-3000:]
    assert gate.baseline_bytes() == {} and not gate.results.exists()
    assert elapsed < PROMPT_S


def test_a_profile_name_that_is_no_file_name_is_refused_at_load(gate: Gate) -> None:
    text = gate.profile().read_text().replace('name = "faults"', 'name = "team/prod"', 1)
    outcome = gate.run(f"--perf-results={gate.results}", profile=gate.write("team.toml", text))
    refused_before_boot(outcome, INTERRUPTED, "top level key 'name': 'team/prod' contains a path separator")
    assert gate.baseline_bytes() == {} and not gate.results.exists()


def test_a_sweep_point_name_too_long_is_refused_at_load(gate: Gate) -> None:
    # The name given passes; the point name derived from it (name@c16) does not.
    base = "s" * 117
    workload = f'name = "{base}"\nslo = {{ ttft_ms = 60000 }}'
    text = gate.profile(workload=workload).read_text().replace("concurrency = 16", "concurrency = [8, 16]")
    outcome = gate.run(profile=gate.write("sweep.toml", text))
    refused_before_boot(outcome, INTERRUPTED, f"key 'name': '{base}@c16' is 121 bytes of UTF-8")
    assert gate.baseline_bytes() == {}


NFC = unicodedata.normalize("NFC", "café")
NFD = unicodedata.normalize("NFD", "café")


@pytest.mark.parametrize(
    ("first", "second", "how"),
    [
        ("a b", "a_b", "would share the file name 'a_b'"),
        ("x@c16", "x_c16", "would share the file name 'x_c16'"),
        ("Chat", "chat", "would share the file name 'chat'"),
        (NFC, NFD, "differ only in case or Unicode normalisation"),
        ("Ärger", "ärger", "differ only in case or Unicode normalisation"),
    ],
    ids=["sanitised", "at-sign", "case", "nfc-nfd", "non-latin-case"],
)
def test_names_that_would_share_a_file_are_refused_at_load(gate: Gate, first: str, second: str, how: str) -> None:
    text = gate.profile(workload=f"name = {toml_string(first)}").read_text() + second_workload(second)
    outcome = gate.run(profile=gate.write("pair.toml", text))
    refused_before_boot(outcome, INTERRUPTED, f"[[workload]] #2 ({second}) key 'name': {second!r} and {first!r}")
    assert how in outcome.out and "rename one of them" in outcome.out, outcome.out[-3000:]
    assert gate.baseline_bytes() == {}


def test_non_latin_names_get_a_baseline_each_and_are_both_gated(gate: Gate) -> None:
    # Both used to be stored as faults/_--<fingerprint>.json: the second overwrote the first,
    # which was then ungated while the run exited 0.
    text = gate.profile(workload='name = "チャット"').read_text() + second_workload("会話")
    profile = gate.write("cjk.toml", text)
    recorded = gate.run("--perf-update-baselines", profile=profile)
    assert recorded.ret == 0, recorded.out[-3000:]
    files = sorted(f for f in gate.baseline_bytes() if is_workload_baseline(f))
    assert len(files) == 2, files
    stored = {json.loads((gate.baselines / f).read_text())["workload"]: f for f in files}
    assert set(stored) == {"チャット", "会話"}
    assert all(f.startswith("faults/u-") for f in files), files
    gated = gate.run(profile=profile)
    assert gated.ret == 0, gated.out[-3000:]
    assert "no-baseline" not in gated.out and "no baseline" not in gated.out, gated.out[-3000:]
    assert sorted(f for f in gate.baseline_bytes() if is_workload_baseline(f)) == files


def test_safe_names_keep_their_file_names(gate: Gate) -> None:
    # A derived name and a given one: committed baselines must still be found under them.
    text = gate.profile().read_text() + second_workload("chat-c16.v2")
    recorded = gate.run("--perf-update-baselines", profile=gate.write("safe.toml", text))
    assert recorded.ret == 0, recorded.out[-3000:]
    stems = sorted(f.split("--")[0] for f in gate.baseline_bytes() if f.endswith(".json"))
    assert stems == [f"faults/{WORKLOAD}", "faults/chat-c16.v2"]


def test_another_profile_sharing_the_folder_is_never_overwritten(tmp_path: Path) -> None:
    # "team prod" and "team_prod" share baselines/team_prod/; only the store can see both.
    fp = Fingerprint("NVIDIA H200", 1, 700, "580", "sglang", "/m", ())
    store, rules = BaselineStore(tmp_path), [MetricRule("output_throughput", "higher", 0.05)]
    first = store.save(Baseline("team prod", "c8", fp, [{"output_throughput": 1.0}] * 3), check=ToleranceCheck(rules))
    before = first.read_bytes()
    with pytest.raises(BaselineError, match=r"holds profile 'team prod' workload 'c8', whose names share"):
        store.save(Baseline("team_prod", "c8", fp, [{"output_throughput": 2.0}] * 3), check=ToleranceCheck(rules))
    assert first.read_bytes() == before


# -- paths that are not files ---------------------------------------------------------------------


def inputs(gate: Gate) -> Path:
    """A folder of the case's own for FIFOs and links (the hygiene check allows it)."""
    folder = gate.root / "inputs"
    folder.mkdir(exist_ok=True)
    gate.allowed.append(folder)
    return folder


def test_a_fifo_in_the_baselines_folder_is_named_not_read(gate: Gate) -> None:
    fifo = gate.baselines / "faults" / f"{WORKLOAD}--2xsim--000000000000.json"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    outcome, elapsed = timed(gate)
    refused_before_boot(outcome, INTERRUPTED, f"baseline {fifo}: it is a FIFO (named pipe), not a regular file")
    assert "1 baseline file(s) of profile 'faults' cannot be used; nothing was run" in outcome.out
    assert elapsed < PROMPT_S
    assert gate.baseline_bytes() == {}


def test_a_link_out_of_the_baselines_folder_is_named_not_read(gate: Gate) -> None:
    outside = inputs(gate) / "elsewhere.json"
    outside.write_text("{}")
    link = gate.baselines / "faults" / f"{WORKLOAD}--2xsim--000000000000.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    outcome = gate.run()
    refused_before_boot(outcome, INTERRUPTED, f"baseline {link}: a symbolic link to {outside}, outside the baselines")


def test_a_baseline_with_a_key_twice_is_named_before_boot(gate: Gate) -> None:
    # The last of two "output_throughput" keys was taken: a 1.0 floor made any run pass.
    path = gate.baselines / "faults" / f"{WORKLOAD}--2xsim--000000000000.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"schema_version": 1, "repeats": [{"output_throughput": 900.0, "output_throughput": 1.0}]}')
    outcome = gate.run()
    refused_before_boot(outcome, INTERRUPTED, f"baseline {path}: the key 'output_throughput' twice in one object")
    assert "1 baseline file(s) of profile 'faults' cannot be used; nothing was run" in outcome.out


def test_results_inside_the_baseline_store_are_refused(gate: Gate) -> None:
    # They were written there, and the next gate read them as broken baselines.
    inside = gate.baselines / "faults"
    outcome = gate.run(f"--perf-results={inside}")
    refused_before_boot(
        outcome, USAGE, f"--perf-results {inside}: lies inside the baseline store {gate.baselines} (--perf-baselines)"
    )
    assert not gate.baselines.exists()


@pytest.mark.parametrize("kind", ["fifo", "directory", "socket"])
def test_a_profile_that_is_not_a_file_is_refused(gate: Gate, kind: str) -> None:
    path = inputs(gate) / "profile.toml"
    with socket.socket(socket.AF_UNIX) as sock:
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        else:
            sock.bind(str(path))
        outcome, elapsed = timed(gate, profile=path)
    shown = {"fifo": "a FIFO (named pipe)", "directory": "a directory", "socket": "a socket"}[kind]
    refused_before_boot(
        outcome, INTERRUPTED, f"profile {path}: it is {shown}, not a regular file; pass a profile TOML file"
    )
    assert elapsed < PROMPT_S


def test_a_dataset_that_is_a_fifo_fails_the_workload_without_hanging(gate: Gate) -> None:
    fifo = inputs(gate) / "sharegpt.json"
    os.mkfifo(fifo)
    text = gate.profile(workload=f'dataset = "sharegpt"\ndataset_path = "{fifo}"').read_text()
    outcome, elapsed = timed(gate, profile=gate.write("sharegpt.toml", text.replace("input_len = 32\n", "")))
    assert outcome.ret == INTERRUPTED, outcome.out[-3000:]
    assert f"dataset_path {fifo}: cannot be read (it is a FIFO (named pipe), not a regular file)" in outcome.out
    assert elapsed < PROMPT_S
    assert gate.baseline_bytes() == {}


def test_a_step_summary_that_is_a_fifo_nobody_reads_is_one_line_and_the_verdict_stands(gate: Gate) -> None:
    # It hung the run after the tests, until CI killed it.
    fifo = inputs(gate) / "step-summary"
    os.mkfifo(fifo)
    start = time.monotonic()
    outcome = gate.run(f"--perf-results={gate.results}", env={"GITHUB_STEP_SUMMARY": str(fifo)})
    assert outcome.ret == 0, outcome.out[-3000:]
    assert time.monotonic() - start < PROMPT_S
    assert f"results: {fifo}: not written: it is a FIFO (named pipe), not a regular file" in outcome.out
    assert len(list(gate.results.glob("results-*/summary.md"))) == 1


# -- the perfgate command -------------------------------------------------------------------------


def perfgate(*args: str) -> subprocess.CompletedProcess[str]:
    """The command in a subprocess: a reader that hangs fails the case instead of the suite."""
    argv = [sys.executable, "-m", "perfgate.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=PROMPT_S, check=False)


def test_compare_of_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "results-a.json"
    os.mkfifo(fifo)
    other = tmp_path / "results-b.json"
    other.write_text('{"workloads": []}')
    proc = perfgate("compare", str(fifo), str(other))
    assert proc.returncode == 2
    assert proc.stderr == (
        f"perfgate: results {fifo}: it is a FIFO (named pipe), not a regular file; pass a results-*.json file "
        "that --perf-results wrote\n"
    )


def test_baselines_list_and_show_name_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "p" / "c8--x--000000000000.json"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    listed = perfgate("baselines", "list", "--dir", str(tmp_path))
    assert listed.returncode == 2
    assert f"perfgate: baseline {fifo}: it is a FIFO (named pipe), not a regular file" in listed.stderr
    shown = perfgate("baselines", "show", str(fifo))
    assert shown.returncode == 2
    assert shown.stderr.count("\n") == 1 and "it is a FIFO (named pipe), not a regular file" in shown.stderr


def test_baselines_list_of_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    proc = perfgate("baselines", "list", "--dir", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert proc.stderr == (
        f"perfgate: --dir {tmp_path / 'nope'}: does not exist; pass the baselines folder, e.g. --dir baselines\n"
    )
    assert proc.stdout == ""


def test_baselines_show_of_a_folder_says_what_to_pass(tmp_path: Path) -> None:
    proc = perfgate("baselines", "show", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"perfgate: baseline {tmp_path}: is a folder; pass baseline files")
    assert f"perfgate baselines list --dir {tmp_path}" in proc.stderr and "delete" not in proc.stderr
