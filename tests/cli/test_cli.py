"""The ``perfgate`` command for people: baselines list/show/diff and error exits."""

from __future__ import annotations

from perfgate.baseline import Baseline, BaselineStore, fingerprint_for
from perfgate.cli import main
from perfgate.profile import Workload
from perfgate.verdict import MetricRule

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
    return Baseline("p", W.name, fp, [{"output_throughput": value + i} for i in range(3)], provenance={"date": "2026-11-29"})


def test_list_show_diff(tmp_path, capsys):
    store = BaselineStore(tmp_path)
    rules = [MetricRule("output_throughput", "higher", tolerance=0.05)]
    old = store.save(_baseline(1000.0), rules=rules)
    new = store.save(_baseline(1100.0, gpus=4), rules=rules)
    assert main(["baselines", "list", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "p/c8-in16-out8" in out and "3 repeats" in out and out.count("\n") == 2
    assert main(["baselines", "show", str(old)]) == 0
    out = capsys.readouterr().out
    assert "fingerprint.gpu_count: 8" in out and "output_throughput: 1,001.0 tok/s" in out
    assert main(["baselines", "diff", str(old), str(new)]) == 0
    out = capsys.readouterr().out
    assert "gpu_count" in out and "output_throughput" in out


def test_errors_exit_2_with_one_line(tmp_path, capsys):
    assert main(["baselines", "show", str(tmp_path / "nope.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfgate: baseline ") and "perfgate baselines list" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["baselines", "show", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    assert main(["compare", str(bad), str(bad)]) == 2
    assert "not a perfgate results JSON file" in capsys.readouterr().err


def test_doctor_runs_without_gpu(capsys):
    assert main(["doctor", "--json"]) == 0
    assert capsys.readouterr().out.strip().startswith("{")
