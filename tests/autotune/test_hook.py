"""The hook against SGLang 0.5.12's real model_runner.py, in fresh interpreters."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from perfgate.server.autotune import HOOK_DIR, plan_autotune, verify_autotune_log

HELPER = Path(__file__).with_name("decide_with_stubs.py")
MODULE = "sglang.srt.model_executor.model_runner"
DECISION = "ModelRunner._should_run_flashinfer_autotune"


def _run(sglang_root: Path, mode: str, env: dict[str, str]) -> tuple[dict, str]:
    proc = subprocess.run(
        [sys.executable, str(HELPER), str(sglang_root.parent), MODULE, DECISION, mode],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1]), proc.stderr


def _server_env(sglang_root: Path) -> dict[str, str]:
    plan = plan_autotune("auto", sglang_root)
    assert plan.decision == "patched"
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return plan.apply(base)


def test_cutlass_is_tuned_on_sm120_and_every_other_answer_is_sglangs(sglang_0_5_12: Path) -> None:
    result, stderr = _run(sglang_0_5_12, "grid", _server_env(sglang_0_5_12))
    rows = result["rows"]
    assert len(rows) == 7 * 9 * 2 * 2 * 3
    by_inputs = {
        (tuple(r["capability"]), r["backend"], r["a2a"], r["disable"], r["speculative"], r["draft"]): r for r in rows
    }
    sm120 = by_inputs[((12, 0), "flashinfer_cutlass", "none", False, False, False)]
    assert (sm120["sglang"], sm120["patched"]) == (False, True)
    for (cap, backend, a2a, disable, spec, draft), row in by_inputs.items():
        if backend != "flashinfer_cutlass":
            assert row["patched"] == row["sglang"], row
            continue
        assert row["sglang"] is False
        # flashinfer_cutlass now decides exactly like a backend SGLang 0.5.12 already tunes.
        trtllm = by_inputs[(cap, "flashinfer_trtllm", a2a, disable, spec, draft)]
        assert row["patched"] == trtllm["sglang"], row
        assert row["patched"] == (not disable and cap[0] >= 9 and not (spec and draft)), row
    lines = [line for line in stderr.splitlines() if line.startswith("perfgate-autotune:")]
    assert re.fullmatch(rf"perfgate-autotune: loaded for {MODULE}:{DECISION} in pid \d+", lines[0])
    assert re.search(rf"patched {MODULE}:{DECISION}.* in pid \d+$", lines[1])
    # Every call of the patched decision, and none of the unpatched copy, says what it returned.
    decided = [
        re.fullmatch(rf"perfgate-autotune: decision evaluated {MODULE}:{DECISION} -> (True|False) in pid \d+", line)
        for line in lines[2:]
    ]
    assert all(decided) and [m.group(1) == "True" for m in decided] == [r["patched"] for r in rows]
    evidence = verify_autotune_log(stderr, 1, expect_patch=True)
    assert len(evidence.loaded_pids) == 1 and evidence.patched_pids == evidence.loaded_pids
    assert len(evidence.decisions) == len(rows)


def test_the_hook_reaches_a_spawned_child(sglang_0_5_12: Path) -> None:
    result, stderr = _run(sglang_0_5_12, "spawn", _server_env(sglang_0_5_12))
    assert result["exitcode"] == 0 and result["decision"] is True
    assert result["pid"] != result["parent_pid"]
    evidence = verify_autotune_log(stderr, 1, expect_patch=True)
    assert evidence.patched_pids == (result["pid"],)


def test_without_the_variable_sglang_runs_unchanged(sglang_0_5_12: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(HOOK_DIR)
    result, stderr = _run(sglang_0_5_12, "grid", env)
    assert all(r["patched"] == r["sglang"] for r in result["rows"])
    assert "perfgate-autotune" not in stderr


def test_a_layout_the_hook_cannot_patch_runs_unchanged_and_says_so(sglang_0_5_12: Path, tmp_path: Path) -> None:
    root = tmp_path / "sglang"
    shutil.copytree(sglang_0_5_12 / "srt" / "model_executor", root / "srt" / "model_executor")
    runner = root / "srt" / "model_executor" / "model_runner.py"
    # A release that moved the list to a module constant: nothing for the hook to extend.
    text = runner.read_text()
    start = text.index("if backend_str not in [")
    end = text.index("]:", start) + 2
    runner.write_text(
        text[:start]
        + "if backend_str not in MOE_AUTOTUNE:"
        + text[end:]
        + '\nMOE_AUTOTUNE = ["flashinfer_trtllm", "flashinfer_mxfp4"]\n'
    )
    env = _server_env(sglang_0_5_12)
    result, stderr = _run(root, "grid", env)
    assert all(r["patched"] == r["sglang"] for r in result["rows"])
    assert any(r["sglang"] for r in result["rows"])
    evidence = verify_autotune_log(stderr, 1, expect_patch=True)
    assert not evidence.ok
    assert "FAILED to patch" in evidence.message and "no list of autotuned MoE" in evidence.message


def test_sitecustomize_chains_to_the_one_it_shadows(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import sys\nCHAINED = 'yes'\nsys.stderr.write('other ran\\n')\n")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(HOOK_DIR), str(other)]),
        PERFGATE_FLASHINFER_CUTLASS_AUTOTUNE=f"{MODULE}:{DECISION}",
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, sitecustomize; print(sitecustomize.CHAINED, type(sys.meta_path[0]).__name__)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["yes", "_Finder"]
    assert (
        proc.stderr == f"perfgate-autotune: loaded for {MODULE}:{DECISION} in pid {proc_pid(proc.stderr)}\nother ran\n"
    )


def proc_pid(stderr: str) -> int:
    return int(stderr.splitlines()[0].rsplit(" ", 1)[1])
