"""Build a carryable bundle of a PyPI SGLang release for a GPU host that has no network.

The host already holds Python, torch and most of what SGLang needs (its package list is given
with ``--have``: see ``h200_packages.txt`` for the H200 device machine). This module, on a machine
with PyPI:

1. **resolves** the release's requirements with pip's own resolver for the target platform
   (``pip install --dry-run --report`` under the target's Python, manylinux x86_64 wheels only),
   the host's pinned packages standing in as installed stub distributions, so torch and its CUDA
   libraries are never pulled in; then walks the dependency graph from the roots and keeps only
   what the host does not satisfy (``select_carry``), less the optional CUDA extras in
   ``LEAVE_OUT``;
2. **downloads** exactly the resolved wheel files, checking pip's sha256 of each;
3. **installs** them into one ``site`` tree (``pip install --target --no-deps --no-index``);
4. **strips** sglang-kernel down to one CUDA architecture (``strip_kernel``);
5. **packs** the tree (``tar | xz -T2``, niced: the build machine is shared), **splits** it into
   chunks below the device's 64 MiB per call with sha256 sums, and writes ``join.sh`` (verify,
   join, unpack, import check) and ``env.sh`` (the server's environment).

Every step is cached under ``--out`` and keyed by what decides its output: a second run with the
same inputs reuses the plan, the downloads, the tree and the chunks. Every failure raises
``SGLangBundleError`` naming the step and what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import filelock
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from perfgate.errors import PerfgateError

# Bump when a change here alters what a bundle holds for the same inputs: it invalidates caches.
BUNDLE_VERSION = 1

# The device takes at most 64 MiB per call, its work tree included: 55 MiB leaves room for it.
CHUNK_BYTES = 55 * 1024 * 1024

# Wheel tags of the target: x86-64 Linux; pip matches manylinux_2_N exactly, so list each N.
PLATFORMS = (
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)

# Heavy CUDA extras SGLang 0.5.17 requires but never imports when it serves a dense model with
# --attention-backend triton --sampling-backend pytorch --grammar-backend none: the run of
# 2026-12-01 on the H200 served without every one of them (503 MiB of wheels).
LEAVE_OUT: Mapping[str, str] = {
    "tokenspeed-triton": "a Triton fork for TokenSpeed kernels (90 MiB), imported only by them",
    "tokenspeed-mla": "TokenSpeed MLA attention kernels (MLA models only)",
    "nvidia-cutlass-dsl": "CUTLASS CuTe DSL compiler (FA4, quack, FlashInfer CuTe kernels)",
    "nvidia-cutlass-dsl-libs-base": "CUTLASS CuTe DSL libraries",
    "nvidia-cutlass-dsl-libs-core": "CUTLASS CuTe DSL libraries",
    "nvidia-cutlass-dsl-libs-cu12": "CUTLASS CuTe DSL libraries for CUDA 12 (84 MiB)",
    "nvidia-cutlass-dsl-libs-cu13": "CUTLASS CuTe DSL libraries for CUDA 13 (84 MiB)",
    "nvidia-nvvm": "pip copy of NVVM; the host's CUDA toolkit has its own",
    "nvidia-cuda-nvcc": "pip copy of nvcc; the host's CUDA toolkit has /usr/local/cuda/bin/nvcc",
    "nvidia-cuda-nvdisasm": "pip copy of nvdisasm",
    "nvidia-cuda-cccl": "pip copy of CCCL headers; the host's CUDA toolkit has them",
    "nvidia-cuda-crt": "pip copy of the CUDA runtime headers",
    "nvidia-mathdx": "CUDA math device extensions (cuBLASDx/cuFFTDx)",
    "nvidia-cudnn-frontend": "cuDNN frontend (cuDNN attention backends only)",
    "tilelang": "TileLang kernel compiler (DeepSeek sparse attention)",
    "z3-solver": "tilelang's solver",
    "sgl-deep-gemm": "DeepGEMM FP8 GEMMs (FP8 models; SGLANG_ENABLE_JIT_DEEPGEMM=0)",
    "flash-attn-4": "FlashAttention 4 (CuTe DSL, SM100 first)",
    "quack-kernels": "CuTe DSL kernels",
    "helion": "Helion kernel DSL",
    "humming-kernels": "MoE kernels (MoE models only)",
    "nccl4py": "NCCL bindings for multi-GPU communication",
    "cuda-tile": "CUDA tile IR bindings",
    "pyelftools": "ELF reader of the CUDA toolchain wheels",
    "filecheck": "LLVM FileCheck, a test tool of the CUDA DSL wheels",
}

# Packages the host has that the bundle carries anyway: the run of 2026-12-01 that served on the
# H200 carried these releases over the host's copies (whose versions the package list does not
# give), so the bundle reproduces what was measured rather than assuming the host's copies fit.
CARRY_OVER_HOST: Mapping[str, str] = dict.fromkeys(
    (
        "build",
        "grpcio",
        "hf-xet",
        "joblib",
        "lxml",
        "ml-dtypes",
        "narwhals",
        "pyproject-hooks",
        "scikit-learn",
        "tabulate",
        "threadpoolctl",
        "timm",
    ),
    "carried in the 2026-12-01 H200 run that served; the host's version is not listed",
)

# Host packages never shadowed, whatever a carried package's metadata asks.
KEEP_HOST: Mapping[str, str] = {
    # mistral-common caps numpy<2.4 (Python <= 3.12); the host's torch, scipy and numba are built
    # against its numpy 2.5.2, the cap is not checked at import, and the 2026-12-01 run served with it.
    "numpy": "the host's numpy, which its torch, scipy and numba are built against",
}

# Files of the sglang-kernel wheel that a dense-model server on the triton attention backend
# never loads, besides the common_ops of the other architectures (``strip_kernel``).
KERNEL_DROP: Mapping[str, str] = {
    "sgl_kernel/flash_ops.abi3.so": "FlashAttention 3 (1.12 GB): the bundle serves with triton attention",
    "sgl_kernel/flashmla_ops.abi3.so": "FlashMLA (MLA models only)",
    "sgl_kernel/infllm_ops.cpython-310-x86_64-linux-gnu.so": "InfLLM sparse attention",
}

# The server's environment on the host (env.sh adds the bundle's site first on PYTHONPATH).
SERVER_ENV: Mapping[str, str] = {
    # SGLang JIT-compiles some of its kernels with nvcc and g++.
    "CUDA_HOME": "/usr/local/cuda",
    "HF_HUB_OFFLINE": "1",
    # FlashInfer's JIT would compile its sampling and attention kernels at boot: the bundle's
    # flags pick SGLang's own triton/pytorch paths instead.
    "SGLANG_IS_FLASHINFER_AVAILABLE": "false",
    "SGLANG_ENABLE_JIT_DEEPGEMM": "0",
}


@dataclass(frozen=True)
class BundleRecipe:
    """What one bundle is built from: the release, the target and the host's packages."""

    version: str
    torch: str
    cuda_arch: str
    python_version: str
    have: Mapping[str, str | None]
    extra_roots: tuple[str, ...] = ()
    leave_out: Mapping[str, str] = field(default_factory=lambda: dict(LEAVE_OUT))
    carry_over_host: Mapping[str, str] = field(default_factory=lambda: dict(CARRY_OVER_HOST))
    keep_host: Mapping[str, str] = field(default_factory=lambda: dict(KEEP_HOST))

    def key(self) -> str:
        doc = asdict(self)
        doc["have"] = sorted(f"{k}=={v}" if v else k for k, v in self.have.items())
        doc["leave_out"] = sorted(self.leave_out)
        doc["carry_over_host"] = sorted(self.carry_over_host)
        doc["keep_host"] = sorted(self.keep_host)
        doc["kernel_drop"] = sorted(KERNEL_DROP)
        doc["v"] = BUNDLE_VERSION
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]

    def roots(self) -> list[str]:
        return [f"sglang=={self.version}", *self.extra_roots]


