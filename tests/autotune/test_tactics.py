"""The tactic record of a boot's FlashInfer autotune cache, on files of the real layout.

The files are written as FlashInfer 0.6.15's ``AutoTuner.save_configs`` writes them (its
``_metadata`` first, then ``"(<op>, <runner>, <profile>, <extras>)": [<runner>, <tactic>]``,
indent 2), in the folder SGLang 0.5.12+ gives them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.profile import ServerSpec
from perfgate.server import describe_autotune, stack_changes
from perfgate.server._sglang_launch import SGLangPreflight, verify
from perfgate.server.autotune import (
    AutotunePlan,
    AutotuneStatus,
    TacticRecord,
    compare_tactics,
    read_tactics,
    snapshot_autotune_cache,
    verify_autotune_log,
)
from perfgate.server.autotune import _tactics as tactics_module
from tests.autotune.test_evidence import rank_lines

META = {
    "flashinfer_version": "0.6.15.post1",
    "cuda_version": "12.9",
    "cublas_version": "12.9.1",
    "cudnn_version": "91002",
    "cudnn_frontend_version": "unknown",
    "gpu": "NVIDIA H200",
}
VERSIONS = {"sglang": "0.5.17", "flashinfer": "0.6.15.post1", "torch": "2.9.1", "cuda": "12.9"}


def shape_key(i: int) -> str:
    """A tuned shape's key as FlashInfer writes it (``ProfilingCacheKey.file_key``)."""
    profile = f"(({2 ** (i % 12)}, 4096), (8, {1024 * (i // 12 + 1)}, 4096), (8, 4096, 7168))"
    return str(("flashinfer::trtllm_fp4_block_scale_moe" if i % 2 else "cutlass_fused_moe", "MoERunner", profile, ()))


def tactics(n: int, changed: frozenset[int] = frozenset()) -> dict[str, list[object]]:
    return {shape_key(i): ["MoERunner", [i % 7 + (100 if i in changed else 0), -1]] for i in range(n)}


def cache_dir(root: Path, arch: str = "sm90") -> Path:
    path = root / "flashinfer" / "autotune" / "0.6.15.post1" / arch / "9c1e0b7d44553f2a"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_cache(folder: Path, entries: dict[str, list[object]], rank: int = 0, meta: dict[str, str] = META) -> str:
    path = folder / f"rank_tp{rank}_pp0_dp0.json"
    path.write_text(json.dumps({"_metadata": meta, **dict(sorted(entries.items()))}, indent=2))
    return str(path)


def test_a_real_layout_cache_is_recorded(tmp_path: Path) -> None:
    path = write_cache(cache_dir(tmp_path), tactics(191))
    record = read_tactics([path], VERSIONS)
    assert record.problem == ""
    assert len(record.entries) == 191 and len(record.digest) == 64
    assert (record.arch, record.flashinfer_version) == ("sm90", "0.6.15.post1")
    assert record.environment["gpu"] == "NVIDIA H200"
    assert record.summary().startswith("191 tactics in 1 file (sm90, flashinfer 0.6.15.post1), digest ")
    # The same tactics read again give the same record; the record survives its JSON round trip.
    again = read_tactics([path], VERSIONS)
    assert again.digest == record.digest
    assert TacticRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record


