"""Reading a torch profiler Chrome trace and reducing it to a table; every hostile file is one clear error."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfgate.explain import GAP_KEY, HOST_GAP_KEY, ExplainError, ProfileTable, read_trace, reduce_trace
from perfgate.explain._trace import still_written


def kernel(name: str, ts: float, dur: float) -> dict[str, object]:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7}


def cpu_op(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, object]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def write(path: Path, events: object, *, gz: bool) -> Path:
    data = json.dumps({"traceEvents": events}).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [True, False])
def test_reads_plain_and_gzip(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path / ("t.json.gz" if gz else "t.json"), [kernel("k", 0, 5)], gz=gz)
    events, size = read_trace(path, root=tmp_path)
    assert events == [kernel("k", 0, 5)] and size == path.stat().st_size


def test_a_top_level_list_is_a_trace_too(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([kernel("k", 0, 5)]))
    assert read_trace(path, root=tmp_path)[0] == [kernel("k", 0, 5)]


def test_kernels_by_key_per_step_and_token() -> None:
    events = [
        kernel("void gemm<1>(tactic_3)", 0, 300),
        kernel("void gemm<2>(tactic_3)", 400, 300),
        kernel("attn", 700, 100),
        cpu_op("aten::mm", 0, 1000),  # ignored: there are kernels
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 5},  # not a complete event
        {"cat": "kernel", "name": "bad", "ts": "x", "dur": 3},
        "not an event",
    ]
    table = reduce_trace(events, steps=2, output_tokens=8, trace_bytes=123)
    assert table.source == "kernel" and table.events == len(events)
    assert table.step_ms == pytest.approx(0.4)  # 800 us span over 2 steps
    gemm, gap, attn = table.rows
    assert (gap.key, gap.calls, gap.total_ms) == (GAP_KEY, 0, pytest.approx(0.1))  # 100 us of 800 ran no kernel
    assert (gemm.key, gemm.calls, gemm.variant) == ("gemm", 2, "tactic 3")
    assert gemm.total_ms == pytest.approx(0.6) and gemm.per_step_ms == pytest.approx(0.3)
    assert gemm.per_output_token_us == pytest.approx(75.0) and gemm.step_share == pytest.approx(0.75)
    assert attn.key == "attn" and table.busy_ms_per_step == pytest.approx(0.35)


def test_host_operators_count_their_own_time_when_there_is_no_device() -> None:
    events = [
        cpu_op("aten::linear", 0, 100),
        cpu_op("aten::addmm", 10, 80),  # inside linear
        cpu_op("aten::copy_", 20, 10),  # inside addmm
        cpu_op("aten::relu", 100, 20),  # after linear
        cpu_op("aten::relu", 0, 50, tid=2),  # another thread: nests in nothing
    ]
    table = reduce_trace(events, steps=1, output_tokens=None, trace_bytes=0)
    assert table.source == "cpu_op"
    own = {r.key: r.total_ms * 1e3 for r in table.rows}
    # 120 us of span; 170 us of operators on two threads: no time outside them.
    assert own == pytest.approx(
        {"aten::linear": 20, "aten::addmm": 70, "aten::copy_": 10, "aten::relu": 70, HOST_GAP_KEY: 0}
    )
    assert all(r.per_output_token_us is None for r in table.rows)


def test_a_trace_with_neither_kernels_nor_operators_is_refused() -> None:
    with pytest.raises(ExplainError, match="no device kernel and no host operator"):
        reduce_trace(
            [{"ph": "X", "cat": "python_function", "name": "f", "ts": 0, "dur": 1}],
            steps=1,
            output_tokens=None,
            trace_bytes=0,
        )


def test_top_n_keeps_the_largest() -> None:
    events = [kernel(f"k{i}", i * 10, i + 1) for i in range(10)]
    table = reduce_trace(events, steps=1, output_tokens=None, trace_bytes=0, top_n=3)
    assert [r.key for r in table.rows] == [GAP_KEY, "k9", "k8"]
    assert table.busy_ms_per_step == pytest.approx(sum(range(1, 11)) / 1e3)


durations = st.floats(0, 1e6, allow_nan=False)
events_strategy = st.lists(
    st.tuples(st.sampled_from(["a<1>", "a<2>", "b(tactic_1)", "c", "void d<x>(y)"]), durations, durations), max_size=40
)


@given(events_strategy, st.integers(1, 50), st.one_of(st.none(), st.integers(1, 10**6)))
def test_reduction_keeps_every_call_and_every_microsecond(raw: list, steps: int, tokens: int | None) -> None:
    events = [kernel(name, ts, dur) for name, ts, dur in raw]
    if not events:
        with pytest.raises(ExplainError):
            reduce_trace(events, steps=steps, output_tokens=tokens, trace_bytes=0)
        return
    table = reduce_trace(events, steps=steps, output_tokens=tokens, trace_bytes=0)
    assert sum(r.calls for r in table.rows) == len(events)
    kernels = [r for r in table.rows if r.key != GAP_KEY]
    assert sum(r.total_ms for r in kernels) == pytest.approx(sum(d for _, _, d in raw) / 1e3)
    assert table.busy_ms_per_step == pytest.approx(sum(d for _, _, d in raw) / 1e3 / steps)
    totals = [r.total_ms for r in table.rows]
    assert totals == sorted(totals, reverse=True)
    assert len({r.key for r in table.rows}) == len(table.rows) <= 5
    assert ProfileTable.from_dict(json.loads(json.dumps(table.to_dict())), "x") == table


times = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 1.7976931348623157e308, 1e17, 1e18]),
    st.integers(-(10**30), 10**30),
)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), times, times), min_size=1, max_size=30))
def test_any_times_give_a_table_of_finite_numbers_or_one_error(raw: list) -> None:
    # 1e308 durations summed to inf, and inf - inf to NaN: both went into the results JSON and
    # the stored reference profile, which the next run then refused.
    events = [kernel(name, ts, dur) for name, ts, dur in raw]
    try:
        table = reduce_trace(events, steps=3, output_tokens=5, trace_bytes=0)
    except ExplainError:
        return
    text = json.dumps(table.to_dict(), allow_nan=False)
    assert ProfileTable.from_dict(json.loads(text), "x") == table
    assert table.untimed_events + sum(r.calls for r in table.rows) == len(events)


def test_nan_and_infinite_times_are_left_out_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        '{"traceEvents": ['
        + ", ".join(
            json.dumps(kernel(name, ts, 5)).replace('"ts": 0', f'"ts": {ts_text}')
            for name, ts, ts_text in [("k", 0, "NaN"), ("k", 0, "Infinity"), ("k", 0, "1e308"), ("k", 10, "10")]
        )
        + "]}"
    )
    events, _ = read_trace(path, root=tmp_path)
    table = reduce_trace(events, steps=1, output_tokens=None, trace_bytes=0)
    assert table.untimed_events == 3 and sum(r.calls for r in table.rows) == 1
    json.dumps(table.to_dict(), allow_nan=False)


# -- hostile files ----------------------------------------------------------------------
def test_too_large(tmp_path: Path) -> None:
    path = write(tmp_path / "t.json", [kernel("k", 0, 1)] * 100, gz=False)
    with pytest.raises(ExplainError, match="more than \\[explain\\] max_trace_mb"):
        read_trace(path, root=tmp_path, max_bytes=100)


def test_gzip_bomb(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(b" " * 10_000_000))
    with pytest.raises(ExplainError, match="decompresses to more than"):
        read_trace(path, root=tmp_path, max_bytes=1_000_000)


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": []}).encode())[:-12])
    with pytest.raises(ExplainError, match="truncated"):
        read_trace(path, root=tmp_path)


def test_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(ExplainError, match="not a readable gzip file"):
        read_trace(path, root=tmp_path)


def test_a_trace_nested_deeper_than_any_profiler_writes_is_named(tmp_path: Path) -> None:
    # It raised RecursionError through the gate's tests (explain never fails the gate).
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    with pytest.raises(ExplainError, match=rf"^trace {path}: nested 100,002 levels deep \(at most 64 are read\)"):
        read_trace(path, root=tmp_path)
    assert not still_written(path)


@pytest.mark.parametrize("text", ['{"traceEvents": [', "not json", "\udcff"])
def test_not_json(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ExplainError, match="not valid JSON"):
        read_trace(path, root=tmp_path)


@pytest.mark.parametrize("doc", ['{"events": []}', '{"traceEvents": 3}', "3"])
def test_json_that_is_no_trace(tmp_path: Path, doc: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(doc)
    with pytest.raises(ExplainError, match="no traceEvents list"):
        read_trace(path, root=tmp_path)


def test_fifo_is_named_not_read(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    os.mkfifo(path)
    with pytest.raises(ExplainError, match="FIFO"):
        read_trace(path, root=tmp_path)


def test_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    outside = write(tmp_path / "outside.json", [kernel("k", 0, 1)], gz=False)
    root = tmp_path / "profile"
    root.mkdir()
    (root / "t.json").symlink_to(outside)
    with pytest.raises(ExplainError, match="outside the profile folder"):
        read_trace(root / "t.json", root=root)
    with pytest.raises(ExplainError, match="outside the profile folder"):
        read_trace(root / ".." / "outside.json", root=root)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ExplainError, match="cannot be read"):
        read_trace(tmp_path / "none.json", root=tmp_path)


def test_sglangs_step_annotations_count_the_steps_and_their_kinds() -> None:
    def step(label: str, ts: float) -> dict[str, object]:
        return {"ph": "X", "cat": "user_annotation", "name": f"step[{label}]", "ts": ts, "dur": 10}

    events = [step("DECODE bs=16", 0), step("DECODE bs=15", 10), step("EXTEND bs=1 toks=4", 20), kernel("k", 0, 30)]
    table = reduce_trace(events, steps=10, output_tokens=None, trace_bytes=0)
    assert table.steps == 3 and table.step_kinds == {"DECODE": 2, "EXTEND": 1}
    # A DECODE processes its batch, an EXTEND its toks.
    assert table.step_tokens == {"DECODE": 31, "EXTEND": 4}
    assert table.kinds_text() == "2 DECODE (15.5 tokens/step) + 1 EXTEND (4 tokens/step)"
    assert table.tokens_per_step() == pytest.approx(35 / 3)
    # Annotations without counts (or with garbage) count the steps and no tokens.
    bare = reduce_trace(
        [step("DECODE", 0), step("DECODE bs=x", 10), step("DECODE bs=\u00b2", 15), kernel("k", 0, 20)],
        steps=9,
        output_tokens=None,
        trace_bytes=0,
    )
    assert bare.step_kinds == {"DECODE": 3} and bare.step_tokens == {} and bare.tokens_per_step() is None
    assert bare.kinds_text() == "3 DECODE"
    # A table stored before step_tokens existed reads back with none.
    old = {k: v for k, v in table.to_dict().items() if k != "step_tokens"}
    assert ProfileTable.from_dict(old, "old.json").step_tokens == {}


def test_each_kinds_steps_are_timed_from_one_steps_start_to_the_next() -> None:
    """A step's time is the loop's: its annotation's start to the next one's on its thread (the
    scheduler's Python between them included); the last ends with the window's last event."""

    def step(name: str, ts: float, dur: float = 10, tid: int = 1) -> dict[str, object]:
        return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}

    prefill, decode = "execute_context_4(256)_generation_0(0)", "execute_context_0(0)_generation_4(4)"
    events = [
        step(prefill, 0, 50),
        step(decode, 60),
        step(decode, 75),
        step(decode, 95),
        # Another rank's thread: its own intervals, not interleaved with the first one's.
        step(decode, 1, tid=2),
        step(decode, 31, tid=2),
        cpu_op("aten::mm", 0, 130),
    ]
    table = reduce_trace(events, steps=1, output_tokens=None, trace_bytes=0)
    assert table.step_kind_ms == pytest.approx({"PREFILL": 0.06, "DECODE": (15 + 20 + 35 + 30 + 99) / 1e3})
    assert table.kind_ms_per_token("DECODE") == pytest.approx(0.199 / 20)
    assert table.kind_ms_per_token("PREFILL") == pytest.approx(0.06 / 256)
    assert table.kind_ms_per_token("MIXED") is None
    assert ProfileTable.from_dict(json.loads(json.dumps(table.to_dict())), "x") == table
    # A step of unknown start leaves its kind untimed (a part of its steps is not their time); a
    # negative duration does not shorten the interval to the next step.
    hostile = reduce_trace(
        [step(prefill, 0, -5), step(decode, 20), {**step(decode, 0), "ts": "soon"}, cpu_op("aten::mm", 0, 40)],
        steps=1,
        output_tokens=None,
        trace_bytes=0,
    )
    assert hostile.step_kinds == {"PREFILL": 1, "DECODE": 2}
    assert hostile.step_kind_ms == pytest.approx({"PREFILL": 0.02})
    # A table stored before step_kind_ms existed reads back untimed.
    old = {k: v for k, v in table.to_dict().items() if k != "step_kind_ms"}
    assert ProfileTable.from_dict(old, "old.json").step_kind_ms == {}
    with pytest.raises(ExplainError, match=r"old\.json"):
        ProfileTable.from_dict({**old, "step_kind_ms": {"DECODE": -1.0}}, "old.json")


def test_vllms_step_annotations_count_the_steps_their_kinds_and_tokens() -> None:
    def step(name: str, ts: float) -> dict[str, object]:
        return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": 10}

    events = [
        step("execute_context_0(0)_generation_64(64)", 0),
        step("execute_context_0(0)_generation_63(63)", 10),
        step("execute_context_1(60)_generation_63(63)", 20),
        step("execute_context_2(128)_generation_0(0)", 30),
        # The detailed form (--profiler-config.detailed_trace_annotation): the total first, sq = tokens.
        step("execute_64_context_0(sq0sk0sqsq0sqsk0)_generation_64(sq64sk4096sqsq64sqsk4096)", 40),
        # vLLM's other ranges are not steps.
        step("gpu_model_runner: forward", 0),
        kernel("k", 0, 50),
    ]
    table = reduce_trace(events, steps=99, output_tokens=None, trace_bytes=0)
    assert table.steps == 5 and table.step_kinds == {"DECODE": 3, "MIXED": 1, "PREFILL": 1}
    assert table.step_tokens == {"DECODE": 64 + 63 + 64, "MIXED": 123, "PREFILL": 128}


def test_a_trace_still_being_written_is_told_from_one_that_ended(tmp_path: Path) -> None:
    """The capture waits on these: a gzip stream without its end, JSON that does not parse yet."""
    data = json.dumps({"traceEvents": [kernel(f"k{i}", i, 1) for i in range(2000)]}).encode()
    packed = gzip.compress(data)
    cases = {
        "whole.json.gz": (packed, False),
        "half.json.gz": (packed[: len(packed) // 2], True),
        "whole.json": (data, False),
        "half.json": (data[: len(data) // 2], True),
        # Cut just after one event's closing brace: its last byte is `}` all the same.
        "cut.json": (data[: data.index(b"}", 100) + 1], True),
        # Not a trace at all: the reader refuses it by name, nothing is worth waiting for.
        "garbage.json.gz": (b"worker", False),
        "text.json": (b"Internal Server Error", False),
        "empty.json": (b"", False),
    }
    for name, (content, expected) in cases.items():
        (tmp_path / name).write_bytes(content)
        assert still_written(tmp_path / name) is expected, name
    assert still_written(tmp_path / "half.json.gz", max_bytes=10) is False, "past the limit: the reader refuses it"
    os.mkfifo(tmp_path / "fifo.json")  # opening it for reading would block
    (tmp_path / "link.json").symlink_to(tmp_path / "half.json")
    assert not still_written(tmp_path / "fifo.json") and not still_written(tmp_path / "link.json")
    assert not still_written(tmp_path / "missing.json")