@dataclass(frozen=True)
class Candidate:
    """One distribution pip's resolver chose: where its wheel is and what it requires."""

    name: str
    version: str
    url: str
    sha256: str
    requires_dist: tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1].split("#", 1)[0]


@dataclass(frozen=True)
class CarryPlan:
    """What the bundle carries, what the host satisfies, what is left out, each with why."""

    carry: dict[str, Candidate]
    satisfied: dict[str, str]
    left_out: dict[str, str]

    def shadows(self, have: Mapping[str, str | None]) -> dict[str, str]:
        """Carried packages the host also has (the bundle's copy comes first on PYTHONPATH)."""
        return {
            name: f"carried {c.version} over the host's {have[name] or 'copy'}"
            for name, c in sorted(self.carry.items())
            if name in have
        }


@dataclass(frozen=True)
class Bundle:
    """A finished bundle: its chunk folders (one device call each) and what it measured."""

    out: Path
    chunk_dirs: list[Path]
    archive_bytes: int
    tree_bytes: int
    manifest: dict[str, object]


class SGLangBundleError(PerfgateError):
    """A step of building or joining an SGLang bundle failed; the message names it and the fix."""


# -- the host's package list -----------------------------------------------------------------


def parse_have(text: str, *, source: str) -> dict[str, str | None]:
    """``name`` / ``name==version`` entries (one a line or comma-separated; ``#`` comments)."""
    have: dict[str, str | None] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        for item in raw.split("#", 1)[0].split(","):
            entry = item.strip()
            if not entry:
                continue
            name, sep, version = entry.partition("==")
            name, version = name.strip(), version.strip()
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or (sep and not version):
                raise SGLangBundleError(
                    f"{source}, line {lineno}: {entry!r} is not a package entry: write NAME or NAME==VERSION"
                )
            if version:
                try:
                    Version(version)
                except InvalidVersion:
                    raise SGLangBundleError(
                        f"{source}, line {lineno}: {entry!r}: {version!r} is not a version (PEP 440)"
                    ) from None
            have[canonicalize_name(name)] = version or None
    return have


