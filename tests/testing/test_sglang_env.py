"""The SGLang CPU environment recipe, checked against the real wheels' METADATA (no install)."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.testing import _sglang_env
from perfgate.testing._sglang_env import (
    CUDA_ONLY,
    RECIPES,
    SGLangEnvError,
    find_sglang_env,
    recipe_for,
    server_requirements,
)
from perfgate.testing.sglang_env import main
from tests.autotune.sglang_wheels import sglang_root


def metadata(version: str) -> str:
    root = sglang_root(version)
    return next(root.parent.glob(f"sglang-{version}.dist-info")).joinpath("METADATA").read_text()


@pytest.mark.parametrize("version", sorted(RECIPES))
def test_requirements_are_sglangs_own_pins_minus_cuda_only_kernels(version: str) -> None:
    recipe = recipe_for(version)
    keep, skipped = server_requirements(metadata(version), recipe)
    names = [k.split("=")[0].split(">")[0].split("<")[0].split("[")[0].split(";")[0].strip().lower() for k in keep]
    assert f"torch=={recipe.torch}" in keep and f"torchvision=={recipe.torchvision}" in keep
    assert names.count("torch") == 1 and "sglang-kernel" not in names
    assert not set(names) & set(CUDA_ONLY)
    assert set(skipped) <= set(CUDA_ONLY) and "flashinfer-python" in skipped
    # Pinned as SGLang pins them, extras and platform markers resolved for this machine.
    assert "fastapi" in names and "uvloop" in names and not any("extra ==" in k for k in keep)
    pinned = {"0.5.23": "transformers==5.19.0", "0.5.12": "transformers==5.6.0"}[version]
    assert pinned in keep


def test_a_release_whose_kernel_pin_changed_is_refused() -> None:
    with pytest.raises(
        SGLangEnvError, match=re.escape("requires sglang-kernel==0.4.10, but the recipe installs 0.4.9")
    ):
        server_requirements(metadata("0.5.23"), replace(recipe_for("0.5.23"), kernel="0.4.9"))


def test_unknown_releases_and_unwritable_caches_get_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(
        SGLangEnvError, match=re.escape("no CPU recipe for SGLang '0.4.0': known releases are 0.5.12, 0.5.23")
    ):
        recipe_for("0.4.0")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["--version", "0.5.23", "--cache", str(blocker)]) == 2
    assert "cannot write the cache" in capsys.readouterr().err
    assert find_sglang_env("0.5.23", tmp_path) is None


def test_a_build_without_the_disk_it_needs_is_refused_before_anything_is_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # More than any disk has: the check must refuse before apt or pip run (neither is reachable
    # from this test's point of view: nothing but the refusal may happen).
    huge = replace(recipe_for("0.5.23"), build_disk_gb=1e9)
    monkeypatch.setitem(_sglang_env.RECIPES, "0.5.23", huge)
    assert main(["--version", "0.5.23", "--cache", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "holds up to 1e+09 GB of disk under" in err and "GB are free: free space, or pass --cache" in err
    assert not (tmp_path / "libcuda").exists() and not (tmp_path / "0.5.23" / "venv").exists()


def test_a_full_disk_during_a_step_is_named_instead_of_pips_network_advice(tmp_path: Path) -> None:
    enospc = "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
    pip_like = f"import sys; sys.exit({enospc!r})"
    with pytest.raises(SGLangEnvError) as e:
        _sglang_env._run(
            [sys.executable, "-c", pip_like], "installing", "check that PyPI is reachable", log=tmp_path / "build.log"
        )
    msg = str(e.value)
    assert "installing failed (exit 1)" in msg and "[Errno 28] No space left on device" in msg
    assert "-> the disk is full (" in msg and f"GB free under {tmp_path}): free space" in msg
    assert "PyPI" not in msg.split("->")[1]
    assert "No space left on device" in (tmp_path / "build.log").read_text()


def test_uv_installs_into_the_venv_with_bytecode_and_a_cache_that_goes_with_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uv itself is CI's (tox-uv brings it); the unit run need not have it.
    monkeypatch.setattr(_sglang_env, "uv_binary", lambda: "/opt/uv/bin/uv")
    python, tmp = tmp_path / "venv" / "bin" / "python", tmp_path / "tmp"
    uv = _sglang_env._install_command("uv", python, (), tmp)
    assert uv == [
        "/opt/uv/bin/uv", "pip", "install", "--python", str(python), "--compile-bytecode", "--cache-dir",
        str(tmp / "uv-cache"),
    ]  # fmt: skip
    pip = _sglang_env._install_command("pip", python, ("--no-cache-dir",), tmp)
    assert pip == [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-cache-dir"]
    with pytest.raises(SGLangEnvError, match=re.escape("installer uv takes no pip arguments (got --no-cache-dir)")):
        _sglang_env._install_command("uv", python, ("--no-cache-dir",), tmp)


def test_a_missing_uv_or_an_unknown_installer_is_refused_before_anything_is_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # No uv package to import and none on PATH.
    monkeypatch.setitem(sys.modules, "uv", None)
    monkeypatch.setattr(_sglang_env.shutil, "which", lambda name: None)
    assert main(["--version", "0.5.23", "--cache", str(tmp_path), "--installer", "uv"]) == 2
    err = capsys.readouterr().err
    assert "installer uv: no uv executable here" in err and "pip install uv, or build with installer pip" in err
    assert not (tmp_path / "libcuda").exists() and not (tmp_path / "0.5.23" / "venv").exists()
    with pytest.raises(SGLangEnvError, match=re.escape("unknown installer 'conda': use one of pip, uv")):
        _sglang_env.ensure_sglang_env("0.5.23", tmp_path, installer="conda")  # type: ignore[arg-type]
    # pip's cache option means nothing to uv: said, not ignored.
    with pytest.raises(SystemExit) as e:
        main(["--version", "0.5.23", "--cache", str(tmp_path), "--installer", "uv", "--pip-cache-dir", str(tmp_path)])
    assert e.value.code == 2 and "--pip-cache-dir is pip's" in capsys.readouterr().err
