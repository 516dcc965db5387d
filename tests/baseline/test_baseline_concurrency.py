"""Many processes writing and reading baselines at once: nothing partial, nothing lost."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from baseline_factories import baseline, fingerprint

from perfgate.baseline import BaselineStore
from perfgate.verdict import MetricRule, ToleranceCheck

RULES = [MetricRule("output_throughput", "higher", 0.03)]
WRITERS = 4
ROUNDS = 12
SHARED = ("shared-a", "shared-b")


def _writer(root: str, wid: int, errors: multiprocessing.Queue) -> None:
    try:
        store = BaselineStore(root)
        for i in range(ROUNDS):
            value = 1000.0 + wid * 100 + i
            # Different baselines: this writer's own workload, one file per round slot.
            store.save(baseline([value] * 3, workload=f"own-{wid}-{i % 3}"), check=ToleranceCheck(RULES))
            # The same baselines as every other writer, racing on the same files.
            for name in SHARED:
                store.save(
                    baseline([value] * 3, workload=name),
                    check=ToleranceCheck(RULES),
                    accept_regression="concurrency test",
                )
    except BaseException as e:
        errors.put(f"writer {wid}: {type(e).__name__}: {e}")


def _reader(
    root: str, stop: multiprocessing.Event, errors: multiprocessing.Queue, reads: multiprocessing.Value
) -> None:
    store = BaselineStore(root)
    count = 0
    while True:
        finished = stop.is_set()
        for path in Path(root).glob("*/*.json"):
            try:
                json.loads(path.read_text())
                count += 1
            except FileNotFoundError:
                continue
            except ValueError as e:
                errors.put(f"reader saw a partial file {path}: {e}")
        try:
            count += len(store.list_all()[0])
        except Exception as e:
            errors.put(f"reader: list_all failed: {type(e).__name__}: {e}")
        if finished:
            break
    with reads.get_lock():
        reads.value += count


def test_concurrent_writers_and_readers(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    stop = ctx.Event()
    reads = ctx.Value("i", 0)
    root = str(tmp_path)
    readers = [ctx.Process(target=_reader, args=(root, stop, errors, reads)) for _ in range(2)]
    writers = [ctx.Process(target=_writer, args=(root, w, errors)) for w in range(WRITERS)]
    for p in readers + writers:
        p.start()
    for p in writers:
        p.join(timeout=120)
    stop.set()
    for p in readers:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in readers + writers)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert problems == []
    assert reads.value > 0

    store = BaselineStore(tmp_path)
    files = sorted(tmp_path.glob("glm5/*.json"))
    for f in files:
        json.loads(f.read_text())
    # None lost: every distinct baseline has its file, and nothing else is there.
    expected = {store.path_for("glm5", f"own-{w}-{k}", fingerprint()) for w in range(WRITERS) for k in range(3)}
    expected |= {store.path_for("glm5", name, fingerprint()) for name in SHARED}
    assert set(files) == expected
    # Each own file holds its writer's last round for that slot.
    for w in range(WRITERS):
        for k in range(3):
            last = max(i for i in range(ROUNDS) if i % 3 == k)
            b = store.load("glm5", f"own-{w}-{k}", fingerprint())
            assert b is not None and b.repeats[0]["output_throughput"] == 1000.0 + w * 100 + last
    # Shared files hold one complete write from one of the writers.
    written = {1000.0 + w * 100 + i for w in range(WRITERS) for i in range(ROUNDS)}
    for name in SHARED:
        b = store.load("glm5", name, fingerprint())
        assert b is not None and b.repeats[0]["output_throughput"] in written
        assert b.provenance["accepted_regression"]["reason"] == "concurrency test"
    assert list(tmp_path.glob("glm5/*.tmp")) == []