def load_have(arg: str) -> dict[str, str | None]:
    """``--have``: a file of entries, or the entries themselves (comma-separated)."""
    path = Path(arg)
    if path.is_file():
        try:
            return parse_have(path.read_text(encoding="utf-8"), source=str(path))
        except (OSError, UnicodeDecodeError) as e:
            raise SGLangBundleError(f"--have {arg}: cannot read it: {e}") from None
    if "/" in arg or arg.endswith(".txt"):
        raise SGLangBundleError(f"--have {arg}: no such file (give a package list file or NAME[==VERSION],...)")
    return parse_have(arg, source="--have")


# -- what to carry -----------------------------------------------------------------------------


def target_environment(python_version: str) -> dict[str, str]:
    """PEP 508 marker values of the target: CPython ``python_version`` on x86-64 Linux."""
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python_version}.0",
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": f"{python_version}.0",
        "platform_python_implementation": "CPython",
        "python_version": python_version,
        "sys_platform": "linux",
    }


def _satisfied_by_host(
    req: Requirement, have: Mapping[str, str | None], carry_over: Mapping[str, str], keep: Mapping[str, str]
) -> str | None:
    name = canonicalize_name(req.name)
    if name in keep:
        return f"on the host, kept: {keep[name]}"
    if name not in have or name in carry_over:
        return None
    version = have[name]
    if version is None:
        return "on the host (version not listed: taken as satisfying)"
    if req.specifier.contains(version, prereleases=True):
        return f"on the host ({version})"
    return None


