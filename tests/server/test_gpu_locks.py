"""Host-level GPU locks: one lock per physical GPU, whatever the profile calls it (NVML faked)."""

from __future__ import annotations

import json
import os
import sys
import threading
from contextlib import ExitStack

import pytest

from perfgate.errors import ServerError
from perfgate.server._locks import hold_gpus
from tests.fake_nvml import make, uuids

UUID0 = uuids(3)[0]


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFGATE_LOCK_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def nvml(monkeypatch):
    _, nv = make(3)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    return nv


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)


@pytest.mark.parametrize("other_name", [0, UUID0, "00000000:18:00.0"])
def test_every_name_of_a_held_gpu_is_refused(nvml, other_name):
    with ExitStack() as first:
        hold_gpus(["0"], first, wait_s=0)
        with pytest.raises(
            ServerError,
            match=rf"^GPU 0 \({UUID0}\) is held by another perfgate session: "
            rf"pid {os.getpid()} on .* since \S+; wait for it to finish",
        ):
            with ExitStack() as second:
                hold_gpus([2, other_name], second, wait_s=0)
        # The refused session let go of GPU 2, which it had locked first (UUID order).
        with ExitStack() as third:
            hold_gpus([2], third, wait_s=0)
    with ExitStack() as fourth:
        hold_gpus([other_name], fourth, wait_s=0)
    assert nvml.initialised == 0


def test_a_waiting_session_gets_the_gpu_when_its_holder_ends(nvml):
    first = ExitStack()
    hold_gpus(["0"], first, wait_s=0)
    got = threading.Event()

    def second() -> None:
        with ExitStack() as stack:
            hold_gpus([UUID0], stack, wait_s=60)
            got.set()

    thread = threading.Thread(target=second)
    thread.start()
    # It cannot get the lock while the first session holds GPU 0 under its index.
    assert not got.wait(0.5)
    first.close()
    thread.join(60)
    assert got.is_set()


def test_the_owner_record_names_the_gpu(nvml, lock_dir):
    with ExitStack() as stack:
        hold_gpus(["00000000:19:00.0"], stack, wait_s=0)
        owner = json.loads((lock_dir / f"gpu-{uuids(3)[1]}.owner.json").read_text())
        assert owner["pid"] == os.getpid() and owner["gpu"] == f"GPU 1 ({uuids(3)[1]})" and owner["note"] == ""
    assert not list(lock_dir.glob("*.owner.json"))


def test_unknown_gpu_is_refused_naming_the_gpus_that_exist(nvml, lock_dir):
    with pytest.raises(ServerError) as err:
        with ExitStack() as stack:
            hold_gpus([0, "GPU-nope"], stack, wait_s=0)
    assert str(err.value).startswith("GPU 'GPU-nope' (profile [server].gpus) is not visible to NVML")
    assert f"visible GPUs: 0={uuids(3)[0]}, 1={uuids(3)[1]}, 2={uuids(3)[2]}." in str(err.value)
    assert not list(lock_dir.glob("*.lock"))


def test_without_nvml_the_name_as_given_is_locked_and_the_holder_says_so(no_nvml):
    with ExitStack() as first:
        hold_gpus([0, 1], first, wait_s=0)
        with pytest.raises(
            ServerError,
            match=r"^GPU 1 is held by another perfgate session: pid \d+ on .* since \S+; "
            r"locked by the name '1' as given, not by UUID \(NVML not available: ",
        ):
            with ExitStack() as second:
                hold_gpus([1, 2], second, wait_s=0.2)
    with ExitStack() as third:
        hold_gpus([1], third, wait_s=0)  # released when the first session ended
