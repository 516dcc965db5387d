"""Real SGLang wheels from PyPI for the autotune and doctor tests, downloaded once and kept.

Wheels live in ``$PERFGATE_WHEEL_CACHE`` or ``<repo>/.perfgate-cache/wheels`` (gitignored)
and are unpacked next to them. When PyPI cannot be reached and the cache is empty the
tests fail with a message saying so: a skipped test here would hide a broken patch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    configured = os.environ.get("PERFGATE_WHEEL_CACHE")
    path = Path(configured) if configured else REPO / ".perfgate-cache" / "wheels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sglang_root(version: str) -> Path:
    """The unpacked ``sglang`` package directory of the SGLang ``version`` wheel."""
    cache = cache_dir()
    unpacked = cache / "unpacked" / f"sglang-{version}"
    done = unpacked / ".complete"
    with FileLock(str(cache / f"sglang-{version}.lock")):
        if not done.exists():
            wheel = _wheel(cache, version)
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(unpacked)
            done.touch()
    return unpacked / "sglang"


def _wheel(cache: Path, version: str) -> Path:
    found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    proc = subprocess.run(
        # Fixed target tags: some releases ship only cp311 manylinux wheels, and the
        # sources inside are the same whatever machine runs the tests.
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.11",
            "--platform",
            "manylinux_2_34_x86_64",
            "-d",
            str(cache),
            f"sglang=={version}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    found = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        pytest.fail(
            f"could not download sglang=={version} from PyPI with pip (exit {proc.returncode}); "
            f"these tests need the real wheel. Put it in {cache} (or point "
            f"PERFGATE_WHEEL_CACHE at a directory holding it) to run offline.\n"
            f"{proc.stderr.strip()[-1500:]}",
            pytrace=False,
        )
    return found[0]


@pytest.fixture(scope="session")
def sglang_0_5_12() -> Path:
    """Unpacked SGLang 0.5.12: flashinfer_cutlass left out of autotune (needs the patch)."""
    return sglang_root("0.5.12")


@pytest.fixture(scope="session")
def sglang_0_5_23() -> Path:
    """Unpacked SGLang 0.5.23: flashinfer_cutlass autotuned natively."""
    return sglang_root("0.5.23")