def select_carry(
    candidates: Mapping[str, Candidate],
    roots: Iterable[str],
    have: Mapping[str, str | None],
    leave_out: Mapping[str, str],
    python_version: str,
    *,
    carry_over_host: Mapping[str, str] | None = None,
    keep_host: Mapping[str, str] | None = None,
) -> CarryPlan:
    """Walk the requirement graph from ``roots``; carry what the host does not satisfy.

    A requirement the host satisfies is not followed (the host's copy brings its own needs); a
    left-out package is neither carried nor followed. ``carry_over_host`` names host packages
    carried all the same; ``keep_host`` names host packages that satisfy every requirement. Each
    carried package's requirements are followed with the extras asked of it, under the target's
    markers. Raises when the resolver
    gave no candidate, or one outside a requirement's range (its answer and the walk disagree).
    """
    env = target_environment(python_version)
    carry: dict[str, Candidate] = {}
    satisfied: dict[str, str] = {}
    left_out: dict[str, str] = {}
    expanded: set[tuple[str, frozenset[str]]] = set()
    queue: list[tuple[Requirement, str]] = []
    for text in roots:
        root = _requirement(text, "the bundle's roots")
        # perfgate's own requirements come with markers (tomli only below Python 3.11).
        if root.marker is None or root.marker.evaluate({**env, "extra": ""}):
            queue.append((root, "root"))
    while queue:
        req, parent = queue.pop(0)
        name = canonicalize_name(req.name)
        if name in leave_out:
            left_out[name] = leave_out[name]
            continue
        host = _satisfied_by_host(req, have, carry_over_host or {}, keep_host or {})
        if host is not None:
            satisfied.setdefault(name, host)
            continue
        cand = candidates.get(name)
        if cand is None:
            raise SGLangBundleError(
                f"{parent} requires {req}, and pip's resolution holds no {name}: add it to --have if the host "
                "has it, or report the resolver output (plan.json) as a bug"
            )
        if not req.specifier.contains(cand.version, prereleases=True):
            raise SGLangBundleError(
                f"{parent} requires {req}, but pip resolved {name} {cand.version}; the host list (--have) "
                "pins a release that conflicts: fix that entry"
            )
        extras = frozenset(canonicalize_name(e) for e in req.extras)
        key = (name, extras)
        if key in expanded:
            continue
        expanded.add(key)
        carry[name] = cand
        for dep_text in cand.requires_dist:
            dep = _requirement(dep_text, f"{cand.name} {cand.version}")
            if dep.marker is not None and not any(
                dep.marker.evaluate({**env, "extra": e}) for e in ("", *sorted(extras))
            ):
                continue
            queue.append((dep, f"{cand.name} {cand.version}"))
    for carried in carry:
        satisfied.pop(carried, None)
    return CarryPlan(dict(sorted(carry.items())), dict(sorted(satisfied.items())), dict(sorted(left_out.items())))


def _requirement(text: str, where: str) -> Requirement:
    try:
        return Requirement(text)
    except InvalidRequirement as e:
        raise SGLangBundleError(f"{where}: cannot parse requirement {text!r}: {e}") from None


def candidates_from_report(report: Mapping[str, object]) -> dict[str, Candidate]:
    """pip's ``--report`` JSON -> name -> Candidate."""
    out: dict[str, Candidate] = {}
    items = report.get("install")
    if not isinstance(items, list):
        raise SGLangBundleError("pip's resolver report has no 'install' list (pip too old? it needs pip >= 23)")
    for item in items:
        meta = item["metadata"]
        info = item["download_info"]
        sha = (info.get("archive_info") or {}).get("hashes", {}).get("sha256", "")
        name = canonicalize_name(meta["name"])
        out[name] = Candidate(name, meta["version"], info["url"], sha, tuple(meta.get("requires_dist") or ()))
    return out


# -- steps -------------------------------------------------------------------------------------

_DISK_FULL = "No space left on device"


