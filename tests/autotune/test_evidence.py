from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from perfgate.server.autotune import (
    autotune_cache_root,
    snapshot_autotune_cache,
    verify_autotune_log,
)

CACHE = "/root/.cache/sglang/flashinfer/autotune/0.6.11.post1/sm120/3f2a9c1e0b7d4455"
HOOK = (
    "perfgate-autotune: patched sglang.srt.model_executor.model_runner:ModelRunner."
    "_should_run_flashinfer_autotune: flashinfer_cutlass added to the autotuned MoE "
    "backends in pid {pid}"
)


def rank_lines(rank: int, cache: str = CACHE, prefix: str = "TP{r}") -> list[str]:
    """What SGLang 0.5.12's scheduler of one TP rank logs around autotune."""
    tag = prefix.format(r=rank)
    return [
        f"[2026-11-29 19:00:0{rank % 10} {tag}] Load weight end. type=GlmMoeForCausalLM",
        (
            f"[2026-11-29 19:00:1{rank % 10} {tag}] Running FlashInfer autotune with cache: "
            f"{cache}/rank_tp{rank}_pp0_dp0.json"
        ),
        f"[2026-11-29 19:03:2{rank % 10} {tag}] FlashInfer autotune completed.",
    ]


def server_log(ranks, hook_pids=(4101, 4102)) -> str:
    lines = ["[2026-11-29 18:59:00] server_args=ServerArgs(model_path='lukealonso/GLM-5-NVFP4')"]
    lines += [HOOK.format(pid=p) for p in hook_pids]
    for rank in ranks:
        lines += rank_lines(rank)
    lines.append("[2026-11-29 19:05:00] The server is fired up and ready to roll!")
    return "\n".join(lines)


def test_eight_ranks_tuned_and_patched() -> None:
    evidence = verify_autotune_log(server_log(range(8)), 8, expect_patch=True)
    assert evidence.ok, evidence.message
    assert evidence.ranks_started == evidence.ranks_completed == tuple(range(8))
    assert evidence.cache_dir == CACHE
    assert len(evidence.cache_files) == 8
    assert evidence.patched_pids == (4101, 4102)
    assert evidence.tuning == "unknown"
    assert evidence.message.startswith("FlashInfer autotune ran on 8/8 TP ranks")
    assert len(evidence.lines) == 2 + 16


@given(st.sets(st.integers(0, 7)))
def test_every_missing_rank_is_named(ranks: set[int]) -> None:
    evidence = verify_autotune_log(server_log(sorted(ranks)), 8)
    assert evidence.ok == (ranks == set(range(8)))
    assert evidence.ranks_started == tuple(sorted(ranks))
    if not evidence.ok:
        missing = ", ".join(str(r) for r in sorted(set(range(8)) - ranks))
        assert f"TP rank(s) {missing} of 8" in evidence.message


def test_a_rank_that_never_completes() -> None:
    log = server_log(range(2)).replace("[2026-11-29 19:03:21 TP1] FlashInfer autotune completed.", "")
    evidence = verify_autotune_log(log, 2)
    assert not evidence.ok
    assert evidence.ranks_completed == (0,)
    assert "no 'FlashInfer autotune completed.' line from TP rank(s) 1" in evidence.message


def test_other_logger_prefixes_name_the_rank() -> None:
    lines = []
    for rank in range(4):
        lines += rank_lines(rank, prefix="DP0 TP{r} EP{r}")
    evidence = verify_autotune_log("\n".join(lines), 4)
    assert evidence.ok and evidence.ranks_completed == (0, 1, 2, 3)


def test_the_patch_was_expected_but_the_hook_never_ran() -> None:
    evidence = verify_autotune_log(server_log(range(2), hook_pids=()), 2, expect_patch=True)
    assert not evidence.ok
    assert "no 'perfgate-autotune: patched' line" in evidence.message


def test_a_hook_failure_fails_even_when_sglang_tuned() -> None:
    failed = (
        "perfgate-autotune: FAILED to patch sglang.srt.model_executor.model_runner:"
        "ModelRunner._should_run_flashinfer_autotune (ModelRunner._should_run_flashinfer_autotune "
        "has no list of autotuned MoE runner backends); running SGLang unchanged in pid 77"
    )
    evidence = verify_autotune_log(server_log([0]) + "\n" + failed, 1)
    assert not evidence.ok
    assert evidence.hook_failures == (failed[failed.index("perfgate-autotune") :],)
    assert "has no list of autotuned MoE runner backends" in evidence.message


def test_single_gpu_and_releases_without_a_cache() -> None:
    # SGLang 0.5.7 - 0.5.11: no TP prefix at tp 1, no persistent cache: every boot tunes.
    log = "[2026-11-29 19:00:00] Running FlashInfer autotune...\n[2026-11-29 19:01:00] FlashInfer autotune completed.\n"
    evidence = verify_autotune_log(log, 1)
    assert evidence.ok and evidence.tuning == "fresh" and evidence.cache_dir == ""


def test_cache_reuse_disabled_means_fresh() -> None:
    log = (
        "[2026-11-29 19:00:00] Running FlashInfer autotune (cache reuse DISABLED via "
        f"SGLANG_FLASHINFER_AUTOTUNE_CACHE=0); writing fresh result to: {CACHE}/runs/"
        "rank_tp0_pp0_dp0.20261129_190000.json\n"
        "[2026-11-29 19:01:00] FlashInfer autotune completed.\n"
    )
    evidence = verify_autotune_log(log, 1)
    assert evidence.ok and evidence.tuning == "fresh" and evidence.cache_dir == CACHE


def test_flashinfer_lines_when_sglang_lets_them_through() -> None:
    fi = (
        "2026-11-29 19:00:05,123 - INFO - autotuner.py:1764 - flashinfer.jit: "
        "[Autotuner]: Loaded 42 configs from {cache}/rank_tp0_pp0_dp0.json"
    )
    log = server_log([0]) + "\n" + fi.format(cache=CACHE)
    assert verify_autotune_log(log, 1).tuning == "cached"
    saved = (
        "2026-11-29 19:03:05,123 - INFO - autotuner.py:1673 - flashinfer.jit: "
        f"[Autotuner]: Saved 50 configs to {CACHE}/rank_tp0_pp0_dp0.json (8 new, 42 from previous config)"
    )
    assert verify_autotune_log(log + "\n" + saved, 1).tuning == "mixed"


def test_fresh_or_cached_from_the_cache_files(tmp_path: Path) -> None:
    root = autotune_cache_root({"SGLANG_CACHE_DIR": str(tmp_path)})
    assert root == tmp_path / "flashinfer" / "autotune"
    cache = root / "0.6.11.post1" / "sm120" / "3f2a9c1e0b7d4455"
    cache.mkdir(parents=True)
    files = [cache / f"rank_tp{r}_pp0_dp0.json" for r in range(2)]
    for f in files:
        f.write_text('{"tactics": 1}')
    before = snapshot_autotune_cache(root)
    assert set(before) == {str(f.resolve()) for f in files}
    log = "\n".join(rank_lines(0, str(cache)) + rank_lines(1, str(cache)))
    assert verify_autotune_log(log, 2, cache_before=before).tuning == "cached"
    files[1].write_text('{"tactics": 2}')
    assert verify_autotune_log(log, 2, cache_before=before).tuning == "mixed"
    files[0].write_text('{"tactics": 2}')
    assert verify_autotune_log(log, 2, cache_before=before).tuning == "fresh"
    assert verify_autotune_log(log, 2, cache_before={}).tuning == "fresh"
    assert snapshot_autotune_cache(tmp_path / "nothing-here") == {}
