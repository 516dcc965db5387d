"""Which GPU a profile's name means: index, UUID or PCI bus id -> :class:`GpuId`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.errors import GpuError
from perfgate.gpu._nvml_binding import NvmlUnavailable, query

# nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ as the tuple (0,) (a stray comma in the
# binding); NVML wants the integer.
_P2P_CAPS_INDEX_READ = 0


class UnknownGpu(GpuError):
    """A GPU name that matches no GPU NVML sees on this host."""


@dataclass(frozen=True)
class GpuId:
    """One physical GPU as NVML sees it. ``uuid`` is the identity; ``index`` (NVML's order, not
    CUDA's) and ``pci_bus_id`` are other names of it; ``name`` is the model ("" if unreadable)."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str

    @property
    def label(self) -> str:
        """``"GPU 0 (GPU-8f6c...)"``: what messages about this GPU show."""
        return f"GPU {self.index} ({self.uuid})"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _handle(nvml: Any, spec: int | str) -> Any:
    if isinstance(spec, int) or spec.isdigit():
        return nvml.nvmlDeviceGetHandleByIndex(int(spec))
    if spec.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(spec)
    return nvml.nvmlDeviceGetHandleByPciBusId(spec)


def _index(nvml: Any, handle: Any) -> int:
    try:
        return int(nvml.nvmlDeviceGetIndex(handle))
    except nvml.NVMLError:
        # A MIG instance (a "MIG-..." UUID) has no index of its own: its GPU's is the useful one.
        parent = query(nvml, nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, handle)
        if parent is None:
            raise
        return int(nvml.nvmlDeviceGetIndex(parent))


def _identify(nvml: Any, handle: Any) -> GpuId:
    pci = query(nvml, nvml.nvmlDeviceGetPciInfo, handle)
    return GpuId(
        index=_index(nvml, handle),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        pci_bus_id=_text(pci.busId) if pci is not None else "",
        name=query(nvml, nvml.nvmlDeviceGetName, handle) or "",
    )


def _count(nvml: Any) -> int:
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as err:
        raise NvmlUnavailable(f"NVML cannot count GPUs ({err})") from err
    if count == 0:
        raise NvmlUnavailable("NVML sees no GPU on this host")
    return count


def _visible(nvml: Any, count: int) -> str:
    names = []
    for i in range(count):
        try:
            names.append(f"{i}={_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))}")
        except nvml.NVMLError:
            names.append(f"{i}=?")
    return ", ".join(names)


def resolve_gpu(nvml: Any, spec: int | str) -> GpuId:
    """The GPU ``spec`` names (an NVML index, a UUID or a PCI bus id) on a started ``nvml``.

    Raises :class:`UnknownGpu` naming ``spec`` and the GPUs that exist, and
    :class:`NvmlUnavailable` when NVML cannot count GPUs or sees none.
    """
    count = _count(nvml)
    try:
        return _identify(nvml, _handle(nvml, spec))
    except nvml.NVMLError as err:
        raise UnknownGpu(
            f"GPU {spec!r} (profile [server].gpus) is not visible to NVML ({err}); visible GPUs: "
            f"{_visible(nvml, count)}. Give an NVML index, a UUID or a PCI bus id of this host."
        ) from err


def resolve_gpus(nvml: Any, specs: Sequence[int | str]) -> list[GpuId]:
    """Each GPU of ``specs`` once (two names of one GPU give one :class:`GpuId`), in order.

    Empty ``specs`` means every GPU NVML sees. Errors as :func:`resolve_gpu`.
    """
    wanted = list(specs) or list(range(_count(nvml)))
    out: dict[str, GpuId] = {}
    for spec in wanted:
        gpu = resolve_gpu(nvml, spec)
        out.setdefault(gpu.uuid, gpu)
    return list(out.values())


def all_gpus(nvml: Any) -> list[GpuId]:
    """Every GPU NVML sees, by index; empty when there is none. NVML errors propagate."""
    return [_identify(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(nvml.nvmlDeviceGetCount())]


def device_handle(nvml: Any, gpu: GpuId) -> Any:
    """The NVML handle of ``gpu`` in the current NVML session (looked up by UUID)."""
    return nvml.nvmlDeviceGetHandleByUUID(gpu.uuid)


def p2p_read_status(nvml: Any, a: Any, b: Any) -> int | None:
    """NVML's peer-to-peer read status between two handles (``NVML_P2P_STATUS_*``), None if unknown."""
    status = query(nvml, nvml.nvmlDeviceGetP2PStatus, a, b, _P2P_CAPS_INDEX_READ)
    return None if status is None else int(status)
