from __future__ import annotations

import json
import math
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from baseline_factories import WL, baseline, fingerprint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfgate.baseline import (
    SCHEMA_VERSION,
    Baseline,
    BaselineStore,
    diff,
    others_note,
    provenance,
    read_baseline,
)
from perfgate.errors import BaselineError
from perfgate.verdict import MetricRule, ToleranceCheck

RULES = [MetricRule("output_throughput", "higher", 0.03), MetricRule("mean_tpot_ms", "lower", 0.03, ceiling=1.0)]


def test_save_then_load_round_trips(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    b = baseline([1000.0, 1010.0, 990.0])
    path = store.save(b, check=ToleranceCheck(RULES))
    assert path == tmp_path / "glm5" / f"c1024-in256-out128--8xh100-80gb-hbm3-700W--{b.fingerprint.digest}.json"
    loaded = store.load("glm5", WL.name, b.fingerprint)
    assert loaded == b and loaded is not None and loaded.source == path
    assert store.load("glm5", WL.name, fingerprint(gpu_count=4)) is None
    assert store.load("glm5", "other-workload", b.fingerprint) is None
    assert store.list_all() == ([b], [])


def test_file_is_stable_reviewable_json(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    path = store.save(baseline([1000.0, 1010.0, 990.0]), check=ToleranceCheck(RULES))
    text = path.read_text()
    data = json.loads(text)
    assert text.endswith("}\n") and text == json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["fingerprint"]["gpu_count"] == 8 and data["fingerprint_digest"] == path.stem[-12:]
    assert len(data["repeats"]) == 3
    assert data["telemetry"]["gpus"][1]["power_mean_w"] == 250.0
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".tmp"] == []


repeat_dicts = st.lists(
    st.dictionaries(
        st.sampled_from(["output_throughput", "mean_tpot_ms", "gpu_power_min_w", "p99_ttft_ms"]),
        st.floats(0, 1e9, allow_nan=False, allow_infinity=False),
        min_size=1,
    ),
    min_size=1,
    max_size=5,
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=30)
@given(repeat_dicts, st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8) | st.none(), max_size=4))
def test_json_round_trip(tmp_path: Path, repeats: list[dict[str, float]], telemetry: dict[str, object]) -> None:
    b = Baseline("p", "w", fingerprint(), repeats, {"gpus": telemetry}, {"user": "x", "reason": "ünïcode"})
    again = Baseline.from_dict(json.loads(b.to_json()), tmp_path / "x.json")
    assert again == b
    assert again.to_json() == b.to_json()


