"""Make SGLang autotune the FlashInfer CUTLASS MoE runner, in every process that imports it.

This file runs inside the *server's* interpreter (often another virtual environment, where
perfgate is not installed), so it uses the standard library only and stays importable on
Python 3.9+. perfgate imports the same file to inspect unpacked SGLang trees, so detection
and patching share one definition of "the decision".

Why a rewrite of one list literal, and not a wrapper around the method
----------------------------------------------------------------------
SGLang 0.5.7 - 0.5.12 decide in ``ModelRunner._should_run_flashinfer_autotune``
(``sglang/srt/model_executor/model_runner.py``). The method reads the configured MoE runner
backend and returns False unless it is ``in`` an inline list of strings, in which
``"flashinfer_cutlass"`` is commented out; then come SGLang's other gates
(``--disable-flashinfer-autotune``, the CuteDSL + DeepEP exclusion, device capability
major >= 9, speculative draft workers). A wrapper that calls the method and overrides its
answer for ``flashinfer_cutlass`` would have to re-implement those other gates, or fake
the backend name to one SGLang lists, and either silently drifts when a release adds a
gate. Adding ``"flashinfer_cutlass"`` to that list, in memory, at import time, is the
change a person would make by hand: every other input takes exactly the path SGLang wrote,
the capability gate stays SGLang's own (major >= 9, the gate SGLang 0.5.13 applies when it
lists ``flashinfer_cutlass`` natively, which SM120 passes), and when the list is not where
it is expected nothing is changed and the process says so on stderr.

Proof from inside the server
----------------------------
Every line this hook writes goes to stderr (the server log) as
``perfgate-autotune: <what> in pid N``: ``loaded`` when the hook is installed (every process
of the server), ``patched`` / ``checked`` when the target module was rewritten (the processes
that import it: SGLang's schedulers), and ``decision evaluated <target> -> <result>`` each time
SGLang calls the decision: after the rewrite the function is wrapped, so the line comes from
the process and the call where SGLang actually decided. A release can import the module
without ever asking (0.5.12's ``ModelRunner.kernel_warmup`` returns before the decision when
the device is not CUDA): then there is no such line, and perfgate says so.

The rewrite happens in a meta-path finder: when the target module is imported, its loader
is wrapped so the module's source is parsed, the list is extended, and the tree is compiled
with the original file name (tracebacks keep their lines). Files in site-packages are never
touched. SGLang spawns its schedulers, which import everything afresh, so this finder is
installed by the ``sitecustomize`` next to this file in every process whose ``PYTHONPATH``
starts with this directory and whose environment names the target in ``ENV_VAR``.
"""

from __future__ import annotations

import ast
import functools
import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Sequence
from typing import Any, NamedTuple

# Set by perfgate to "<module>:<qualname>" of the decision to patch; unset means "do nothing".
ENV_VAR = "PERFGATE_FLASHINFER_CUTLASS_AUTOTUNE"
# Every stderr line this hook writes starts with this, for the log verifier.
EVIDENCE_PREFIX = "perfgate-autotune:"
CUTLASS = "flashinfer_cutlass"
# MoE runner backends SGLang has listed as autotuned in some release; a list of strings
# compared with ``in`` that names one of them is "the list of autotuned MoE backends".
KNOWN_MOE_AUTOTUNE_BACKENDS = frozenset(
    {
        "flashinfer_trtllm",
        "flashinfer_trtllm_routed",
        "flashinfer_mxfp4",
        "flashinfer_cutedsl",
        "flashinfer_cutlass",
        "flashinfer_megamoe",
    }
)


class Target(NamedTuple):
    """Where one SGLang layout keeps the decision "should FlashInfer autotune run"."""

    module: str
    qualname: str
    # Path of the module's file relative to the ``sglang`` package directory.
    relpath: str
    releases: str

    @property
    def spec(self) -> str:
        return f"{self.module}:{self.qualname}"


# Newest layout first: older files (model_runner.py) exist in every release.
TARGETS = (
    Target(
        "sglang.srt.model_executor.runner.flashinfer_autotune",
        "should_run_flashinfer_autotune",
        "srt/model_executor/runner/flashinfer_autotune.py",
        "0.5.15+",
    ),
    Target(
        "sglang.srt.model_executor.runner.base_runner",
        "BaseRunner._should_run_flashinfer_autotune",
        "srt/model_executor/runner/base_runner.py",
        "0.5.14",
    ),
    Target(
        "sglang.srt.model_executor.model_runner",
        "ModelRunner._should_run_flashinfer_autotune",
        "srt/model_executor/model_runner.py",
        "0.5.6 - 0.5.13",
    ),
)


def find_function(tree: ast.Module, qualname: str) -> ast.FunctionDef | None:
    """The function or method ``qualname`` ("f" or "Class.method") defined at module level."""
    body: Sequence[ast.stmt] = tree.body
    *classes, name = qualname.split(".")
    for class_name in classes:
        found = [n for n in body if isinstance(n, ast.ClassDef) and n.name == class_name]
        if not found:
            return None
        body = found[-1].body
    funcs = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    return funcs[-1] if funcs else None


def moe_backend_lists(func: ast.FunctionDef) -> list[ast.List]:
    """List literals of backend names tested with ``in`` / ``not in`` inside ``func``."""
    found = []
    for node in ast.walk(func):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        if not isinstance(node.ops[0], (ast.In, ast.NotIn)):
            continue
        seq = node.comparators[0]
        if not isinstance(seq, ast.List):
            continue
        names = string_elements(seq)
        if names is not None and KNOWN_MOE_AUTOTUNE_BACKENDS & set(names):
            found.append(seq)
    return found


