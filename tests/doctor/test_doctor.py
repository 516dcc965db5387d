from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from perfgate.doctor import main


class FakeNVMLError(Exception):
    pass


def fake_pynvml(gpus: list[dict], p2p: dict[tuple[int, int], int], init_error: str = "") -> types.ModuleType:
    """A pynvml stand-in: GPUs as dicts, P2P read status per (a, b) pair."""
    module = types.ModuleType("pynvml")
    module.NVMLError = FakeNVMLError
    calls: list[tuple] = []
    module.calls = calls

    def init() -> None:
        if init_error:
            raise FakeNVMLError(init_error)

    def field(key):
        def get(handle):
            value = gpus[handle][key]
            if isinstance(value, Exception):
                raise value
            return value
        return get

    def p2p_status(a: int, b: int, index) -> int:
        calls.append(("p2p", a, b, index))
        # The real binding's NVML_P2P_CAPS_INDEX_READ is the tuple (0,): NVML needs the int.
        assert index == 0 and isinstance(index, int)
        status = p2p[(a, b)]
        if isinstance(status, Exception):
            raise status
        return status

    module.nvmlInit = init
    module.nvmlShutdown = lambda: calls.append(("shutdown",))
    module.nvmlDeviceGetCount = lambda: len(gpus)
    module.nvmlDeviceGetHandleByIndex = lambda i: i
    module.nvmlSystemGetDriverVersion = lambda: b"580.95.05"
    module.nvmlDeviceGetName = field("name")
    module.nvmlDeviceGetUUID = field("uuid")
    module.nvmlDeviceGetCudaComputeCapability = field("cc")
    module.nvmlDeviceGetEnforcedPowerLimit = field("limit_mw")
    module.nvmlDeviceGetP2PStatus = p2p_status
    return module


RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def two_rtx_pro(limit_mw=600000) -> list[dict]:
    return [
        {"name": RTX_PRO, "uuid": f"GPU-{i}", "cc": (12, 0), "limit_mw": limit_mw} for i in range(2)
    ]


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_json_report_for_an_unpacked_0_5_12(monkeypatch, capsys, sglang_0_5_12: Path) -> None:
    nvml = fake_pynvml(two_rtx_pro(), {(0, 1): 1, (1, 0): 1})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    code, out = run(capsys, "--json", "--sglang-root", str(sglang_0_5_12))
    assert code == 0
    report = json.loads(out)
    assert report["python"] == sys.executable
    assert set(report["versions"]) == {"sglang", "flashinfer", "torch", "cuda", "error"}
    assert report["nvml"] == {
        "available": True,
        "error": None,
        "driver": "580.95.05",
        "gpus": [
            {"index": i, "name": RTX_PRO, "uuid": f"GPU-{i}", "compute_capability": "12.0",
             "power_limit_w": 600.0}
            for i in range(2)
        ],
        "p2p_read": [["X", "CNS"], ["CNS", "X"]],
    }
    autotune = report["autotune"]
    assert autotune["status"] == "patch-needed"
    assert autotune["sglang_version"] == "0.5.12"
    assert autotune["function"] == "ModelRunner._should_run_flashinfer_autotune"
    assert autotune["file"].endswith("srt/model_executor/model_runner.py")
    assert ("shutdown",) in nvml.calls


def test_text_report_for_an_unpacked_0_5_23(monkeypatch, capsys, sglang_0_5_23: Path) -> None:
    # A 300 W Max-Q card: the limit comes from NVML, never from the model name.
    gpus = two_rtx_pro(limit_mw=300000)
    gpus[1]["limit_mw"] = FakeNVMLError("Not Supported")
    nvml = fake_pynvml(gpus, {(0, 1): 0, (1, 0): FakeNVMLError("Unknown Error")})
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    code, out = run(capsys, "--sglang-root", str(sglang_0_5_23))
    assert code == 0
    assert f"GPU0  {RTX_PRO}  sm_120  enforced power limit 300 W" in out
    assert f"GPU1  {RTX_PRO}  sm_120  enforced power limit unknown" in out
    assert "GPUs         2 (NVIDIA driver 580.95.05)" in out
    p2p_rows = [line.split() for line in out.splitlines() if line.strip().startswith("GPU") and "sm_" not in line and "GPUs" not in line]
    assert p2p_rows == [["GPU0", "GPU1"], ["GPU0", "X", "OK"], ["GPU1", "ERR", "X"]]
    assert "autotune     native: SGLang 0.5.23 lists flashinfer_cutlass" in out


def test_no_nvml_library(monkeypatch, capsys, sglang_0_5_12: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], {}, init_error="NVML Shared Library Not Found"))
    code, out = run(capsys, "--sglang-root", str(sglang_0_5_12))
    assert code == 0
    assert "GPUs         none visible: NVML could not start: NVML Shared Library Not Found" in out
    assert "P2P" not in out


def test_no_binding(monkeypatch, capsys, sglang_0_5_12: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    code, out = run(capsys, "--json", "--sglang-root", str(sglang_0_5_12))
    nvml = json.loads(out)["nvml"]
    assert code == 0
    assert nvml["available"] is False and "nvidia-ml-py is not importable" in nvml["error"]


def test_the_installed_sglang_of_an_interpreter(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], {}))
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


def test_sglang_root_takes_a_wheel_root_a_checkout_or_the_package(monkeypatch, capsys, tmp_path: Path, sglang_0_5_12: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([], {}))
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