def test_others_lists_other_fingerprints_and_says_what_differs(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    eight = baseline([1000.0, 1001.0, 1002.0])
    four = baseline([500.0, 501.0, 502.0], fp=fingerprint(gpu_count=4, server_args=["--tp", "4"]))
    store.save(eight, check=ToleranceCheck(RULES))
    store.save(four, check=ToleranceCheck(RULES))
    (other,) = store.others("glm5", WL.name, eight.fingerprint)
    assert other == four
    assert (
        eight.fingerprint.describe_difference(other.fingerprint)
        == "gpu_count 8 -> 4, server_args --tp-size=8 -> --tp-size=4"
    )
    assert store.load("glm5", WL.name, eight.fingerprint) == eight
    assert len(store.list_all()[0]) == 2
    # This run has 4 GPUs; only the 8-GPU baseline exists: say so, and never use it.
    run_fp = fingerprint(gpu_count=4, server_args=["--tp", "4"], power_limit_w=300)
    note = others_note(run_fp, store.others("glm5", WL.name, run_fp))
    assert note == (
        "baselines exist for other fingerprints (baseline -> this run: power_limit_w 700 -> 300; "
        "gpu_count 8 -> 4, power_limit_w 700 -> 300, server_args --tp-size=8 -> --tp-size=4); not used"
    )
    assert others_note(eight.fingerprint, []) == ""


def test_save_refuses_a_regression_without_a_reason(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(baseline([1000.0, 1001.0, 1002.0]), check=ToleranceCheck(RULES))
    worse = baseline([900.0, 901.0, 902.0])
    with pytest.raises(BaselineError) as err:
        store.save(worse, check=ToleranceCheck(RULES))
    msg = str(err.value)
    assert "refusing to replace the stored baseline with worse numbers" in msg
    assert "output_throughput 901.0 tok/s < limit" in msg and "mean_tpot_ms" in msg
    assert "--perf-accept-regression" in msg
    assert store.load("glm5", WL.name, worse.fingerprint).repeats[0]["output_throughput"] == 1000.0  # type: ignore[union-attr]

    path = store.save(
        worse, check=ToleranceCheck(RULES), accept_regression="FP8 KV cache: -10% throughput for 2x context"
    )
    stored = read_baseline(path)
    assert stored is not None and stored.repeats[0]["output_throughput"] == 900.0
    accepted = stored.provenance["accepted_regression"]
    assert accepted["reason"] == "FP8 KV cache: -10% throughput for 2x context"
    assert len(accepted["regressions"]) == 2 and "output_throughput" in accepted["regressions"][0]


def test_save_accepts_improvements_noise_and_floor_misses(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(baseline([1000.0, 1001.0, 1002.0]), check=ToleranceCheck(RULES))
    store.save(baseline([1100.0, 1101.0, 1102.0]), check=ToleranceCheck(RULES))
    # Median 2 % down: inside the 3 % tolerance. (mean_tpot_ms is far above its 1.0 ceiling:
    # absolute bounds are the gate's business, not a reason to keep old numbers.)
    store.save(baseline([1080.0, 1079.0, 1078.0]), check=ToleranceCheck(RULES))
    assert store.load("glm5", WL.name, fingerprint()).repeats[0]["output_throughput"] == 1080.0  # type: ignore[union-attr]


def test_save_refuses_non_finite_metrics(tmp_path: Path) -> None:
    with pytest.raises(
        BaselineError, match=r"cannot be saved: repeat #2 metric 'output_throughput' must be a finite number, got nan"
    ):
        BaselineStore(tmp_path).save(baseline([1000.0, math.nan]), check=ToleranceCheck(RULES))


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ('{"schema_version": 1, "profile": "glm5", "workl', "not valid JSON"),
        ("[1, 2, 3]", "expected a JSON object"),
        (
            '{"schema_version": 99, "profile": "glm5"}',
            "written by a newer perfgate (schema 99; this perfgate reads up to 1); upgrade perfgate",
        ),
        ('{"schema_version": "one"}', "schema_version must be a whole number"),
        (
            '{"schema_version": 1, "profile": "glm5", "workload": "w"}',
            "not a valid schema 1 baseline (missing key 'fingerprint')",
        ),
    ],
)
def test_unusable_files_raise_naming_the_file_and_the_fix(tmp_path: Path, content: str, complaint: str) -> None:
    path = _write(tmp_path / "glm5" / f"{WL.name}--8xh100-700W--000000000000.json", content)
    with pytest.raises(BaselineError) as err:
        BaselineStore(tmp_path).load("glm5", WL.name, fingerprint())
    msg = str(err.value)
    assert str(path) in msg and complaint in msg
    # A newer perfgate's file is valid: it is never re-recorded over, only read by a newer perfgate.
    fix = (
        "upgrade perfgate"
        if "newer perfgate" in complaint
        else "re-record it with `pytest perf_tests --perf-update-baselines`"
    )
    assert fix in msg


def test_bad_repeats_in_a_file_are_named(tmp_path: Path) -> None:
    data = baseline([1000.0]).to_dict()
    data["repeats"] = [{"output_throughput": "fast"}]
    _write(tmp_path / "glm5" / f"{WL.name}--x.json", json.dumps(data))
    found, errors = BaselineStore(tmp_path).list_all()
    assert found == [] and len(errors) == 1
    assert "repeat #1 metric 'output_throughput' must be a finite number" in str(errors[0])


def test_unreadable_file_raises(tmp_path: Path) -> None:
    # A directory where a file should be: unreadable even for root.
    (tmp_path / "glm5" / f"{WL.name}--x.json").mkdir(parents=True)
    with pytest.raises(BaselineError, match=r"it is a directory, not a regular file; only regular \*\.json files"):
        BaselineStore(tmp_path).load("glm5", WL.name, fingerprint())


V0 = {
    "profile": "glm5",
    "workload": WL.name,
    "machine": {"gpu": "NVIDIA H100 80GB HBM3", "gpus": 8, "power_limit": 699.8, "driver": "580.105.08"},
    "server": {"engine": "sglang", "model": "/models/GLM-5-NVFP4", "args": ["--tp-size=8", "--port", "30000"]},
    "spec": WL.spec(),
    "means": {"output_throughput": 1000.0, "mean_tpot_ms": 200.0},
    "n_repeats": 3,
    "versions": {"sglang": "0.4.9"},
    "recorded_at": "2026-01-02T03:04:05+00:00",
    "recorded_by": "alice",
}


def test_schema_0_is_migrated_on_read_and_replaced_on_save(tmp_path: Path) -> None:
    legacy = _write(tmp_path / "glm5" / f"{WL.name}--legacy.json", json.dumps(V0))
    store = BaselineStore(tmp_path)
    b = store.load("glm5", WL.name, fingerprint())
    assert b is not None, "the v0 fingerprint must equal the one built from the same facts"
    assert b.repeats == [{"output_throughput": 1000.0, "mean_tpot_ms": 200.0}]
    assert b.provenance["migrated_from_schema"] == 0
    assert b.provenance["date"] == "2026-01-02T03:04:05+00:00" and b.provenance["user"] == "alice"
    assert b.provenance["versions"] == {"sglang": "0.4.9"}
    assert "noise test is off" in b.provenance["migration_note"]

    # Re-recording writes the current schema under the canonical name and drops the legacy file.
    path = store.save(baseline([1001.0, 1002.0, 1003.0]), check=ToleranceCheck(RULES))
    assert not legacy.exists() and path.exists()
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION
    assert [x.source for x in store.list_all()[0]] == [path]


def test_broken_schema_0_file_is_named(tmp_path: Path) -> None:
    broken = {k: v for k, v in V0.items() if k != "machine"}
    _write(tmp_path / "glm5" / f"{WL.name}--legacy.json", json.dumps(broken))
    with pytest.raises(BaselineError, match=r"not a valid schema 0 baseline \(missing key 'machine'\)"):
        BaselineStore(tmp_path).load("glm5", WL.name, fingerprint())


def test_diff_reports_fingerprint_and_medians() -> None:
    old = baseline([1000.0, 1010.0, 990.0])
    new = baseline([900.0, 910.0, 890.0], fp=fingerprint(driver_version="590.1"))
    d = diff(old, new)
    assert d.fingerprint == (("driver_major", "580", "590"),)
    assert d.lines() == [
        "fingerprint driver_major: '580' -> '590'",
        "mean_tpot_ms 200.0 -> 222.2 ms (+11.1%)",
        "output_throughput 1,000.0 -> 900.0 tok/s (-10.0%)",
    ]


def test_provenance_helper(tmp_path: Path) -> None:
    p = provenance({"sglang": "0.5.5", "torch": None}, reason="new driver", repo_dir=tmp_path)
    assert p["versions"] == {"sglang": "0.5.5", "torch": None}
    assert p["reason"] == "new driver"
    assert p["git_commit"] is None  # tmp_path is not a git repository
    assert p["host"] and p["user"] and p["perfgate_version"]
    assert p["date"].endswith("+00:00") and p["date"][:2] == "20"
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f").write_text("x")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    assert provenance({}, repo_dir=repo)["git_commit"] == head
    (repo / "f").write_text("changed")
    assert provenance({}, repo_dir=repo)["git_commit"] == f"{head}-dirty"


def test_missing_root_has_no_baselines(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "not-yet")
    assert store.load("glm5", WL.name, fingerprint()) is None
    assert store.others("glm5", WL.name, fingerprint()) == []
    assert store.list_all() == ([], [])


def test_unwritable_root_raises(tmp_path: Path) -> None:
    root = tmp_path / "a-file"
    root.write_text("")
    with pytest.raises(BaselineError, match=r"cannot be created"):
        BaselineStore(root).save(baseline([1000.0]), check=ToleranceCheck(RULES))


def test_held_lock_times_out_with_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import filelock

    import perfgate.baseline._store as store_module

    monkeypatch.setattr(store_module, "LOCK_TIMEOUT_S", 0.2)
    store = BaselineStore(tmp_path)
    (tmp_path / "glm5").mkdir()
    held = filelock.FileLock(str(tmp_path / "glm5" / f".{WL.name}.lock"))
    with (
        held,
        pytest.raises(BaselineError, match=r"could not take the lock .* another perfgate run is updating baselines"),
    ):
        store.save(baseline([1000.0]), check=ToleranceCheck(RULES))
    assert store.load("glm5", WL.name, fingerprint()) is None


def test_another_profile_in_this_profiles_folder_stops_the_run_before_boot(tmp_path: Path) -> None:
    """``team prod`` and ``team_prod`` share the folder team_prod: the second profile's record
    was refused only after its measurement, by the overwrite guard; its gate saw no baseline."""
    store = BaselineStore(tmp_path)
    store.save(replace(baseline([1000.0, 1010.0, 990.0]), profile="team prod"), check=ToleranceCheck(RULES))
    assert store.check("team prod", for_update=False) == []
    for update in (False, True):
        with pytest.raises(BaselineError) as err:
            BaselineStore(tmp_path).check("team_prod", for_update=update)
        assert "holds baselines of profile(s) 'team prod', whose name shares this folder with profile 'team_prod'" in (
            str(err.value)
        )
        assert "nothing was run" in str(err.value) and "rename one of them" in str(err.value)


def test_profile_folders_that_differ_only_in_case_stop_the_run_before_boot(tmp_path: Path) -> None:
    """On a case-insensitive file system (macOS, Windows) baselines/Chat and baselines/chat are one
    folder: the two profiles' baselines would overwrite each other after a clone there."""
    store = BaselineStore(tmp_path)
    store.save(replace(baseline([1000.0, 1010.0, 990.0]), profile="Chat"), check=ToleranceCheck(RULES))
    with pytest.raises(BaselineError) as err:
        store.check("chat", for_update=True)
    message = str(err.value)
    assert "differ only in case" in message and "rename one profile" in message, message
    # This machine's file system may fold case itself: either way the other profile is named.
    assert "Chat" in message
    assert store.check("Chat", for_update=True) == []


# -- hostile files: one BaselineError naming the file, never a traceback or a silent read ---------


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested 100,000 levels deep"),
        ('{"schema_version": ' + "1" * 5000 + "}", "a number of 5,000 digits"),
        ('{"schema_version": 1, "repeats": [{"output_throughput": NaN}]}', "NaN, which is no JSON number"),
    ],
)
def test_json_that_would_crash_the_reader_is_named(tmp_path: Path, content: str, complaint: str) -> None:
    path = _write(tmp_path / "glm5" / f"{WL.name}--x.json", content)
    with pytest.raises(BaselineError) as err:
        BaselineStore(tmp_path).load("glm5", WL.name, fingerprint())
    assert str(err.value).startswith(f"baseline {path}: {complaint}") and "--perf-update-baselines" in str(err.value)


