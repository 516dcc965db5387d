"""The ``perfgate`` command for people: baselines list/show/diff and error exits."""

from __future__ import annotations

import json
import sys

import pytest

from perfgate.baseline import Baseline, BaselineStore, fingerprint_for
from perfgate.cli import main
from perfgate.profile import Workload
from perfgate.verdict import MetricRule, ToleranceCheck
from tests.fake_nvml import make, uuids

W = Workload(name="c8-in16-out8", num_prompts=8, concurrency=8, input_len=16, output_len=8)


def _baseline(value: float, gpus: int = 8) -> Baseline:
    fp = fingerprint_for(
        gpu_model="NVIDIA H200",
        gpu_count=gpus,
        power_limit_w=700.0,
        driver_version="580.1.2",
        engine="sglang",
        model="/m",
        server_args=["--tp-size", str(gpus)],
        workload=W,
    )
    return Baseline(
        "p", W.name, fp, [{"output_throughput": value + i} for i in range(3)], provenance={"date": "2026-11-29"}
    )


def test_list_show_diff(tmp_path, capsys):
    store = BaselineStore(tmp_path)
    rules = [MetricRule("output_throughput", "higher", tolerance=0.05)]
    old = store.save(_baseline(1000.0), check=ToleranceCheck(rules))
    new = store.save(_baseline(1100.0, gpus=4), check=ToleranceCheck(rules))
    assert main(["baselines", "list", "--dir", str(tmp_path)]) == 0
    listed = sorted(line.split("  ") for line in capsys.readouterr().out.splitlines())
    assert listed == [
        [str(new), "p/c8-in16-out8", "4xh200-700W", "3 repeats", "2026-11-29"],
        [str(old), "p/c8-in16-out8", "8xh200-700W", "3 repeats", "2026-11-29"],
    ]
    assert main(["baselines", "show", str(old)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == f"{old}: p/c8-in16-out8"
    assert "  fingerprint.gpu_count: 8" in shown and "  provenance.date: 2026-11-29" in shown
    # The median of the three repeats 1000, 1001, 1002.
    assert shown[-1] == "  output_throughput: 1,001.0 tok/s"
    assert main(["baselines", "diff", str(old), str(new)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "fingerprint gpu_count: 8 -> 4",
        "fingerprint server_args: ['--tp-size=8'] -> ['--tp-size=4']",
        "output_throughput 1,001.0 -> 1,101.0 tok/s (+10.0%)",
    ]


def test_errors_exit_2_with_one_line(tmp_path, capsys):
    assert main(["baselines", "show", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err == (
        f"perfgate: baseline {tmp_path / 'nope.json'}: file not found; `perfgate baselines list` shows the stored "
        f"ones\n"
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["baselines", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfgate: baseline {bad}: not valid JSON (") and err.count("\n") == 1
    assert main(["compare", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"perfgate: results {bad}: not a perfgate results JSON file: not valid JSON (")
        and err.count("\n") == 1
    )


def test_doctor_json_through_the_cli(capsys, monkeypatch):
    _, nvml = make(2)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"python", "versions", "nvml", "autotune"}
    assert report["python"] == sys.executable
    # This test interpreter has neither SGLang nor FlashInfer.
    assert set(report["versions"]) == {"sglang", "flashinfer", "sgl-kernel", "torch", "cuda", "error"}
    assert report["versions"]["sglang"] is None and report["versions"]["flashinfer"] is None
    assert report["nvml"]["available"] is True and report["nvml"]["driver"] == "580.159.04"
    assert report["nvml"]["gpus"] == [
        {"index": i, "name": "Fake H200", "uuid": uuids(2)[i], "compute_capability": "9.0", "power_limit_w": 700.0}
        for i in range(2)
    ]
    assert report["nvml"]["p2p_read"] == [["X", "OK"], ["OK", "X"]]
    assert report["autotune"]["status"] == "sglang not installed"
    assert report["autotune"]["explanation"] == f"sglang is not importable by {sys.executable}"


HOSTILE = {
    "deep": ("[" * 100_000 + "]" * 100_000, "nested 100,000 levels deep"),
    "long number": ('{"workloads": [], "schema_version": ' + "7" * 5000 + "}", "a number of 5,000 digits"),
    "key twice": ('{"workloads": [], "workloads": []}', "the key 'workloads' twice in one object"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_json_is_one_line_and_the_error_exit(tmp_path, capsys, case):
    # compare exited 1, the regression code, after a traceback.
    text, why = HOSTILE[case]
    bad = tmp_path / "p" / "bad.json"
    bad.parent.mkdir()
    bad.write_text(text)
    assert main(["compare", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfgate: results {bad}: not a perfgate results JSON file: {why}") and err.count("\n") == 1
    assert main(["baselines", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfgate: baseline {bad}: {why}") and err.count("\n") == 1
    assert main(["baselines", "list", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfgate: baseline {bad}: {why}") and err.count("\n") == 1


def test_ab_results_inside_the_baseline_store_are_refused(tmp_path, capsys):
    profile = tmp_path / "p.toml"
    profile.write_text("")
    store = tmp_path / "baselines"
    assert main(["ab", str(profile), "--baselines", str(store), "--results", str(store / "p")]) == 2
    assert capsys.readouterr().err == (
        f"perfgate: --results {store / 'p'}: lies inside the baseline store {store} (--baselines), and the next run "
        "would read the files written there as baselines; pass a folder outside it\n"
    )