def _run(argv: Sequence[str], step: str, fix: str, *, log: Path, env: Mapping[str, str] | None = None) -> str:
    """Run one build step; its output is appended to ``log`` and returned."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=dict(env) if env else None, check=False)
    except OSError as e:
        raise SGLangBundleError(f"{step}: cannot run {argv[0]!r}: {e}; {fix}") from None
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}\n[exit {proc.returncode}]\n")
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        if _DISK_FULL in text:
            free_gb = shutil.disk_usage(log.parent).free / 1e9
            fix = f"the disk is full ({free_gb:.1f} GB free): free space or use another --out"
        missing = re.search(r"No matching distribution found for (\S+)", text)
        if missing:
            fix = (
                f"{missing.group(1)} has no wheel on the registry for CPython {step.split('@')[-1]} "
                f"on x86-64 manylinux: add it to --have if the host has it, or leave it out (LEAVE_OUT)"
            )
        lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if "is ignored" not in ln]
        tail = "\n".join(lines[-12:])
        raise SGLangBundleError(f"{step.split('@')[0]} failed (exit {proc.returncode})\n{tail}\n-> {fix} (log: {log})")
    return proc.stdout


def _platform_args(python_version: str) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for tag in PLATFORMS:
        args += ["--platform", tag]
    return args


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tree_bytes(tree: Path) -> int:
    return sum(p.stat().st_size for p in tree.rglob("*") if p.is_file() and not p.is_symlink())


def resolver_venv(out: Path, python: str, python_version: str, log: Path) -> Path:
    """A bare venv of the target's Python with a pip new enough for --dry-run --report with --platform."""
    venv = out / "resolver"
    pip = venv / "bin" / "pip"
    if not pip.exists():
        _run([python, "-m", "venv", "--clear", str(venv)], "creating the resolver venv", f"check {python}", log=log)
        _run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "pip>=25"],
            "upgrading pip in the resolver venv",
            "check that PyPI is reachable",
            log=log,
        )
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.stdout.strip() != python_version:
        raise SGLangBundleError(
            f"--python {python} is Python {proc.stdout.strip() or '?'}, the target is {python_version}: give an "
            f"interpreter of the target's version (markers and wheel tags are evaluated by it)"
        )
    return venv


def _write_stubs(stubs: Path, have: Mapping[str, str | None]) -> None:
    """Empty installed distributions for the host's pinned packages, seen by the resolver."""
    shutil.rmtree(stubs, ignore_errors=True)
    stubs.mkdir(parents=True)
    for name, version in have.items():
        if version is None:
            continue
        info = stubs / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("perfgate-bundle-stub\n")
        (info / "RECORD").write_text("")


def resolve(recipe: BundleRecipe, out: Path, python: str, log: Path) -> tuple[CarryPlan, dict[str, Candidate]]:
    """The carry plan of ``recipe`` (cached in ``out/plan.json`` under the recipe's key)."""
    plan_path = out / "plan.json"
    key = recipe.key()
    try:
        cached = json.loads(plan_path.read_text())
    except (OSError, ValueError):
        cached = None
    if isinstance(cached, dict) and cached.get("key") == key:
        cands = {
            k: Candidate(**{**v, "requires_dist": tuple(v["requires_dist"])}) for k, v in cached["candidates"].items()
        }
        return (
            CarryPlan({k: cands[k] for k in cached["carry"]}, cached["satisfied"], cached["left_out"]),
            cands,
        )
    venv = resolver_venv(out, python, recipe.python_version, log)
    stubs = out / "stubs"
    _write_stubs(stubs, recipe.have)
    report_path = out / "report.json"
    _run(
        [
            str(venv / "bin" / "pip"),
            "install",
            "--disable-pip-version-check",
            "--dry-run",
            "--quiet",
            "--report",
            str(report_path),
            *_platform_args(recipe.python_version),
            *recipe.roots(),
            f"torch=={recipe.torch}",
        ],
        f"resolving SGLang {recipe.version}'s requirements@{recipe.python_version}",
        "check that PyPI is reachable; the log has pip's output",
        log=log,
        env={**os.environ, "PYTHONPATH": str(stubs), "PIP_NO_WARN_SCRIPT_LOCATION": "1"},
    )
    cands = candidates_from_report(json.loads(report_path.read_text()))
    plan = select_carry(
        cands,
        recipe.roots(),
        recipe.have,
        recipe.leave_out,
        recipe.python_version,
        carry_over_host=recipe.carry_over_host,
        keep_host=recipe.keep_host,
    )
    _write_atomic(
        plan_path,
        json.dumps(
            {
                "key": key,
                "carry": sorted(plan.carry),
                "satisfied": plan.satisfied,
                "left_out": plan.left_out,
                "candidates": {k: asdict(v) for k, v in cands.items()},
            },
            indent=1,
            sort_keys=True,
        ),
    )
    return plan, cands


