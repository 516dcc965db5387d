"""The SGLang CPU environment recipe, checked against the real wheels' METADATA (no install)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

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