def test_every_rank_file_counts_apart(tmp_path: Path) -> None:
    folder = cache_dir(tmp_path)
    files = [write_cache(folder, tactics(40), rank=r) for r in range(2)]
    both = read_tactics(files, VERSIONS)
    assert len(both.entries) == 80
    # Rank 1 tuned one shape otherwise: one entry of 80 differs, and it is rank 1's.
    files[1] = write_cache(folder, tactics(40, frozenset({3})), rank=1)
    assert compare_tactics(both.to_dict(), read_tactics(files, VERSIONS).to_dict()) == (
        "autotune tactics: 1 of 80 entries differ from the baseline's (1 changed)"
    )


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 200),
    changed=st.frozensets(st.integers(0, 199), max_size=60),
    dropped=st.integers(0, 5),
)
def test_how_many_entries_differ(tmp_path_factory: pytest.TempPathFactory, n: int, changed, dropped: int) -> None:
    folder = cache_dir(tmp_path_factory.mktemp("c"))
    old = read_tactics([write_cache(folder, tactics(n))], VERSIONS).to_dict()
    kept = max(1, n - dropped)
    new_entries = tactics(kept, frozenset(changed))
    new = read_tactics([write_cache(folder, new_entries)], VERSIONS).to_dict()
    really_changed = len({i for i in changed if i < kept})
    gone = n - kept
    text = compare_tactics(old, new)
    if really_changed + gone == 0:
        assert text == ""
    else:
        assert text.startswith(f"autotune tactics: {really_changed + gone} of {n} entries differ from the baseline's")
        assert (f"{really_changed} changed" in text) == bool(really_changed)
        assert (f"{gone} only in the baseline" in text) == bool(gone)


def test_missing_unreadable_and_empty_caches_are_named(tmp_path: Path) -> None:
    folder = cache_dir(tmp_path)
    missing = read_tactics([str(folder / "rank_tp0_pp0_dp0.json")], VERSIONS)
    assert "is missing (FlashInfer saved nothing there)" in missing.problem and not missing.entries
    cases = {
        "garbage": "{not json",
        "array": "[1, 2]",
        "deep": "[" * 10_000 + "]" * 10_000,
        "digits": '{"_metadata": {}, "k": ["R", ' + "9" * 5000 + "]}",
        "twice": '{"k": ["R", 1], "k": ["R", 2]}',
        "empty": "{}",
        "metadata only": json.dumps({"_metadata": META}),
    }
    for name, text in cases.items():
        path = folder / f"{name}.json"
        path.write_text(text)
        record = read_tactics([str(path)], VERSIONS)
        assert record.problem.startswith(str(path)), (name, record.problem)
        assert not record.entries and record.digest == "", name
        assert compare_tactics(record.to_dict(), record.to_dict()).startswith("autotune tactics: not compared"), name
    fifo = folder / "fifo.json"
    os.mkfifo(fifo)
    assert "unreadable" in read_tactics([str(fifo)], VERSIONS).problem
    assert "unreadable" in read_tactics([str(folder)], VERSIONS).problem


def test_an_oversized_cache_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_cache(cache_dir(tmp_path), tactics(50))
    monkeypatch.setattr(tactics_module, "MAX_CACHE_BYTES", 1000)
    assert "more than the 1,000 a tactic cache is read to" in read_tactics([path], VERSIONS).problem


def test_a_cache_of_another_environment_is_not_what_the_boot_used(tmp_path: Path) -> None:
    """FlashInfer ignores a file written under another FlashInfer or CUDA, tunes afresh and keeps
    the file: it is unchanged, yet the boot did not load it."""
    root = tmp_path / "sglang-cache"
    folder = cache_dir(root)
    old_meta = {**META, "flashinfer_version": "0.6.11.post1"}
    path = write_cache(folder, tactics(20), meta=old_meta)
    before = snapshot_autotune_cache(root / "flashinfer" / "autotune")
    log = "\n".join(rank_lines(0, str(folder)))
    assert verify_autotune_log(log, 1, cache_before=before, versions=VERSIONS).tuning == "fresh"
    # Without the versions perfgate cannot tell, and the unchanged file reads as loaded.
    assert verify_autotune_log(log, 1, cache_before=before).tuning == "cached"
    record = read_tactics([path], VERSIONS)
    assert "written under flashinfer_version 0.6.11.post1 (this server: 0.6.15.post1)" in record.problem
    assert not record.entries
    # FlashInfer's wildcard, and values it could not determine, match any environment.
    for loose in ("*", "unknown"):
        write_cache(folder, tactics(20), meta={**META, "flashinfer_version": loose})
        assert read_tactics([path], VERSIONS).problem == ""