def test_a_key_given_twice_is_refused_not_the_last_one_taken(tmp_path: Path) -> None:
    # The audit's case: "output_throughput" again with 1.0, and a 6,000x faster run passed.
    store = BaselineStore(tmp_path)
    path = store.save(baseline([1000.0, 1001.0, 1002.0]), check=ToleranceCheck(RULES))
    text = path.read_text()
    path.write_text(
        text.replace('"output_throughput": 1000.0', '"output_throughput": 1000.0, "output_throughput": 1.0')
    )
    with pytest.raises(BaselineError, match=r"the key 'output_throughput' twice in one object") as err:
        store.load("glm5", WL.name, fingerprint())
    assert str(err.value).startswith(f"baseline {path}: ")


def test_a_store_folder_that_is_a_link_loop_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    (tmp_path / "glm5").symlink_to(tmp_path / "glm5")
    with pytest.raises(BaselineError) as err:
        BaselineStore(tmp_path).check("glm5", for_update=False)
    assert str(err.value).startswith(f"baselines folder {tmp_path / 'glm5'}: cannot be read (Too many levels")
    found, errors = BaselineStore(tmp_path).list_all()
    assert found == [] and [str(e) for e in errors] == [
        f"baselines folder {tmp_path / 'glm5'}: cannot be read (Too many levels of symbolic links); make it a "
        "folder, or delete the link"
    ]


def test_a_baseline_file_that_is_a_link_loop_is_named(tmp_path: Path) -> None:
    loop = tmp_path / "glm5" / f"{WL.name}--x.json"
    loop.parent.mkdir()
    loop.symlink_to(loop)
    with pytest.raises(BaselineError) as err:
        BaselineStore(tmp_path).check("glm5", for_update=False)
    assert f"baseline {loop}: a symbolic link that cannot be followed (Too many levels of symbolic links)" in str(
        err.value
    )


def test_a_folder_perfgate_writes_may_not_lie_in_the_store(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "baselines")
    store.refuse_inside(tmp_path / "results", "--perf-results", "--perf-baselines")
    for inside in (tmp_path / "baselines", tmp_path / "baselines" / "glm5"):
        with pytest.raises(BaselineError) as err:
            store.refuse_inside(inside, "--perf-results", "--perf-baselines")
        assert str(err.value) == (
            f"--perf-results {inside}: lies inside the baseline store {tmp_path / 'baselines'} (--perf-baselines), "
            "and the next run would read the files written there as baselines; pass a folder outside it"
        )
