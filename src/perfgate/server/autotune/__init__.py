"""The FlashInfer CUTLASS MoE autotune patch for SGLang on SM120 (``[server] flashinfer_cutlass_autotune``).

SGLang 0.5.7 - 0.5.12 autotune FlashInfer's MoE kernels for some runner backends but not
``flashinfer_cutlass``, the one SGLang itself picks for NVFP4 on SM120; untuned, a GLM-5
NVFP4 server ran at ~880 instead of ~3,740 tok/s. ``detect_autotune`` reads an SGLang tree,
``plan_autotune`` turns the profile's mode into server environment (a ``sitecustomize``
hook on ``PYTHONPATH``, see ``hook/_perfgate_autotune_hook.py``), and
``verify_autotune_log`` checks the server log for proof that every rank tuned.
"""

from perfgate.server._sglang import find_sglang_root
from perfgate.server.autotune._detect import AutotuneStatus, detect_autotune
from perfgate.server.autotune._evidence import (
    AutotuneEvidence,
    autotune_cache_root,
    snapshot_autotune_cache,
    verify_autotune_log,
)
from perfgate.server.autotune._plan import (
    ENV_VAR,
    HOOK_DIR,
    AutotunePlan,
    plan_autotune,
)
from perfgate.server.autotune._tactics import TacticRecord, compare_tactics, read_tactics

__all__ = [
    "ENV_VAR",
    "HOOK_DIR",
    "AutotuneEvidence",
    "AutotunePlan",
    "AutotuneStatus",
    "TacticRecord",
    "autotune_cache_root",
    "compare_tactics",
    "detect_autotune",
    "find_sglang_root",
    "plan_autotune",
    "read_tactics",
    "snapshot_autotune_cache",
    "verify_autotune_log",
]
