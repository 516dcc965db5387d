"""The "boots" key of a baseline: each repeat's boot ([gate] boots); absent in one-boot baselines."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.baseline import Baseline, BaselineStore
from perfgate.errors import BaselineError
from perfgate.verdict import MetricRule, ToleranceCheck
from tests.baseline.baseline_factories import WL, baseline

RULES = [MetricRule("output_throughput", "higher", 0.03)]


def test_boots_round_trip_and_one_boot_files_have_no_key(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    b = replace(baseline([1000.0, 1010.0, 990.0, 1100.0]), boots=[1, 1, 2, 2])
    path = store.save(b, check=ToleranceCheck(RULES))
    assert json.loads(path.read_text())["boots"] == [1, 1, 2, 2]
    loaded = store.load("glm5", WL.name, b.fingerprint)
    assert loaded is not None and loaded.boots == [1, 1, 2, 2]

    old = baseline([1000.0, 1010.0, 990.0])
    assert "boots" not in old.to_dict()
    again = Baseline.from_dict(json.loads(old.to_json()), tmp_path / "old.json")
    assert again.boots is None


@pytest.mark.parametrize("boots", [[1, 1], [0, 1, 1], [1, True, 2], "1,2,3", [1.0, 2, 3], [1, 2, 101]])
def test_bad_boots_are_refused_with_the_fix(tmp_path: Path, boots: object) -> None:
    doc = baseline([1000.0, 1010.0, 990.0]).to_dict() | {"boots": boots}
    with pytest.raises(BaselineError, match=r"boots must list the boot .* of each of the 3 repeats.*re-record it"):
        Baseline.from_dict(doc, tmp_path / "bad.json")
    with pytest.raises(BaselineError, match="cannot be saved: boots must list"):
        BaselineStore(tmp_path).save(
            replace(baseline([1000.0, 1010.0, 990.0]), boots=boots), check=ToleranceCheck(RULES)
        )  # type: ignore[arg-type]
