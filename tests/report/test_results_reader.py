"""``read_results``: the reader next to the results writer, as ``perfgate compare`` uses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.errors import PerfgateError
from perfgate.report import RESULTS_SCHEMA, read_results
from perfgate.verdict import MetricRule
from tests.faults.test_cli_faults import results


def test_reads_what_compare_uses(tmp_path: Path) -> None:
    path = results(tmp_path / "a.json", {"c64": [1000.0, 990.0]})
    doc = json.loads(path.read_text())
    doc["profile"] = {"name": "p", "path": "profiles/p.toml"}
    doc["workloads"][0]["repeats"][1]["values"]["p99_tpot_ms"] = None  # NaN is written as null
    path.write_text(json.dumps(doc))
    read = read_results(path)
    assert read.profile == "p" and list(read.workloads) == ["c64"]
    (wl,) = read.workloads.values()
    assert wl.rules == (MetricRule("output_throughput", "higher", tolerance=0.05),)
    assert [r["output_throughput"] for r in wl.repeats] == [1000.0, 990.0]
    assert "p99_tpot_ms" not in wl.repeats[1]
    assert (wl.error, wl.invalid_reasons, wl.fingerprint) == ("", (), None)


def _edited(tmp_path: Path, edit: str) -> Path:
    path = results(tmp_path / f"{edit}.json", {"c64": [1000.0]})
    doc = json.loads(path.read_text())
    wl = doc["workloads"][0]
    if edit == "newer":
        doc["schema_version"] = RESULTS_SCHEMA + 1
    elif edit == "unversioned":
        del doc["schema_version"]
    elif edit == "ab":
        doc["kind"] = "ab"
    elif edit == "values":
        wl["repeats"][0] = {"values": [1, 2]}
    elif edit == "rule":
        wl["rules"] = [{"metric": "output_throughput", "direction": "up"}]
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("newer", f"schema_version {RESULTS_SCHEMA + 1}, and this perfgate reads results of schema {RESULTS_SCHEMA}"),
        ("unversioned", f"schema_version None, and this perfgate reads results of schema {RESULTS_SCHEMA}"),
        ("ab", "the results of an A/B (perfgate ab)"),
        ("values", "workload 'c64': repeat 1 has no 'values' table"),
        ("rule", "workload 'c64': a rule is not a metric, a direction and numbers"),
    ],
)
def test_another_schema_or_a_malformed_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: str, message: str
) -> None:
    path = _edited(tmp_path, edit)
    with pytest.raises(PerfgateError, match=f"^results {path}: "):
        read_results(path)
    good = results(tmp_path / "good.json", {"c64": [1000.0]})
    assert main(["compare", str(good), str(path)]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"perfgate: results {path}: ") and message in err and err.count("\n") == 1, err
    assert out == ""
