"""``perfgate doctor``: what this host would run a benchmark on, and what would go wrong.

Reports the SGLang / FlashInfer / sgl-kernel / torch / CUDA versions of the server's interpreter, the
GPUs NVML sees (name, compute capability, enforced power limit, peer-to-peer read support
between every pair: the scenario's GPUs each sat on their own PCIe root complex, with no
P2P), and whether the installed SGLang autotunes the FlashInfer CUTLASS MoE runner.
Missing pieces (no GPU, no NVML, no SGLang) are reported, not failed: exit status 0.
Exit status 2 means the arguments were wrong (a --python that is not an interpreter included:
its report would only say "not installed" about everything).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate.errors import ServerError
from perfgate.gpu import GpuId, NvmlUnavailable, all_gpus, device_handle, nvml_session, p2p_read_status, query
from perfgate.server import SGLANG_VERSION_KEYS, check_python, locate_sglang, resolve_sglang_root, sglang_versions
from perfgate.server.autotune import detect_autotune

# nvidia-smi topo -p2p's legend for nvmlDeviceGetP2PStatus's answers.
_P2P_CODES = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DRK", 5: "NS", 6: "U"}
_P2P_LEGEND = (
    "OK = supported, CNS = chipset not supported, GNS = GPU not supported, "
    "TNS = topology not supported, DRK = disabled by registry key, NS = not supported, "
    "U = unknown, ERR = query failed"
)

_AUTOTUNE_HINTS = {
    "native": "SGLang autotunes flashinfer_cutlass itself; perfgate adds nothing",
    "patch-needed": 'perfgate patches this at launch with [server] flashinfer_cutlass_autotune = "auto"',
    "unknown": 'perfgate cannot patch this layout; [server] flashinfer_cutlass_autotune = "auto" fails the launch',
    "no-autotune": "this SGLang has no MoE autotune to patch",
}


def parser() -> argparse.ArgumentParser:
    """``perfgate doctor``'s options (also read by the options reference)."""
    parser = argparse.ArgumentParser(prog="perfgate doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="interpreter of the SGLang environment (default: this one)")
    parser.add_argument(
        "--sglang-root",
        type=Path,
        help="inspect this SGLang tree instead of the installed one: an unpacked wheel, "
        "a source checkout, or the sglang package directory",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    args.python = args.python or sys.executable
    try:
        check_python(args.python, "pass --python the interpreter of SGLang's environment")
    except ServerError as err:
        print(f"perfgate doctor: --python: {err}", file=sys.stderr)
        return 2
    if args.sglang_root is not None:
        try:
            args.sglang_root = resolve_sglang_root(args.sglang_root)
        except ServerError as err:
            print(f"perfgate doctor: --sglang-root: {err}", file=sys.stderr)
            return 2
    report = {
        "python": args.python,
        "versions": _versions(args.python),
        "nvml": _nvml(),
        "autotune": _autotune(args.python, args.sglang_root),
    }
    print(json.dumps(report, indent=2) if args.json else _text(report))
    return 0


def _versions(python: str) -> dict[str, Any]:
    try:
        return {**sglang_versions(python), "error": None}
    except ServerError as err:
        return {**dict.fromkeys(SGLANG_VERSION_KEYS), "error": str(err)}


def _autotune(python: str, sglang_root: Path | None) -> dict[str, Any]:
    if sglang_root is None:
        try:
            sglang_root = locate_sglang(python)
        except ServerError as err:
            return _no_sglang("unknown", str(err))
        if sglang_root is None:
            return _no_sglang("sglang not installed", f"sglang is not importable by {python}")
    status = detect_autotune(sglang_root)
    return {
        "status": status.status,
        "sglang_root": str(sglang_root),
        "sglang_version": status.sglang_version,
        "file": status.file,
        "function": status.function,
        "explanation": status.explanation,
        "hint": _AUTOTUNE_HINTS[status.status],
    }


def _no_sglang(status: str, explanation: str) -> dict[str, Any]:
    return {
        "status": status,
        "sglang_root": None,
        "sglang_version": None,
        "file": "",
        "function": "",
        "explanation": explanation,
        "hint": "",
    }


def _nvml() -> dict[str, Any]:
    try:
        with nvml_session() as nvml:
            try:
                gpus = all_gpus(nvml)
                handles = [device_handle(nvml, g) for g in gpus]
                return {
                    "available": True,
                    "error": None,
                    "driver": query(nvml, nvml.nvmlSystemGetDriverVersion),
                    "gpus": [_gpu(nvml, g, h) for g, h in zip(gpus, handles)],
                    "p2p_read": [
                        [_p2p(nvml, a, b) if i != j else "X" for j, b in enumerate(handles)]
                        for i, a in enumerate(handles)
                    ],
                }
            except nvml.NVMLError as err:
                return _no_nvml(f"NVML failed listing GPUs: {err}")
    except NvmlUnavailable as err:
        return _no_nvml(str(err))


def _no_nvml(reason: str) -> dict[str, Any]:
    return {"available": False, "error": reason, "driver": None, "gpus": [], "p2p_read": []}


def _gpu(nvml: Any, gpu: GpuId, handle: Any) -> dict[str, Any]:
    capability = query(nvml, nvml.nvmlDeviceGetCudaComputeCapability, handle)
    limit_mw = query(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    return {
        "index": gpu.index,
        "name": gpu.name or None,
        "uuid": gpu.uuid,
        "compute_capability": f"{capability[0]}.{capability[1]}" if capability else None,
        "power_limit_w": limit_mw / 1000.0 if limit_mw is not None else None,
    }


def _p2p(nvml: Any, a: Any, b: Any) -> str:
    status = p2p_read_status(nvml, a, b)
    return "ERR" if status is None else _P2P_CODES.get(status, f"?{status}")


def _text(report: dict[str, Any]) -> str:
    versions, nvml, autotune = report["versions"], report["nvml"], report["autotune"]
    lines = ["perfgate doctor", f"  python       {report['python']}"]
    if versions["error"]:
        lines.append(f"  versions     unavailable: {versions['error']}")
    for key, label in (
        ("sglang", "SGLang"),
        ("flashinfer", "FlashInfer"),
        ("sgl-kernel", "sgl-kernel"),
        ("torch", "torch"),
        ("cuda", "CUDA (torch)"),
    ):
        lines.append(f"  {label:<12} {versions[key] or 'not installed'}")
    if not nvml["available"]:
        lines.append(f"  GPUs         none visible: {nvml['error']}")
    else:
        lines.append(f"  GPUs         {len(nvml['gpus'])} (NVIDIA driver {nvml['driver'] or 'unknown'})")
        for gpu in nvml["gpus"]:
            cc = f"sm_{gpu['compute_capability'].replace('.', '')}" if gpu["compute_capability"] else "sm_?"
            limit = f"{gpu['power_limit_w']:.0f} W" if gpu["power_limit_w"] is not None else "unknown"
            lines.append(f"    GPU{gpu['index']}  {gpu['name']}  {cc}  enforced power limit {limit}")
        if len(nvml["gpus"]) > 1:
            lines.append(f"  P2P read     ({_P2P_LEGEND})")
            header = "".join(f"{'GPU' + str(i):>6}" for i in range(len(nvml["gpus"])))
            lines.append(f"          {header}")
            for i, row in enumerate(nvml["p2p_read"]):
                lines.append(f"    {'GPU' + str(i):<6}" + "".join(f"{cell:>6}" for cell in row))
    lines.append(f"  autotune     {autotune['status']}: {autotune['explanation']}")
    if autotune.get("hint"):
        lines.append(f"               {autotune['hint']}")
    return "\n".join(lines)
