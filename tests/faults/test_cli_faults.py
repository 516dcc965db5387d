"""The fault matrix of the ``perfgate`` command: nothing compared is never "no regression"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.baseline import Baseline, BaselineStore, fingerprint_for
from perfgate.cli import main
from perfgate.profile import Workload
from perfgate.verdict import MetricRule, ToleranceCheck

TPUT = {"metric": "output_throughput", "direction": "higher", "tolerance": 0.05, "floor": None, "ceiling": None}


def results(
    path: Path,
    workloads: dict[str, list[float]],
    *,
    rules: list[dict] | None = None,
    error: str = "",
    boots: list[object] | None = None,
    server: object = None,
) -> Path:
    """A results file as --perf-results writes it (the parts compare reads); ``boots`` labels each
    workload's repeats with their boot (left out: no label, as files written before boots were)."""
    doc = {
        "schema_version": 1,
        "server": server,
        "workloads": [
            {
                "workload": name,
                "rules": rules if rules is not None else [TPUT],
                "error": error,
                "repeats": [
                    {"values": {"completed": 32.0, "output_throughput": v, "mean_tpot_ms": 1000 / v}}
                    | ({"boot": boots[i]} if boots is not None else {})
                    for i, v in enumerate(values)
                ],
            }
            for name, values in workloads.items()
        ],
    }
    path.write_text(json.dumps(doc))
    return path


def test_compare_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = results(tmp_path / "a.json", {"c64": [1000.0, 1010.0, 990.0]})
    same = results(tmp_path / "b.json", {"c64": [1005.0, 995.0, 1000.0]})
    slower = results(tmp_path / "c.json", {"c64": [800.0, 810.0, 790.0]})
    assert main(["compare", str(base), str(same)]) == 0
    assert "no regression" in capsys.readouterr().out
    assert main(["compare", str(base), str(slower)]) == 1
    assert "FAIL  c64: output_throughput 800.0 tok/s < limit" in capsys.readouterr().out


def test_compare_names_what_changed_between_the_runs_servers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = {"versions": {"sglang": "0.5.12", "flashinfer": "0.6.11"}}
    base = results(tmp_path / "a.json", {"c64": [1000.0, 1010.0, 990.0]}, server=a)
    slower = results(
        tmp_path / "c.json",
        {"c64": [800.0, 810.0, 790.0]},
        server={"versions": {"sglang": "0.5.23", "flashinfer": "0.6.11"}},
    )
    assert main(["compare", str(base), str(slower)]) == 1
    out = capsys.readouterr().out
    assert "changed 1: sglang 0.5.12 -> 0.5.23\n" in out and out.index("changed 1") < out.index("FAIL")
    # A file whose "server" is no object (or absent, as before it was read) names nothing.
    for hostile in (None, [1], "x"):
        results(tmp_path / "c.json", {"c64": [800.0, 810.0, 790.0]}, server=hostile)
        assert main(["compare", str(base), str(slower)]) == 1
        assert "changed" not in capsys.readouterr().out


def test_nothing_in_common_is_an_error_not_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = results(tmp_path / "a.json", {"c64": [1000.0] * 3})
    b = results(tmp_path / "b.json", {"c1024": [1000.0] * 3})
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "nothing to compare" in err and "['c64']" in err and "['c1024']" in err


def test_no_gated_metric_on_both_sides_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = results(tmp_path / "a.json", {"c64": [1000.0] * 3})
    b = results(tmp_path / "b.json", {"c64": [1000.0] * 3}, rules=[])
    assert main(["compare", str(a), str(b)]) == 2
    assert "nothing compared: no gated metric is present in both" in capsys.readouterr().err


def test_asked_metric_missing_on_one_side_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = results(tmp_path / "a.json", {"c64": [1000.0] * 3})
    b = results(tmp_path / "b.json", {"c64": [1000.0] * 3})
    assert main(["compare", str(a), str(b), "--metric", "p99_tpot_ms"]) == 2
    assert f"c64: p99_tpot_ms is not in the new run {b}" in capsys.readouterr().err
    # A metric both sides have, asked by name though the run did not gate it: compared.
    assert main(["compare", str(a), str(b), "--metric", "mean_tpot_ms"]) == 0
    assert "c64: mean_tpot_ms" in capsys.readouterr().out


def test_inconclusive_and_stopped_workloads_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = results(tmp_path / "a.json", {"c64": [1100.0, 1100.0, 500.0]})
    b = results(tmp_path / "b.json", {"c64": [1000.0, 1001.0, 999.0]})
    assert main(["compare", str(a), str(b)]) == 2
    assert "INCONCLUSIVE c64: output_throughput" in capsys.readouterr().out
    assert main(["compare", str(a), str(b), "--inconclusive", "warn"]) == 0
    capsys.readouterr()
    stopped = results(tmp_path / "s.json", {"c64": [1000.0]}, error="the server exited with code 1 during workload c64")
    assert main(["compare", str(a), str(stopped)]) == 2
    assert f"ERROR c64: not compared, the run in {stopped} stopped with an error" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--alpha", "2"], "--alpha: expected a number between 0 and 1 (exclusive), got '2'"),
        (["--alpha", "x"], "--alpha: expected a number > 0, got 'x'"),
        (["--metric", "mean_tpott_ms"], "did you mean 'mean_tpot_ms'?"),
    ],
)
def test_bad_compare_options_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    a = results(tmp_path / "a.json", {"c64": [1000.0] * 3})
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(a), str(a), *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


W = Workload(name="c8", num_prompts=8, concurrency=8, input_len=16, output_len=8)


def _store_with_one_good_and_one_bad(root: Path) -> None:
    fp = fingerprint_for(
        gpu_model="NVIDIA H200",
        gpu_count=1,
        power_limit_w=700.0,
        driver_version="580.1",
        engine="sglang",
        model="/m",
        server_args=[],
        workload=W,
    )
    BaselineStore(root).save(
        Baseline("p", W.name, fp, [{"output_throughput": 1.0}] * 3),
        check=ToleranceCheck([MetricRule("output_throughput", "higher", 0.05)]),
    )
    (root / "p" / "c8--broken.json").write_text("{")


def test_baselines_list_shows_the_good_files_and_names_the_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _store_with_one_good_and_one_bad(tmp_path)
    assert main(["baselines", "list", "--dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "p/c8" in out and "3 repeats" in out
    assert f"perfgate: baseline {tmp_path / 'p' / 'c8--broken.json'}: not valid JSON" in err


def test_baselines_show_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    _store_with_one_good_and_one_bad(tmp_path)
    (good,) = [p for p in (tmp_path / "p").glob("*.json") if "broken" not in p.name]
    # Enough output to outlast the pipe buffer after `head` has gone.
    command = f"{sys.executable} -m perfgate.cli baselines show {' '.join([str(good)] * 300)} | head -n 1"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120, check=False)
    assert proc.stdout.count("\n") == 1
    assert proc.stderr == "", proc.stderr