def string_elements(seq: ast.List) -> list[str] | None:
    """The list's elements when all are string literals, else None."""
    if all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in seq.elts):
        return [e.value for e in seq.elts]  # type: ignore[attr-defined]
    return None


def reads_moe_backend(func: ast.FunctionDef) -> bool:
    """Whether the function looks at the configured MoE runner backend at all."""
    return any(isinstance(n, ast.Attribute) and n.attr == "moe_runner_backend" for n in ast.walk(func))


def add_cutlass(tree: ast.Module, qualname: str) -> int:
    """Append ``"flashinfer_cutlass"`` to each MoE backend list of ``qualname`` lacking it.

    Returns how many lists were changed (0: already listed). Raises LookupError naming
    what was not found when the function or its list is missing.
    """
    func = find_function(tree, qualname)
    if func is None:
        raise LookupError(f"{qualname} is not defined")
    lists = moe_backend_lists(func)
    if not lists:
        raise LookupError(f"{qualname} has no list of autotuned MoE runner backends")
    changed = 0
    for seq in lists:
        if CUTLASS not in (string_elements(seq) or ()):
            element = ast.Constant(CUTLASS)
            ast.copy_location(element, seq.elts[-1] if seq.elts else seq)
            seq.elts.append(element)
            changed += 1
    return changed


def _say(message: str) -> None:
    sys.stderr.write(f"{EVIDENCE_PREFIX} {message} in pid {os.getpid()}\n")
    sys.stderr.flush()


def instrument(module: types.ModuleType, qualname: str, spec_text: str) -> None:
    """Wrap the function ``qualname`` of ``module`` so every call says what it decided, and where.

    Raises LookupError when ``qualname`` is not a plain function of the module or its class.
    """
    *classes, name = qualname.split(".")
    holder: object = module
    for class_name in classes:
        holder = getattr(holder, class_name, None)
        if not isinstance(holder, type):
            raise LookupError(f"{qualname}: {class_name} is not a class of {module.__name__}")
    namespace = vars(holder)
    original = namespace.get(name)
    if not isinstance(original, types.FunctionType):
        raise LookupError(f"{qualname} is not a plain function (found {type(original).__name__})")

    @functools.wraps(original)
    def decision(*args: Any, **kwargs: Any) -> Any:
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            _say(f"decision evaluated {spec_text} -> raised {type(exc).__name__}")
            raise
        _say(f"decision evaluated {spec_text} -> {result!r}")
        return result

    setattr(holder, name, decision)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the target module from its source with the backend list extended."""

    def __init__(self, inner: importlib.abc.Loader, target_qualname: str, spec_text: str):
        self._inner = inner
        self._qualname = target_qualname
        self._spec_text = spec_text

    def __getattr__(self, name: str) -> Any:
        # get_source, get_filename, get_resource_reader ... stay the original loader's.
        return getattr(self._inner, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        origin = getattr(module, "__file__", None) or module.__name__
        try:
            source = self._inner.get_source(module.__name__)  # type: ignore[attr-defined]
            if source is None:
                raise LookupError(f"no source for {origin}")
            tree = ast.parse(source, filename=origin)
            changed = add_cutlass(tree, self._qualname)
        except (LookupError, SyntaxError, OSError, AttributeError) as exc:
            _say(f"FAILED to patch {self._spec_text} ({exc}); running SGLang unchanged")
            self._inner.exec_module(module)
            return
        code = compile(tree, origin, "exec", dont_inherit=True)
        # What SourceFileLoader.exec_module does with the code it compiles.
        exec(code, module.__dict__)
        try:
            instrument(module, self._qualname, self._spec_text)
        except LookupError as exc:
            # The patch stands; only the proof of its use is missing, and the verifier says so.
            _say(f"FAILED to instrument {self._spec_text} ({exc}); calls of the decision are not reported")
        if changed:
            _say(f"patched {self._spec_text}: {CUTLASS} added to the autotuned MoE backends")
        else:
            _say(f"checked {self._spec_text}: {CUTLASS} already autotuned, nothing to change")


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, qualname: str):
        self.module = module
        self.qualname = qualname

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.module:
            return None
        for finder in [f for f in sys.meta_path if f is not self]:
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = find(fullname, path, target) if find else None
            if spec is None:
                continue
            if spec.loader is None or not hasattr(spec.loader, "get_source"):
                _say(f"FAILED to patch {self.module}:{self.qualname} (its loader has no source)")
                return spec
            spec.loader = _PatchingLoader(spec.loader, self.qualname, f"{fullname}:{self.qualname}")
            return spec
        return None


def install(spec_text: str) -> None:
    """Patch ``"<module>:<qualname>"`` when the module is imported in this process."""
    module, sep, qualname = spec_text.partition(":")
    if not sep or not module or not qualname:
        _say(f"FAILED: {ENV_VAR}={spec_text!r} is not '<module>:<qualname>'")
        return
    if module in sys.modules:
        _say(f"FAILED to patch {spec_text} (imported before the hook was installed)")
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(module, qualname))
        _say(f"loaded for {spec_text}")


def install_from_environment() -> None:
    """Install the hook when perfgate set ``ENV_VAR`` for this process."""
    spec_text = os.environ.get(ENV_VAR, "")
    if spec_text:
        install(spec_text)
