"""Loading and starting NVML (nvidia-ml-py, imported as ``pynvml``), with one message for "not here"."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from perfgate.errors import GpuError


class NvmlUnavailable(GpuError):
    """NVML cannot be used on this host at all: no binding, no driver, no GPU."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"NVML not available: {reason}")
        self.reason = reason


def load_nvml() -> Any:
    """The NVML binding module; :class:`NvmlUnavailable` when it is not installed."""
    try:
        import pynvml
    except ImportError as err:
        raise NvmlUnavailable(f"nvidia-ml-py is not importable ({err}); pip install nvidia-ml-py") from err
    return pynvml


def init_nvml(nvml: Any) -> None:
    """``nvmlInit`` on ``nvml``; :class:`NvmlUnavailable` when the library or driver is missing.

    NVML counts inits: every successful call needs its own ``nvmlShutdown``.
    """
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise NvmlUnavailable(f"nvmlInit failed ({err}); no NVIDIA driver or GPU on this host?") from err


@contextmanager
def nvml_session(nvml: Any = None) -> Iterator[Any]:
    """NVML started for the block and shut down after it; ``nvml`` defaults to :func:`load_nvml`."""
    binding = load_nvml() if nvml is None else nvml
    init_nvml(binding)
    try:
        yield binding
    finally:
        binding.nvmlShutdown()


def query(nvml: Any, function: Callable[..., Any], *args: Any) -> Any:
    """One NVML answer (bytes decoded to str), or None where this GPU or driver cannot answer."""
    try:
        value = function(*args)
    except nvml.NVMLError:
        return None
    return value.decode() if isinstance(value, bytes) else value