def download(plan: CarryPlan, wheels: Path, python: Path, log: Path) -> None:
    """Fetch each carried wheel file the resolver chose, unless already here with its sha256."""
    wheels.mkdir(parents=True, exist_ok=True)
    todo = []
    for cand in plan.carry.values():
        path = wheels / cand.filename
        if path.is_file() and (not cand.sha256 or _sha256(path) == cand.sha256):
            continue
        path.unlink(missing_ok=True)
        todo.append(cand)
    if todo:
        _run(
            [str(python), "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps", "-d", str(wheels)]
            + [c.url for c in todo],
            f"downloading {len(todo)} wheels",
            "check that PyPI is reachable; the log has pip's output",
            log=log,
        )
    for cand in plan.carry.values():
        path = wheels / cand.filename
        if not path.is_file():
            raise SGLangBundleError(f"downloading {cand.name} {cand.version}: pip left no {path}; see {log}")
        if cand.sha256 and _sha256(path) != cand.sha256:
            path.unlink()
            raise SGLangBundleError(
                f"{cand.filename}: sha256 differs from the registry's ({cand.sha256[:12]}...): the download was "
                "corrupted or the registry changed; it was deleted, run again"
            )


def strip_kernel(site: Path, cuda_arch: str) -> dict[str, str]:
    """Delete sglang-kernel's libraries for other architectures and ``KERNEL_DROP``; fix its RECORD.

    Returns each deleted path (relative to ``site``) with why. A tree without sgl_kernel, or
    without the kept architecture's ``common_ops``, is an error: the server could not start.
    """
    pkg = site / "sgl_kernel"
    keep = pkg / cuda_arch
    if not any(keep.glob("common_ops.*")):
        have = sorted(p.name for p in pkg.glob("sm*") if p.is_dir()) if pkg.is_dir() else []
        raise SGLangBundleError(
            f"sglang-kernel in {site} has no {cuda_arch}/common_ops (architectures there: {have or 'none'}): "
            "pick one of them with --cuda-arch"
        )
    removed: dict[str, str] = {}
    for arch_dir in sorted(pkg.glob("sm*")):
        if arch_dir.is_dir() and arch_dir.name != cuda_arch:
            shutil.rmtree(arch_dir)
            removed[f"sgl_kernel/{arch_dir.name}/"] = f"kernels for {arch_dir.name}; the target is {cuda_arch}"
    for rel, why in KERNEL_DROP.items():
        path = site / rel
        if path.exists():
            path.unlink()
            removed[rel] = why
    for record in site.glob("sglang_kernel-*.dist-info/RECORD"):
        lines = record.read_text().splitlines()
        kept = [ln for ln in lines if not any(ln.split(",", 1)[0].startswith(r) for r in removed)]
        record.write_text("\n".join(kept) + "\n")
    return removed


