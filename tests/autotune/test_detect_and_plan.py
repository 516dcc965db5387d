from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from perfgate.errors import ServerError
from perfgate.server.autotune import (
    ENV_VAR,
    HOOK_DIR,
    detect_autotune,
    find_sglang_root,
    plan_autotune,
)

MODEL_RUNNER = "srt/model_executor/model_runner.py"
DECISION = "ModelRunner._should_run_flashinfer_autotune"


def test_0_5_12_needs_the_patch(sglang_0_5_12: Path) -> None:
    status = detect_autotune(sglang_0_5_12)
    assert status.status == "patch-needed"
    assert status.sglang_version == "0.5.12"
    assert status.file == str(sglang_0_5_12 / MODEL_RUNNER)
    assert status.function == DECISION
    assert status.hook_target == f"sglang.srt.model_executor.model_runner:{DECISION}"
    assert "flashinfer_cutlass" in status.explanation


def test_0_5_23_autotunes_cutlass_natively(sglang_0_5_23: Path) -> None:
    status = detect_autotune(sglang_0_5_23)
    assert status.status == "native"
    assert status.sglang_version == "0.5.23"
    assert status.file.endswith("srt/model_executor/runner/flashinfer_autotune.py")
    assert status.function == "should_run_flashinfer_autotune"


def _copy_tree(src: Path, dst: Path) -> Path:
    """The parts of an SGLang tree detection reads: version files and model_executor."""
    root = dst / "sglang"
    shutil.copytree(src / "srt" / "model_executor", root / "srt" / "model_executor")
    shutil.copy(src / "_version.py", root / "_version.py")
    return root


@pytest.mark.parametrize(
    "replacement",
    ["if backend_str not in AUTOTUNED_BACKENDS + [\n", "if backend_str not in frozenset([\n"],
    ids=["list-joined-to-a-constant", "list-wrapped-in-a-call"],
)
def test_a_list_the_hook_cannot_extend_safely_is_unknown(sglang_0_5_12: Path, tmp_path: Path, replacement: str) -> None:
    root = _copy_tree(sglang_0_5_12, tmp_path)
    runner = root / MODEL_RUNNER
    text = runner.read_text()
    old = "if backend_str not in [\n"
    assert text.count(old) == 1
    mangled = text.replace(old, replacement)
    if replacement.endswith("([\n"):
        mangled = mangled.replace('# "flashinfer_cutlass",\n        ]:', '# "flashinfer_cutlass",\n        ]):', 1)
    runner.write_text(mangled)
    status = detect_autotune(root)
    assert status.status == "unknown"
    assert status.function == DECISION
    assert "moe_runner_backend" in status.explanation


def test_a_renamed_decision_is_unknown_and_names_what_was_expected(sglang_0_5_12: Path, tmp_path: Path) -> None:
    root = _copy_tree(sglang_0_5_12, tmp_path)
    runner = root / MODEL_RUNNER
    runner.write_text(runner.read_text().replace("_should_run_flashinfer_autotune", "_decide_tuning"))
    status = detect_autotune(root)
    assert status.status == "unknown"
    assert status.sglang_version == "0.5.12"
    assert f"{MODEL_RUNNER}::{DECISION}" in status.explanation
    with pytest.raises(ServerError, match=r"cannot patch SGLang 0\.5\.12 .*model_runner\.py::"):
        plan_autotune("auto", root)


def test_a_tree_without_autotune_code(tmp_path: Path) -> None:
    root = tmp_path / "sglang"
    (root / "srt" / "model_executor").mkdir(parents=True)
    (root / "srt" / "model_executor" / "model_runner.py").write_text("class ModelRunner:\n    pass\n")
    (root / "version.py").write_text('__version__ = "0.5.3"\n')
    status = detect_autotune(root)
    assert (status.status, status.sglang_version) == ("no-autotune", "0.5.3")
    assert plan_autotune("auto", root).decision == "off"
    with pytest.raises(ServerError, match="force"):
        plan_autotune("force", root)


def test_plans(sglang_0_5_12: Path, sglang_0_5_23: Path) -> None:
    patched = plan_autotune("auto", sglang_0_5_12)
    assert patched.decision == "patched"
    assert patched.env == {ENV_VAR: f"sglang.srt.model_executor.model_runner:{DECISION}"}
    assert patched.pythonpath_entry == str(HOOK_DIR)
    assert (HOOK_DIR / "sitecustomize.py").is_file()
    env = patched.apply({"PYTHONPATH": "/opt/x", "HOME": "/root"})
    assert env["PYTHONPATH"].split(":") == [str(HOOK_DIR), "/opt/x"]
    assert env["HOME"] == "/root" and env[ENV_VAR] == patched.env[ENV_VAR]

    assert patched.warnings(["--moe-runner-backend", "flashinfer_cutlass"]) == []
    assert patched.warnings(["--moe-runner-backend=flashinfer_cutlass", "--tp", "8"]) == []
    (warning,) = patched.warnings(["--tp", "8"])
    assert "ask for 'auto'" in warning and "SGLang 0.5.12" in warning

    native = plan_autotune("auto", sglang_0_5_23)
    assert (native.decision, native.env, native.pythonpath_entry) == ("native", {}, "")
    assert native.apply({"A": "1"}) == {"A": "1"}
    assert native.warnings(["--moe-runner-backend", "auto"]) == []

    forced = plan_autotune("force", sglang_0_5_23)
    assert forced.decision == "patched"
    assert forced.env[ENV_VAR].endswith("runner.flashinfer_autotune:should_run_flashinfer_autotune")

    off = plan_autotune("off", sglang_0_5_12)
    assert (off.decision, off.env, off.status.status) == ("off", {}, "patch-needed")
    with pytest.raises(ServerError, match="expected"):
        plan_autotune("sometimes", sglang_0_5_12)


def test_find_sglang_root(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    # An __init__ that would fail if run: find_spec must not execute it.
    (site / "sglang" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    assert find_sglang_root(str(wrapper)) == site / "sglang"
    with pytest.raises(ServerError, match="sglang is not importable by"):
        find_sglang_root(sys.executable)
    with pytest.raises(ServerError, match="no such file"):
        find_sglang_root(str(tmp_path / "missing-python"))


def test_version_of_a_source_checkout_comes_from_its_pyproject(tmp_path):
    from perfgate.server._sglang import resolve_sglang_root, sglang_version_from_tree

    package = tmp_path / "python" / "sglang"
    (package / "srt").mkdir(parents=True)
    (tmp_path / "python" / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.24.dev0"\n')
    root = resolve_sglang_root(tmp_path)
    assert root == package
    assert sglang_version_from_tree(root) == "0.5.24.dev0"
