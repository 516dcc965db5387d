"""GPU names -> one identity, and NVML's absence as one message (fake NVML)."""

from __future__ import annotations

import sys

import pytest

from perfgate.errors import GpuError
from perfgate.gpu import GpuId, NvmlUnavailable, UnknownGpu, load_nvml, nvml_session, resolve_gpu, resolve_gpus
from tests.fake_nvml import FakeClock, FakeNvml, make, uuids


def test_index_uuid_and_pci_bus_id_name_one_gpu():
    _, nv = make(3)
    expected = GpuId(index=1, uuid=uuids(3)[1], pci_bus_id="00000000:19:00.0", name="Fake H200")
    for spec in (1, "1", uuids(3)[1], "00000000:19:00.0"):
        assert resolve_gpu(nv, spec) == expected
    assert expected.label == f"GPU 1 ({uuids(3)[1]})"


def test_resolve_gpus_keeps_order_drops_second_names_and_defaults_to_all():
    _, nv = make(3)
    got = resolve_gpus(nv, [2, "0", uuids(3)[2], "00000000:18:00.0"])
    assert [g.index for g in got] == [2, 0]
    assert [g.index for g in resolve_gpus(nv, [])] == [0, 1, 2]


@pytest.mark.parametrize("spec", [7, "7", "GPU-nope", "00000000:99:00.0"])
def test_unknown_gpu_names_itself_and_the_gpus_that_exist(spec):
    _, nv = make(2)
    with pytest.raises(UnknownGpu) as err:
        resolve_gpu(nv, spec)
    assert str(err.value) == (
        f"GPU {spec!r} (profile [server].gpus) is not visible to NVML ({err.value.__cause__}); visible GPUs: "
        f"0={uuids(2)[0]}, 1={uuids(2)[1]}. Give an NVML index, a UUID or a PCI bus id of this host."
    )
    assert isinstance(err.value, GpuError)


def test_no_gpu_at_all_is_nvml_unavailable():
    with pytest.raises(NvmlUnavailable, match=r"^NVML not available: NVML sees no GPU on this host$"):
        resolve_gpus(FakeNvml(FakeClock(), []), [0])


def test_session_shuts_down_what_it_started_also_on_errors():
    _, nv = make(1)
    with pytest.raises(UnknownGpu):
        with nvml_session(nv):
            assert nv.initialised == 1
            resolve_gpu(nv, 5)
    assert nv.initialised == 0


def test_nvml_not_available_says_why(monkeypatch):
    broken = FakeNvml(FakeClock(), [], init_error=FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(NvmlUnavailable) as err:
        with nvml_session(broken):
            pass
    assert str(err.value) == (
        "NVML not available: nvmlInit failed (NVML error 12); no NVIDIA driver or GPU on this host?"
    )
    assert broken.initialised == 0
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(
        NvmlUnavailable,
        match=r"^NVML not available: nvidia-ml-py is not importable \(.*\); "
        r"pip install nvidia-ml-py$",
    ):
        load_nvml()