def test_a_hand_edited_record_is_refused_not_believed(tmp_path: Path) -> None:
    record = read_tactics([write_cache(cache_dir(tmp_path), tactics(10))], VERSIONS).to_dict()
    forged = {**record, "tactics": {**record["tactics"], "rank_tp0_pp0_dp0:0000": "ffff"}}
    assert "digest does not match" in compare_tactics(forged, record)
    for bad in ([], {"tactics": "x"}, {**record, "files": "x"}, {**record, "arch": 90}, {**record, "environment": []}):
        text = compare_tactics(bad, record)
        assert text.startswith("autotune tactics: not compared (the baseline has a malformed tactic record"), bad
    assert compare_tactics(None, record) == "autotune tactics: not compared (the baseline recorded no tactic cache)"
    assert compare_tactics(None, None) == ""


def provenance(versions: dict[str, str], tactic_record: object, ok: bool = True) -> dict[str, object]:
    autotune = {"decision": "native", "status": "native", "ok": ok, "tuning": "fresh", "evidence": "e"}
    return {"versions": versions, "autotune": {**autotune, "tactics": tactic_record}}


def test_what_changed_comes_most_suspect_first(tmp_path: Path) -> None:
    folder = cache_dir(tmp_path)
    old = read_tactics([write_cache(folder, tactics(191))], VERSIONS).to_dict()
    new = read_tactics([write_cache(folder, tactics(191, frozenset(range(86))))], VERSIONS).to_dict()
    upgraded = {**VERSIONS, "flashinfer": "0.6.16", "sgl-kernel": "0.4.1"}
    changes = stack_changes(provenance(VERSIONS, old), provenance(upgraded, new, ok=False))
    assert changes == [
        "autotune tactics: 86 of 191 entries differ from the baseline's (86 changed)",
        "FlashInfer autotune: native, ran -> native, not verified",
        "flashinfer 0.6.15.post1 -> 0.6.16",
        "sgl-kernel absent -> 0.4.1",
    ]
    assert stack_changes(provenance(VERSIONS, old), provenance(VERSIONS, old)) == []
    # A baseline's provenance is a file a person can edit: any shape is read, none raises.
    for hostile in (None, [], "x", {"versions": [1]}, {"autotune": "x", "versions": {}}):
        assert stack_changes(hostile, provenance(VERSIONS, old)) == []
    line = describe_autotune(provenance(VERSIONS, old)["autotune"])  # type: ignore[arg-type]
    assert "191 tactics in 1 file (sm90, flashinfer 0.6.15.post1)" in line


def test_a_booted_servers_autotune_record_holds_its_tactics(tmp_path: Path) -> None:
    """What ``verify`` gives a launched SGLang server's provenance after boot: the log's cache
    file, read as a tactic record; none when the log names no file."""
    folder = cache_dir(tmp_path)
    write_cache(folder, tactics(12))
    log = tmp_path / "server.log"

    class Process:
        log_path, pid = log, os.getpid()

        def flush_log(self) -> None:
            pass

    status = AutotuneStatus("native", "0.5.17", "", "", "", "")
    pre = SGLangPreflight(VERSIONS, AutotunePlan("native", status), cache_before={})
    spec = ServerSpec(kind="sglang", model_path="/m")
    log.write_text("\n".join(rank_lines(0, str(folder))))
    record = verify(spec, pre, Process(), {"device": "cuda"}, {})  # type: ignore[arg-type]
    assert record["ok"] and record["tuning"] == "fresh"
    assert TacticRecord.from_dict(record["tactics"]).summary().startswith("12 tactics in 1 file (sm90")
    log.write_text("Running FlashInfer autotune...\nFlashInfer autotune completed.\n")
    assert verify(spec, pre, Process(), {"device": "cuda"}, {})["tactics"] is None  # type: ignore[arg-type]
