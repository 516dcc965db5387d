"""``import perfgate``: its version and its short public API, imported on first use."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys

import pytest

import perfgate


def test_the_version_is_the_installed_distributions() -> None:
    assert perfgate.__version__ == importlib.metadata.version("perfgate")
    from perfgate.baseline import perfgate_version

    assert perfgate_version() == perfgate.__version__


def test_every_public_name_is_the_one_its_package_defines() -> None:
    for name in perfgate.__all__:
        if name == "__version__":
            continue
        module = importlib.import_module(perfgate._API[name])
        assert getattr(perfgate, name) is getattr(module, name), name
    assert sorted(dir(perfgate)) == sorted(perfgate.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        perfgate.nothing_here  # noqa: B018


def test_importing_perfgate_imports_no_stage() -> None:
    code = "import perfgate, sys; print(sorted(m for m in sys.modules if m.startswith('perfgate.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