def install(plan: CarryPlan, wheels: Path, site: Path, python: Path, recipe: BundleRecipe, log: Path) -> dict[str, str]:
    """Install the carried wheels into ``site`` (built aside, then moved in) and strip the kernel."""
    marker = site / ".perfgate-bundle.json"
    key = recipe.key()
    try:
        done = json.loads(marker.read_text())
    except (OSError, ValueError):
        done = None
    if isinstance(done, dict) and done.get("key") == key:
        stripped: dict[str, str] = done["stripped"]
        return stripped
    tmp = site.with_name(site.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    _run(
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps", "--no-index"]
        + ["--no-compile", "--target", str(tmp), *_platform_args(recipe.python_version)]
        + [str(wheels / c.filename) for c in plan.carry.values()],
        f"installing {len(plan.carry)} wheels into {tmp}",
        "the log has pip's output",
        log=log,
    )
    stripped = strip_kernel(tmp, recipe.cuda_arch) if "sglang-kernel" in plan.carry else {}
    # pip --target leaves console scripts the host never runs; the server is started as a module.
    shutil.rmtree(tmp / "bin", ignore_errors=True)
    _write_atomic(tmp / ".perfgate-bundle.json", json.dumps({"key": key, "stripped": stripped}, indent=1))
    shutil.rmtree(site, ignore_errors=True)
    os.replace(tmp, site)
    return stripped


def pack(tree_parent: Path, tree_name: str, archive: Path, threads: int, log: Path) -> float:
    """``tar | nice xz -T<threads> -9`` into ``archive`` (written aside, moved in); seconds taken."""
    tmp = archive.with_name(archive.name + ".tmp")
    t0 = time.monotonic()
    cmd = (
        f"set -o pipefail; tar -C {_q(tree_parent)} --owner=0 --group=0 --sort=name -cf - {_q(tree_name)} "
        f"| nice -n 19 xz -T{threads} -9 -c > {_q(tmp)}"
    )
    _run(["bash", "-c", cmd], f"packing {tree_parent / tree_name}", "the log has tar's and xz's output", log=log)
    os.replace(tmp, archive)
    return time.monotonic() - t0


def _q(path: Path | str) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def split(archive: Path, dist: Path, chunk_bytes: int = CHUNK_BYTES) -> list[Path]:
    """Cut ``archive`` into ``dist/chunk-N/<archive>.NNN`` and write ``SHA256SUMS`` beside chunk 1.

    SHA256SUMS lists every piece and the whole archive, so join.sh can say which piece is bad.
    """
    shutil.rmtree(dist, ignore_errors=True)
    dist.mkdir(parents=True)
    dirs: list[Path] = []
    sums: list[str] = []
    with archive.open("rb") as f:
        index = 0
        while block := f.read(chunk_bytes):
            d = dist / f"chunk-{index + 1}"
            d.mkdir()
            piece = d / f"{archive.name}.{index:03d}"
            piece.write_bytes(block)
            sums.append(f"{hashlib.sha256(block).hexdigest()}  {piece.name}")
            dirs.append(d)
            index += 1
    if not dirs:
        raise SGLangBundleError(f"{archive} is empty: delete it and run again")
    sums.append(f"{_sha256(archive)}  {archive.name}")
    (dirs[0] / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return dirs


# Runs on the host with nothing but bash, coreutils, tar and xz: the bundle's own check.
JOIN_SH = Path(__file__).with_name("bundle_join.sh")

ENV_SH = r"""# Source this: the environment SGLang from this bundle runs in (see the bundle's manifest.json).
BUNDLE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PYTHONPATH="$BUNDLE_DIR/site${PYTHONPATH:+:$PYTHONPATH}"
@EXPORTS@
"""


def write_scripts(first_chunk: Path, archive_name: str) -> None:
    (first_chunk / "join.sh").write_text(JOIN_SH.read_text().replace("@ARCHIVE@", archive_name))
    exports = "\n".join(f"export {k}={v}" for k, v in SERVER_ENV.items())
    (first_chunk / "env.sh").write_text(ENV_SH.replace("@EXPORTS@", exports))


def build_bundle(
    recipe: BundleRecipe,
    out: Path,
    *,
    python: str = "python3.12",
    threads: int = 2,
    chunk_bytes: int = CHUNK_BYTES,
    min_free_gb: float = 4.0,
) -> Bundle:
    """Build (or find) the bundle of ``recipe`` under ``out``; see the module docstring."""
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(out).free / 1e9
    with filelock.FileLock(str(out / ".lock")):
        key = recipe.key()
        dist = out / "dist"
        try:
            manifest: dict[str, object] = json.loads((dist / "chunk-1" / "manifest.json").read_text())
        except (OSError, ValueError):
            manifest = {}
        if manifest.get("key") == key:
            dirs = sorted(dist.glob("chunk-*"), key=lambda p: int(p.name.split("-")[1]))
            return Bundle(out, dirs, int(str(manifest["archive_bytes"])), int(str(manifest["tree_bytes"])), manifest)
        # A build holds the wheels, the tree and the archive at once: about 1.3 GB for 0.5.17.
        if free_gb < min_free_gb:
            raise SGLangBundleError(
                f"building the bundle holds up to {min_free_gb:g} GB under {out} and {free_gb:.1f} GB are free: "
                "free space or use another --out"
            )
        # Left by a build that was stopped while packing: each is hundreds of MB.
        for stale in out.glob("*.tar.xz.tmp"):
            stale.unlink()
        log = out / "build.log"
        log.write_text(f"bundle {key}: {json.dumps(asdict(recipe), default=str)}\n")
        t0 = time.monotonic()
        try:
            plan, _ = resolve(recipe, out, python, log)
            venv_python = out / "resolver" / "bin" / "python"
            t_resolve = time.monotonic() - t0
            download(plan, out / "wheels", venv_python, log)
            t_download = time.monotonic() - t0 - t_resolve
            site = out / "build" / "site"
            site.parent.mkdir(exist_ok=True)
            stripped = install(plan, out / "wheels", site, venv_python, recipe, log)
            t_install = time.monotonic() - t0 - t_resolve - t_download
            archive = out / f"sglang-{recipe.version}-{recipe.cuda_arch}-{key}.tar.xz"
            pack_s = pack(site.parent, site.name, archive, threads, log)
            dirs = split(archive, dist, chunk_bytes)
        except OSError as e:
            if e.errno == 28:
                raise SGLangBundleError(
                    f"the disk under {out} is full ({shutil.disk_usage(out).free / 1e9:.1f} GB free): "
                    "free space or use another --out"
                ) from None
            raise SGLangBundleError(f"building the bundle under {out}: {e}") from None
        write_scripts(dirs[0], archive.name)
        wheel_bytes = {n: (out / "wheels" / c.filename).stat().st_size for n, c in plan.carry.items()}
        manifest = {
            "key": key,
            "recipe": {**asdict(recipe), "have": len(recipe.have)},
            "archive": archive.name,
            "archive_bytes": archive.stat().st_size,
            "tree_bytes": _tree_bytes(site),
            "wheel_bytes": sum(wheel_bytes.values()),
            "chunks": [sorted(p.name for p in d.iterdir() if p.name.startswith(archive.name))[0] for d in dirs],
            "chunk_bytes": [sum(p.stat().st_size for p in d.iterdir()) for d in dirs],
            "carry": {n: f"{c.version} ({wheel_bytes[n] / 2**20:.2f} MiB wheel)" for n, c in plan.carry.items()},
            "shadows": plan.shadows(recipe.have),
            "satisfied_by_host": plan.satisfied,
            "left_out": plan.left_out,
            "kernel_stripped": stripped,
            "env": dict(SERVER_ENV),
            "seconds": {
                "resolve": round(t_resolve, 1),
                "download": round(t_download, 1),
                "install_strip": round(t_install, 1),
                "pack": round(pack_s, 1),
                "total": round(time.monotonic() - t0, 1),
            },
        }
        _write_atomic(dirs[0] / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
        return Bundle(out, dirs, int(str(manifest["archive_bytes"])), int(str(manifest["tree_bytes"])), manifest)


def perfgate_requirements() -> list[str]:
    """perfgate's own runtime requirements: the host runs perfgate from source beside the server."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        reqs = requires("perfgate") or []
    except PackageNotFoundError:
        return []
    return [r for r in reqs if "extra ==" not in r]
