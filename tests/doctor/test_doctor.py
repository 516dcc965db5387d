from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from perfgate.doctor import main
from tests.fake_nvml import FakeClock, FakeGpu, FakeNvml

RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
CNS = 1  # NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED


def two_rtx_pro(p2p: dict, limit_w: float = 600.0, **kw) -> FakeNvml:
    """Two RTX PRO 6000 (SM120) GPUs with the given P2P read statuses, as the pynvml module."""
    gpus = [FakeGpu(uuid=f"GPU-{i}", name=RTX_PRO, compute_capability=(12, 0), limit_w=limit_w) for i in range(2)]
    return FakeNvml(FakeClock(), gpus, p2p=p2p, driver_version="580.95.05", **kw)


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_json_report_for_an_unpacked_0_5_12(monkeypatch, capsys, sglang_0_5_12: Path) -> None:
    nvml = two_rtx_pro({(0, 1): CNS, (1, 0): CNS})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    code, out = run(capsys, "--json", "--sglang-root", str(sglang_0_5_12))
    assert code == 0
    report = json.loads(out)
    assert report["python"] == sys.executable
    assert set(report["versions"]) == {"sglang", "flashinfer", "sgl-kernel", "torch", "cuda", "error"}
    assert report["nvml"] == {
        "available": True,
        "error": None,
        "driver": "580.95.05",
        "gpus": [
            {"index": i, "name": RTX_PRO, "uuid": f"GPU-{i}", "compute_capability": "12.0", "power_limit_w": 600.0}
            for i in range(2)
        ],
        "p2p_read": [["X", "CNS"], ["CNS", "X"]],
    }
    autotune = report["autotune"]
    assert autotune["status"] == "patch-needed"
    assert autotune["sglang_version"] == "0.5.12"
    assert autotune["function"] == "ModelRunner._should_run_flashinfer_autotune"
    assert autotune["file"].endswith("srt/model_executor/model_runner.py")
    assert nvml.initialised == 0


def test_text_report_for_an_unpacked_0_5_23(monkeypatch, capsys, sglang_0_5_23: Path) -> None:
    # A 300 W Max-Q card: the limit comes from NVML, never from the model name.
    nvml = two_rtx_pro({(0, 1): 0, (1, 0): FakeNvml.NVMLError(FakeNvml.NVML_ERROR_UNKNOWN)}, limit_w=300.0)
    nvml.gpus[1].fail["nvmlDeviceGetEnforcedPowerLimit"] = FakeNvml.NVML_ERROR_NOT_SUPPORTED
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    code, out = run(capsys, "--sglang-root", str(sglang_0_5_23))
    assert code == 0
    assert f"GPU0  {RTX_PRO}  sm_120  enforced power limit 300 W" in out
    assert f"GPU1  {RTX_PRO}  sm_120  enforced power limit unknown" in out
    assert "GPUs         2 (NVIDIA driver 580.95.05)" in out
    p2p_rows = [
        line.split()
        for line in out.splitlines()
        if line.strip().startswith("GPU") and "sm_" not in line and "GPUs" not in line
    ]
    assert p2p_rows == [["GPU0", "GPU1"], ["GPU0", "X", "OK"], ["GPU1", "ERR", "X"]]
    assert "autotune     native: SGLang 0.5.23 lists flashinfer_cutlass" in out


def test_no_nvml_library(monkeypatch, capsys, sglang_0_5_12: Path) -> None:
    broken = FakeNvml(FakeClock(), [], init_error=FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    code, out = run(capsys, "--sglang-root", str(sglang_0_5_12))
    assert code == 0
    assert "GPUs         none visible: NVML not available: nvmlInit failed (NVML error 12); no NVIDIA driver" in out
    assert "P2P" not in out


def test_no_binding(monkeypatch, capsys, sglang_0_5_12: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    code, out = run(capsys, "--json", "--sglang-root", str(sglang_0_5_12))
    nvml = json.loads(out)["nvml"]
    assert code == 0
    assert nvml["available"] is False
    assert nvml["error"].startswith("NVML not available: nvidia-ml-py is not importable")


def test_the_installed_sglang_of_an_interpreter(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(FakeClock(), []))
    code, out = run(capsys, "--json")
    assert code == 0
    # This test interpreter has no sglang.
    assert json.loads(out)["autotune"]["status"] == "sglang not installed"
    assert json.loads(out)["nvml"]["gpus"] == []

    site = tmp_path / "site"
    runner = site / "sglang" / "srt" / "model_executor" / "model_runner.py"
    runner.parent.mkdir(parents=True)
    runner.write_text("class ModelRunner:\n    pass\n")
    (site / "sglang" / "__init__.py").write_text("raise RuntimeError('imported')\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    code, out = run(capsys, "--python", str(python))
    assert code == 0
    assert "autotune     no-autotune: SGLang unknown has no FlashInfer autotune" in out


def test_sglang_root_takes_a_wheel_root_a_checkout_or_the_package(
    monkeypatch, capsys, tmp_path: Path, sglang_0_5_12: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(FakeClock(), []))
    wheel_root = sglang_0_5_12.parent
    # A source checkout keeps the package under python/ and its version in python/pyproject.toml.
    checkout = tmp_path / "sglang-repo"
    (checkout / "python").mkdir(parents=True)
    (checkout / "python" / "sglang").symlink_to(sglang_0_5_12, target_is_directory=True)
    (checkout / "python" / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.12"\n')
    for given in (sglang_0_5_12, wheel_root, checkout):
        code, out = run(capsys, "--json", "--sglang-root", str(given))
        autotune = json.loads(out)["autotune"]
        assert code == 0, given
        assert autotune["status"] == "patch-needed" and autotune["sglang_version"] == "0.5.12", given


def test_bad_arguments(capsys, tmp_path: Path) -> None:
    assert main(["--sglang-root", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert "is not an SGLang package directory, unpacked wheel or source checkout" in err
    assert str(tmp_path / "missing" / "python" / "sglang" / "srt") in err
    with pytest.raises(SystemExit) as exit_info:
        main(["--no-such-option"])
    assert exit_info.value.code == 2
