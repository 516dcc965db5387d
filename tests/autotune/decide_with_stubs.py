"""Run SGLang's real autotune decision with its heavy imports stubbed (a subprocess helper).

Usage: python decide_with_stubs.py SGLANG_PARENT_DIR MODULE QUALNAME MODE
MODE "grid": import MODULE through the normal import system (where perfgate's hook, when
installed by sitecustomize, patches it) and also load the same file unpatched under another
name; print one JSON object with both decisions over a grid of inputs.
MODE "spawn": ask a multiprocessing "spawn" child to import MODULE and decide for
flashinfer_cutlass on capability (12, 0); print the child's pid and answer as JSON.

Everything outside the standard library (torch, flashinfer, the rest of sglang ...) is a
stub module whose attributes are falsy callables, so only the decision's own logic runs.
The stubs are installed at import time of this file, so a spawned child gets them too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import json
import multiprocessing
import sys
import types
from pathlib import Path

ROOT = Path(sys.argv[1]) if __name__ == "__main__" else None


class Stub:
    """Stands for any object of a stubbed module: falsy, callable, subscriptable, a base."""

    def __getattr__(self, name: str) -> Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub()

    def __call__(self, *args, **kwargs) -> Stub:
        return Stub()

    def __bool__(self) -> bool:
        return False

    def __getitem__(self, item) -> Stub:
        return Stub()

    def __iter__(self):
        return iter(())

    def __or__(self, other) -> Stub:
        return Stub()

    __ror__ = __or__

    def __mro_entries__(self, bases) -> tuple:
        return ()


class StubModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub()


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stubs every non-stdlib module except the decision's own module."""

    def __init__(self, root: Path, keep: set[str]):
        self.root = root
        self.keep = keep

    def find_spec(self, fullname, path, target=None):
        top = fullname.partition(".")[0]
        if fullname in self.keep or top in sys.stdlib_module_names or top == "_perfgate_autotune_hook":
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        return StubModule(spec.name)

    def exec_module(self, module) -> None:
        # Real directories for the packages above the kept module, so it can be found.
        real = self.root.joinpath(*module.__name__.split("."))
        module.__path__ = [str(real)] if real.is_dir() else []


def install_stubs(root: Path, module: str) -> None:
    sys.meta_path.insert(0, StubFinder(root, {module}))


def set_capability(major_minor: tuple[int, int]) -> None:
    sys.modules["torch"].cuda = types.SimpleNamespace(get_device_capability=lambda *args: major_minor)


def decide(cls, function: str, backend: str, a2a: str, disable: bool, speculative: bool, draft: bool) -> bool:
    server_args = types.SimpleNamespace(
        disable_flashinfer_autotune=disable,
        moe_runner_backend=backend,
        moe_a2a_backend=a2a,
    )
    runner = types.SimpleNamespace(
        server_args=server_args,
        spec_algorithm=types.SimpleNamespace(is_speculative=lambda: speculative),
        is_draft_worker=draft,
    )
    return bool(getattr(cls, function)(runner))


BACKENDS = [
    "flashinfer_cutlass",
    "flashinfer_trtllm",
    "flashinfer_trtllm_routed",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "triton",
    "auto",
    "deep_gemm",
    "cutlass",
]
CAPABILITIES = [(7, 5), (8, 0), (8, 9), (9, 0), (10, 0), (12, 0), (12, 1)]


def grid(module_name: str, qualname: str) -> dict:
    import importlib

    patched = importlib.import_module(module_name)
    spec = importlib.util.spec_from_file_location("unpatched_copy", patched.__file__)
    unpatched = importlib.util.module_from_spec(spec)
    sys.modules["unpatched_copy"] = unpatched
    spec.loader.exec_module(unpatched)
    class_name, function = qualname.split(".")
    rows = []
    for cap, backend, a2a, disable, (speculative, draft) in itertools.product(
        CAPABILITIES,
        BACKENDS,
        ["none", "deepep"],
        [False, True],
        [(False, False), (True, False), (True, True)],
    ):
        set_capability(cap)
        args = (backend, a2a, disable, speculative, draft)
        rows.append(
            {
                "capability": cap,
                "backend": backend,
                "a2a": a2a,
                "disable": disable,
                "speculative": speculative,
                "draft": draft,
                "sglang": decide(getattr(unpatched, class_name), function, *args),
                "patched": decide(getattr(patched, class_name), function, *args),
            }
        )
    return {"rows": rows}


def child(module_name: str, qualname: str, queue) -> None:
    import importlib
    import os

    class_name, function = qualname.split(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    set_capability((12, 0))
    queue.put(
        {"pid": os.getpid(), "decision": decide(cls, function, "flashinfer_cutlass", "none", False, False, False)}
    )


def spawn(module_name: str, qualname: str) -> dict:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(module_name, qualname, queue))
    process.start()
    process.join(timeout=120)
    answer = queue.get(timeout=5) if process.exitcode == 0 else {}
    return {"parent_pid": multiprocessing.current_process().pid, **answer, "exitcode": process.exitcode}


if __name__ == "__main__":
    _, _, MODULE, QUALNAME, MODE = sys.argv
    install_stubs(ROOT, MODULE)
    result = grid(MODULE, QUALNAME) if MODE == "grid" else spawn(MODULE, QUALNAME)
    print(json.dumps(result))
elif __name__ == "__mp_main__":
    # The spawned child re-imports this file under this name; give it the same stubs.
    install_stubs(Path(sys.argv[1]), sys.argv[2])
