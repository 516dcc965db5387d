"""Install a real PyPI SGLang release into its own virtual environment, able to serve on CPU.

SGLang is a CUDA project, yet its server runs on a machine without a GPU when three things
hold (measured on 2-core CPU machines, see docs/real-servers.md "Real SGLang on CPU, in CI"):

- ``SGLANG_USE_CPU_ENGINE=1`` in the server's environment (SGLang's ``is_cpu()``);
- the PyPI CUDA wheel of ``sglang-kernel`` is importable: SGLang imports ``sgl_kernel``
  unconditionally, no CPU build is on PyPI, and the CUDA wheel's ``common_ops`` library loads
  as soon as ``libcuda.so.1`` can be found. That library comes from Debian's ``libcuda1``
  (NVIDIA driver userspace, trixie non-free), fetched with apt through a private
  configuration under the cache directory and unpacked with ``dpkg-deb -x``: nothing is
  installed into the system, nothing runs on CUDA;
- torch is PyPI's CUDA build (it runs on CPU; PyPI's torchvision is linked against it).

Everything else is what the release's wheel METADATA requires, pinned as it pins it, minus
the CUDA-only kernel packages listed in ``CUDA_ONLY`` (the server on CPU boots and serves
without them). The result is cached under ``<cache>/<version>/``: built under a file lock,
finished with an atomic ``complete.json`` marker naming the recipe, rebuilt when the marker is
missing or names another recipe. Every failing step raises ``SGLangEnvError`` naming the step,
the command and what to do.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, get_args

import filelock
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from perfgate.errors import PerfgateError

# Bump when a change here alters what gets installed for the same release: it invalidates caches.
RECIPE_VERSION = 1

# What installs the packages: both install the same releases (see _install_command).
Installer = Literal["pip", "uv"]
INSTALLERS: tuple[str, ...] = get_args(Installer)

# Debian's NVIDIA driver userspace. 550 (trixie) has the cuGreenCtx* symbols sglang-kernel's
# common_ops library links against; bookworm's 535 does not.
LIBCUDA_SUITE = "trixie"
LIBCUDA_PACKAGE = "libcuda1"
_DEBIAN_MIRROR = "http://deb.debian.org/debian"
_DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

# CUDA-only kernel packages SGLang requires but never imports on its CPU server path
# (SGLANG_USE_CPU_ENGINE=1, --device cpu, torch_native attention): leaving them out saves
# gigabytes of CUDA binaries per venv, and the e2e tests prove the server boots and serves
# without them. sglang-kernel is not here: it is imported unconditionally and installed
# (without its CUDA dependencies) from the recipe.
CUDA_ONLY: Mapping[str, str] = {
    "flashinfer-python": "FlashInfer CUDA kernels (JIT for SM80+); the CPU engine uses torch_native attention",
    "flashinfer-cubin": "prebuilt FlashInfer CUDA binaries",
    "flash-attn-4": "FlashAttention 4 (CuTe DSL, SM90/SM100 only)",
    "humming-kernels": "CUDA MoE kernels",
    "nvidia-cutlass-dsl": "CUTLASS CuTe DSL compiler for CUDA kernels",
    "nvidia-mathdx": "CUDA math device extensions",
    "nvshmem4py-cu13": "NVSHMEM bindings for multi-GPU communication",
    "quack-kernels": "CuTe DSL CUDA kernels",
    "sgl-deep-ep": "DeepEP expert-parallel CUDA communication",
    "sgl-deep-gemm": "DeepGEMM FP8 CUDA GEMMs (SM90+)",
    "sgl-flash-mla": "FlashMLA CUDA attention (SM90+)",
    "tilelang": "TileLang CUDA kernel compiler",
    "tokenspeed-mla": "CUDA MLA attention kernels",
    "torch-memory-saver": "CUDA allocator hook (LD_PRELOAD of cudaMalloc) for memory release",
    # Audio/video decoding for multimodal models, never imported for a text model; PyPI's
    # builds are linked against other torch releases than the one SGLang pins (SGLang
    # 0.5.23 itself pins torchaudio 2.11.0, which requires torch 2.11.0, next to torch 2.14.1).
    "torchaudio": "audio input for multimodal models; its pinned release requires another torch",
    "torchcodec": "video decoding for multimodal models; linked against another torch release",
}


@dataclass(frozen=True)
class SGLangRecipe:
    """How one SGLang release is made to serve on CPU.

    kernel: the ``sglang-kernel`` release it pins (installed without dependencies).
    torch / torchvision: the PyPI CUDA builds used (they replace the release's own pins).
    build_disk_gb: the most disk its build holds at once (venv plus pip's downloaded wheels),
    measured; a build refuses to start with less free.
    pins: requirements that replace ones the release leaves unpinned, where today's newest
    release of that package breaks the server (each explained where the recipe is defined).
    """

    version: str
    kernel: str
    torch: str
    torchvision: str
    build_disk_gb: float
    pins: Mapping[str, str] = field(default_factory=dict)


RECIPES: Mapping[str, SGLangRecipe] = {
    # Autotune decision native (runner/flashinfer_autotune.py); pins torch 2.14.1, which this
    # machine kind carries on disk with torchvision 0.29.1. Build measured 2026-11-30 (df every
    # 0.5 s, no pip cache): 8.9 GB at most, 8.7 GB when done, 173 s.
    "0.5.23": SGLangRecipe("0.5.23", kernel="0.4.10", torch="2.14.1", torchvision="0.29.1", build_disk_gb=9.5),
    # Autotune decision in ModelRunner without flashinfer_cutlass: the release the patch exists for.
    # Its own pin, torch 2.11.0 (from PyPI): with the 2.14.1 this machine kind carries on disk,
    # sglang-kernel 0.4.2.post2 does not load (tried 2026-11-30: common_ops.abi3.so: undefined
    # symbol c10::cuda::c10_cuda_check_implementation, a torch C++ ABI change).
    # It requires `kernels` unpinned; kernels 0.15+ refuses the LayerRepository(...) calls of the
    # transformers 5.6.0 it pins ("Either a revision or a version must be specified"), so
    # importing the server failed. 0.5.23 pins kernels<0.15,>=0.14.1; so does this recipe.
    # Build measured as 0.5.23's: 8.0 GB at most, 7.5 GB when done, 177 s.
    "0.5.12": SGLangRecipe(
        "0.5.12",
        kernel="0.4.2.post2",
        torch="2.11.0",
        torchvision="0.26.0",
        build_disk_gb=8.5,
        pins={"kernels": "kernels>=0.14.1,<0.15"},
    ),
}


class SGLangEnvError(PerfgateError):
    """A step of building an SGLang environment failed; the message names it and the fix."""


@dataclass(frozen=True)
class SGLangEnv:
    """A ready SGLang environment.

    python: its interpreter (``[server] python``). env: the variables its server needs
    (``SGLANG_USE_CPU_ENGINE``, ``LD_LIBRARY_PATH`` with libcuda.so.1).
    """

    version: str
    root: Path
    python: Path
    libcuda_dir: Path
    env: dict[str, str]
    skipped: dict[str, str] = field(default_factory=dict)
    build_s: float = 0.0


def _run(
    argv: Sequence[str],
    step: str,
    fix: str,
    *,
    log: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> str:
    """Run one build step; its output is appended to ``log`` and returned."""
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, env=dict(env) if env else None, cwd=cwd, check=False
        )
    except OSError as e:
        raise SGLangEnvError(f"{step}: cannot run {argv[0]!r}: {e}; {fix}") from None
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}\n[exit {proc.returncode}]\n")
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        if _DISK_FULL in proc.stdout or _DISK_FULL in proc.stderr:
            # pip's advice for an OSError is about PyPI; the disk is what to fix.
            free = f"{_free_gb(log.parent):.1f} GB free under {log.parent}"
            fix = f"the disk is full ({free}): free space, or pass --cache on a disk with room"
        raise SGLangEnvError(
            f"{step} failed (exit {proc.returncode}): {' '.join(argv)}\n{tail}\n-> {fix} (full output: {log})"
        )
    return proc.stdout


_DISK_FULL = "No space left on device"


def _free_gb(path: Path) -> float:
    return shutil.disk_usage(path).free / 1e9


def _size_gb(tree: Path) -> float:
    """Bytes the files under ``tree`` hold (0 when it does not exist), in GB."""
    total = 0
    for dirpath, _, files in os.walk(tree):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total / 1e9


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


# -- libcuda.so.1 ---------------------------------------------------------------------------


def ensure_libcuda(cache: Path) -> Path:
    """A directory holding ``libcuda.so.1`` from Debian's ``libcuda1`` (downloaded once, not installed)."""
    base = cache / "libcuda"
    base.mkdir(parents=True, exist_ok=True)
    marker = base / "complete.json"
    # A fixed name for profiles' LD_LIBRARY_PATH, whatever Debian version is inside.
    lib_link = base / "lib"
    with filelock.FileLock(str(base / ".lock")):
        if marker.is_file() and (lib_link / "libcuda.so.1").exists():
            return lib_link
        for tool in ("apt-get", "dpkg-deb"):
            if shutil.which(tool) is None:
                raise SGLangEnvError(
                    f"libcuda.so.1: {tool} not found; SGLang's CUDA kernel wheel needs NVIDIA's libcuda.so.1 "
                    "to load, and perfgate fetches it from Debian's libcuda1 package with apt-get and dpkg-deb "
                    "(run this on Debian/Ubuntu, or install libcuda1 and put it on LD_LIBRARY_PATH yourself)"
                )
        apt = base / "apt"
        for d in ("lists/partial", "cache/archives/partial", "preferences.d", "download"):
            (apt / d).mkdir(parents=True, exist_ok=True)
        sources = apt / "sources.list"
        sources.write_text(f"deb [signed-by={_DEBIAN_KEYRING}] {_DEBIAN_MIRROR} {LIBCUDA_SUITE} non-free\n")
        # A private apt: its own sources, lists, cache and an empty dpkg status, so the
        # system's apt configuration and package database are neither read nor changed.
        opts = [
            "-o",
            f"Dir::Etc::SourceList={sources}",
            "-o",
            "Dir::Etc::SourceParts=/dev/null",
            "-o",
            f"Dir::State::Lists={apt / 'lists'}",
            "-o",
            f"Dir::Cache={apt / 'cache'}",
            "-o",
            "Dir::State::status=/dev/null",
            "-o",
            "Dir::Etc::Preferences=/dev/null",
            "-o",
            f"Dir::Etc::PreferencesParts={apt / 'preferences.d'}",
            "-o",
            "APT::Architecture=amd64",
            "-o",
            "APT::Sandbox::User=root",
        ]
        log = base / "build.log"
        fix = (
            f"check that Debian's {LIBCUDA_SUITE} non-free archive is reachable ({_DEBIAN_MIRROR}) "
            f"and that {_DEBIAN_KEYRING} exists (package debian-archive-keyring)"
        )
        _run(["apt-get", *opts, "update"], f"apt-get update of Debian {LIBCUDA_SUITE} non-free", fix, log=log)
        # apt-get download writes into its working directory.
        download = apt / "download"
        for old in download.glob("*.deb"):
            old.unlink()
        _run(
            ["apt-get", *opts, "download", LIBCUDA_PACKAGE],
            f"apt-get download {LIBCUDA_PACKAGE}",
            fix,
            log=log,
            cwd=download,
        )
        debs = sorted(download.glob(f"{LIBCUDA_PACKAGE}_*.deb"))
        if not debs:
            raise SGLangEnvError(f"apt-get download {LIBCUDA_PACKAGE} left no .deb in {download}; {fix}")
        deb = debs[-1]
        version = deb.name.split("_")[1]
        unpacked = base / version
        shutil.rmtree(unpacked, ignore_errors=True)
        _run(
            ["dpkg-deb", "-x", str(deb), str(unpacked)],
            f"unpacking {deb.name}",
            f"the download may be corrupt: delete {base} and retry",
            log=log,
        )
        found = sorted(unpacked.rglob("libcuda.so.1"))
        if not found:
            raise SGLangEnvError(
                f"{deb.name} holds no libcuda.so.1 (Debian changed the package layout?); delete {base} and retry, "
                "or set LD_LIBRARY_PATH to a directory with libcuda.so.1"
            )
        lib_dir = found[0].parent
        tmp_link = base / f".lib.{os.getpid()}.tmp"
        tmp_link.unlink(missing_ok=True)
        tmp_link.symlink_to(lib_dir.relative_to(base), target_is_directory=True)
        os.replace(tmp_link, lib_link)
        _write_atomic(
            marker, json.dumps({"package": LIBCUDA_PACKAGE, "version": version, "lib_dir": str(lib_dir)}, indent=1)
        )
        return lib_link


# -- the SGLang virtual environment -----------------------------------------------------------


def recipe_for(version: str) -> SGLangRecipe:
    try:
        return RECIPES[version]
    except KeyError:
        raise SGLangEnvError(
            f"no CPU recipe for SGLang {version!r}: known releases are {', '.join(sorted(RECIPES))}; add one to "
            "perfgate.testing._sglang_env.RECIPES with the sglang-kernel and torch releases it pins"
        ) from None


def _recipe_key(recipe: SGLangRecipe) -> str:
    # build_disk_gb is a measurement of the build, not part of what it installs.
    installs = {k: v for k, v in asdict(recipe).items() if k != "build_disk_gb"}
    text = json.dumps({"recipe": installs, "cuda_only": sorted(CUDA_ONLY), "v": RECIPE_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def server_requirements(metadata: str, recipe: SGLangRecipe) -> tuple[list[str], dict[str, str]]:
    """The requirements to install from a wheel's METADATA text, and those skipped with why.

    Keeps every ``Requires-Dist`` without an extra whose marker holds here, pinned as SGLang
    pins it, except sglang-kernel (installed without dependencies), the CUDA_ONLY packages,
    torch / torchvision, which take the recipe's releases, and the recipe's ``pins``.
    """
    keep: list[str] = []
    skipped: dict[str, str] = {}
    replaced = {"torch": f"torch=={recipe.torch}", "torchvision": f"torchvision=={recipe.torchvision}", **recipe.pins}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        text = line.split(":", 1)[1].strip()
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            raise SGLangEnvError(f"SGLang {recipe.version} METADATA: cannot parse requirement {text!r}: {e}") from None
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name == "sglang-kernel":
            if str(req.specifier) != f"=={recipe.kernel}":
                raise SGLangEnvError(
                    f"SGLang {recipe.version} requires sglang-kernel{req.specifier}, but the recipe installs "
                    f"{recipe.kernel}: update RECIPES in perfgate.testing._sglang_env"
                )
            continue
        if name in CUDA_ONLY:
            skipped[name] = CUDA_ONLY[name]
            continue
        keep.append(replaced.pop(name, text))
    keep.extend(replaced.values())
    return keep, skipped


def _wheel_metadata(python: Path) -> str:
    code = "import importlib.metadata as m, sys; sys.stdout.write(m.distribution('sglang').read_text('METADATA'))"
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0 or "Requires-Dist" not in proc.stdout:
        raise SGLangEnvError(f"cannot read sglang's METADATA with {python}: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def _server_env(libcuda_dir: Path) -> dict[str, str]:
    return {"SGLANG_USE_CPU_ENGINE": "1", "LD_LIBRARY_PATH": str(libcuda_dir)}


def find_sglang_env(version: str, cache: Path) -> SGLangEnv | None:
    """The complete environment of SGLang ``version`` under ``cache``, or None; never builds."""
    recipe = recipe_for(version)
    root = Path(cache).resolve() / version
    python = root / "venv" / "bin" / "python"
    libcuda_link = Path(cache).resolve() / "libcuda" / "lib"
    try:
        done = json.loads((root / "complete.json").read_text())
    except (OSError, ValueError):
        return None
    if done.get("key") != _recipe_key(recipe) or not python.exists() or not (libcuda_link / "libcuda.so.1").exists():
        return None
    return SGLangEnv(version, root / "venv", python, libcuda_link, _server_env(libcuda_link), done.get("skipped", {}))


def uv_binary() -> str:
    """The uv executable: the one the ``uv`` package installed beside this interpreter, else on PATH."""
    try:
        import uv  # type: ignore[import-not-found,unused-ignore]

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise SGLangEnvError(
                "installer uv: no uv executable here (neither the uv package nor uv on PATH): "
                "pip install uv, or build with installer pip"
            ) from None
        return found


def _install_command(installer: Installer, python: Path, pip_args: Sequence[str], tmp: Path) -> list[str]:
    """The command prefix that installs packages into the venv of ``python``.

    uv resolves the same pins to the same releases (175 packages, the same versions, for 0.5.23)
    in a third of pip's time (74 s against 228 s, measured alone on the 2-core machine). It reads
    none of pip's configuration (UV_* variables instead), compiles bytecode only when asked (as
    pip does, so the server's first boot is not slower), and hard-links from its cache, which
    lives in the build's temporary directory and goes with it.
    """
    if installer == "uv":
        if pip_args:
            raise SGLangEnvError(f"installer uv takes no pip arguments (got {' '.join(pip_args)}): drop them")
        return [
            uv_binary(),
            "pip",
            "install",
            "--python",
            str(python),
            "--compile-bytecode",
            "--cache-dir",
            str(tmp / "uv-cache"),
        ]
    return [str(python), "-m", "pip", "install", "--disable-pip-version-check", *pip_args]


def ensure_sglang_env(
    version: str,
    cache: Path,
    *,
    pip_args: Sequence[str] | None = None,
    installer: Installer = "pip",
) -> SGLangEnv:
    """The SGLang ``version`` environment under ``cache``, built if missing or built by another recipe.

    Safe to call from several processes at once (one builds, the others wait on the lock).
    ``installer`` "pip" (the default: it honours pip's configuration) or "uv" (about three times
    faster, configured by UV_* variables). ``pip_args`` go to every pip install; pip's default here
    keeps its download cache out: the built venv is the cache, and a second copy of gigabytes of
    CUDA wheels is what fills a CI machine's disk (``--cache-dir DIR`` to keep them).
    """
    if installer not in INSTALLERS:
        raise SGLangEnvError(f"unknown installer {installer!r}: use one of {', '.join(INSTALLERS)}")
    if pip_args is None:
        pip_args = ("--no-cache-dir",) if installer == "pip" else ()
    recipe = recipe_for(version)
    cache = Path(cache).resolve()
    root = cache / version
    venv = root / "venv"
    python = venv / "bin" / "python"
    marker = root / "complete.json"
    key = _recipe_key(recipe)
    found = find_sglang_env(version, cache)
    if found is not None:
        return found
    root.mkdir(parents=True, exist_ok=True)
    # Before anything is fetched: a build that runs out of disk fails minutes in, inside pip.
    # A half-built venv of this release is about to be replaced, so its bytes count as free.
    free_gb = _free_gb(root) + _size_gb(venv)
    if free_gb < recipe.build_disk_gb:
        raise SGLangEnvError(
            f"building SGLang {version} holds up to {recipe.build_disk_gb:g} GB of disk under {root} "
            f"(measured), and {free_gb:.1f} GB are free: free space, or pass --cache on a disk with room"
        )
    # pip keeps every downloaded wheel in its temporary directory until the install ends (uv its
    # cache): under the cache it is on the disk the size check looked at, and removed after.
    tmp = root / "tmp"
    # Before anything is fetched too: an installer that is not here fails now, not after apt.
    pip = _install_command(installer, python, pip_args, tmp)
    libcuda_dir = ensure_libcuda(cache)
    env = _server_env(libcuda_dir)
    with filelock.FileLock(str(root / ".lock")):
        found = find_sglang_env(version, cache)
        if found is not None:
            return found
        t0 = time.monotonic()
        marker.unlink(missing_ok=True)
        shutil.rmtree(venv, ignore_errors=True)
        log = root / "build.log"
        log.write_text(f"building SGLang {version} for CPU (recipe {key})\n")
        fix_pip = (
            "check that PyPI is reachable and the release's wheels exist for this Python; "
            f"the log has {installer}'s output"
        )
        _run(
            [sys.executable, "-m", "venv", str(venv)],
            "creating the virtual environment",
            f"check that {sys.executable} has the venv module (Debian: apt-get install python3-venv)",
            log=log,
        )
        tmp.mkdir(exist_ok=True)
        pip_env = {**os.environ, "TMPDIR": str(tmp)}
        try:
            # sglang-kernel without dependencies: its own pins pull CUDA runtime wheels the CPU engine never loads.
            _run(
                [*pip, "--no-deps", f"sglang=={version}", f"sglang-kernel=={recipe.kernel}"],
                f"installing sglang=={version} and sglang-kernel=={recipe.kernel}",
                fix_pip,
                log=log,
                env=pip_env,
            )
            requirements, skipped = server_requirements(_wheel_metadata(python), recipe)
            # torch and its CUDA libraries first, on their own: they are most of the bytes, and
            # installed in two steps the downloaded wheels held at once are half as many.
            torch_pins = [f"torch=={recipe.torch}", f"torchvision=={recipe.torchvision}"]
            _run([*pip, *torch_pins], f"installing {' and '.join(torch_pins)}", fix_pip, log=log, env=pip_env)
            _run(
                [*pip, *requirements],
                f"installing the {len(requirements)} packages SGLang {version} requires",
                fix_pip,
                log=log,
                env=pip_env,
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        check = verify_sglang_env(python, env, log)
        build_s = time.monotonic() - t0
        _write_atomic(
            marker,
            json.dumps(
                {
                    "key": key,
                    "recipe": asdict(recipe),
                    "skipped": skipped,
                    "requirements": requirements,
                    "check": check,
                    "build_s": round(build_s, 1),
                    "installer": installer,
                },
                indent=1,
                sort_keys=True,
            ),
        )
        return SGLangEnv(version, venv, python, libcuda_dir, env, skipped, build_s)


# Imports the server's own entry point and the CUDA kernel wheel the way the server does, so a
# broken environment fails here, with its traceback, not minutes later inside a boot.
_SMOKE = """
import json, sys, importlib.metadata as md
import torch, sgl_kernel, sglang.launch_server
print(json.dumps({"sglang": md.version("sglang"), "torch": torch.__version__,
                  "cuda_available": torch.cuda.is_available()}))
"""


def verify_sglang_env(python: Path, env: Mapping[str, str], log: Path) -> dict[str, object]:
    """Import SGLang's server entry point and sgl_kernel in ``python``; the report, or SGLangEnvError."""
    out = _run(
        [str(python), "-c", _SMOKE],
        "importing sglang.launch_server and sgl_kernel in the new environment",
        "the traceback names the missing or broken package; if it is in CUDA_ONLY, it is imported on "
        "the server path after all: remove it from CUDA_ONLY",
        log=log,
        env={**os.environ, **env},
    )
    versions: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return versions
