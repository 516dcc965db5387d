"""perfgate's sitecustomize: install the FlashInfer CUTLASS autotune hook, then chain.

perfgate puts this directory first on the SGLang server's ``PYTHONPATH``, so Python's
``site`` imports this file instead of any ``sitecustomize`` further down the path (Debian
and conda interpreters ship one). That one still runs, right after the hook is installed,
and takes this module's place in ``sys.modules``.
"""

import importlib.machinery
import importlib.util
import os
import sys

import _perfgate_autotune_hook  # type: ignore[import-not-found]  # this directory, on sys.path

_perfgate_autotune_hook.install_from_environment()


def _run_shadowed_sitecustomize() -> None:
    here = os.path.realpath(os.path.dirname(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_run_shadowed_sitecustomize()
