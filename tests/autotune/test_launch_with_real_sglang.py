"""The kind = "sglang" launch path against real SGLang wheels (unpacked, not installed).

An interpreter wrapper puts an unpacked wheel on PYTHONPATH, so preflight finds sglang, reads
its version and flags, and plans the autotune exactly as it would on a GPU host. The launch
itself then fails (no torch here), which proves the early-exit path of a real SGLang boot.
"""

from __future__ import annotations

import stat
import sys
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.errors import ServerError
from perfgate.profile import ServerSpec
from perfgate.server import start_server
from perfgate.server._sglang_launch import preflight


def interpreter_with(sglang_root: Path, tmp_path: Path) -> str:
    """A 'python' whose sys.path holds the unpacked wheel (the autotune hook dir is kept in front)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    wrapper = tmp_path / "python-with-sglang"
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{sglang_root.parent}" exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return str(wrapper)


def spec(python: str, *args: str, mode: str = "auto") -> ServerSpec:
    return ServerSpec(
        kind="sglang",
        model_path="zai-org/GLM-5",  # a repo id: no model needs to exist on this host
        python=python,
        args=args,
        flashinfer_cutlass_autotune=mode,
        startup_timeout_s=60,
        shutdown_timeout_s=5,
    )


def test_removed_flag_is_named_with_the_sglang_version(sglang_0_5_23, tmp_path):
    python = interpreter_with(sglang_0_5_23, tmp_path)
    with pytest.raises(ServerError) as exc:
        preflight(spec(python, "--nsa-decode-backend", "trtllm"), python, {})
    msg = str(exc.value)
    assert "--nsa-decode-backend" in msg and "--dsa-decode-backend" in msg and "0.5.23" in msg


def test_0_5_12_is_patched_and_0_5_23_is_native(sglang_0_5_12, sglang_0_5_23, tmp_path):
    args = ("--moe-runner-backend", "flashinfer_cutlass", "--max-running-requests", "1024")
    old = interpreter_with(sglang_0_5_12, tmp_path / "old")
    pre = preflight(spec(old, *args), old, {})
    assert pre.versions["sglang"] == "0.5.12"
    assert pre.plan.decision == "patched"
    env = pre.plan.apply({"PYTHONPATH": "/x"})
    assert env["PYTHONPATH"].startswith(pre.plan.pythonpath_entry) and env["PYTHONPATH"].endswith("/x")
    new = interpreter_with(sglang_0_5_23, tmp_path / "new")
    assert preflight(spec(new, *args), new, {}).plan.decision == "native"


def test_auto_backend_on_0_5_12_warns_that_the_patch_changes_nothing(sglang_0_5_12, tmp_path):
    python = interpreter_with(sglang_0_5_12, tmp_path)
    pre = preflight(spec(python, "--moe-runner-backend", "auto"), python, {})
    assert any("flashinfer_cutlass" in w and "'auto'" in w for w in pre.warnings)


def test_a_real_sglang_that_cannot_start_fails_fast_with_its_log(sglang_0_5_12, tmp_path):
    python = interpreter_with(sglang_0_5_12, tmp_path)
    s = spec(python, "--moe-runner-backend", "flashinfer_cutlass")
    with pytest.raises(ServerError) as exc, ExitStack() as stack:
        start_server(replace(s, port=0), log_dir=tmp_path / "logs", stack=stack)
    msg = str(exc.value)
    assert "exited with code" in msg and "sglang.launch_server" in msg
    # The server's own complaint (here: no torch) is in the message, not just an exit code.
    assert "ModuleNotFoundError" in msg


def test_shipped_sglang_profiles_use_flags_sglang_0_5_23_accepts(sglang_0_5_23):
    from perfgate.profile import load_profile
    from perfgate.server._sglang import check_flags, flags_from_source

    known = flags_from_source(sglang_0_5_23)
    repo = Path(__file__).resolve().parents[2]
    for path in ("profiles/glm5-nvfp4-rtxpro6000x8.toml", "profiles/llama8b-h200.toml"):
        profile = load_profile(repo / path)
        assert profile.server.kind == "sglang"
        warnings = check_flags(profile.server.args, known, "0.5.23")
        assert not any("--disable-cuda-graph" in w for w in warnings)
