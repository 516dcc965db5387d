"""SGLang preflight: where it is installed, which versions, and whether its flags exist.

Everything here reads files or asks the server's interpreter through a subprocess; nothing
imports sglang or torch into perfgate's process (torch alone takes seconds and gigabytes).
Server flags change between SGLang releases (renamed, removed, made no-ops), and a launch
with a removed flag fails only after the interpreter has started; ``check_flags`` turns that
into one message before the launch.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from perfgate import _toml
from perfgate._redact import SECRETS
from perfgate.errors import ServerError

_PROBE_TIMEOUT_S = 120.0

# find_spec on a top-level package locates it without running its __init__ (no torch).
_FIND_SGLANG = """
import importlib.util, sys
spec = importlib.util.find_spec("sglang")
if spec is None or not spec.submodule_search_locations:
    sys.exit(3)
print(list(spec.submodule_search_locations)[0])
"""

# Versions from installed distributions' metadata; CUDA from torch/version.py's text,
# because ``import torch.version`` runs torch/__init__.py.
_VERSIONS = """
import ast, importlib.metadata as md, importlib.util, json, os
def dist(*names):
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            pass
    return None
def torch_cuda():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if getattr(target, "id", None) == "cuda" and isinstance(node.value, ast.Constant):
            return node.value.value
    return None
print(json.dumps({
    "sglang": dist("sglang"),
    "flashinfer": dist("flashinfer-python", "flashinfer"),
    "sgl-kernel": dist("sgl-kernel", "sgl_kernel"),
    "torch": dist("torch"),
    "cuda": torch_cuda(),
}))
"""


_SERVER_PYTHON = "set [server] python to the interpreter of SGLang's environment"


def _run_python(python: str, code: str, what: str, fix: str = _SERVER_PYTHON) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise ServerError(f"cannot run the server interpreter {python!r} to {what}: no such file; {fix}") from None
    except PermissionError:
        raise ServerError(
            f"cannot run the server interpreter {python!r} to {what}: not executable (or a directory); {fix}"
        ) from None
    except OSError as e:
        raise ServerError(f"cannot run the server interpreter {python!r} to {what}: {e.strerror}; {fix}") from None
    except subprocess.TimeoutExpired:
        raise ServerError(
            f"the server interpreter {python!r} did not answer within {_PROBE_TIMEOUT_S:.0f} s when asked to {what}"
        ) from None


def check_python(python: str, fix: str) -> None:
    """ServerError (ending with ``fix``) unless ``python`` runs, and runs as a Python interpreter."""
    proc = _run_python(python, "print('perfgate-python-ok')", "check that it is Python", fix)
    if proc.returncode != 0 or proc.stdout.strip() != "perfgate-python-ok":
        said = SECRETS.clip(proc.stderr.strip() or proc.stdout.strip(), 300, tail=True) or "no output"
        raise ServerError(
            f"{python!r} is not a Python interpreter: `{python} -c print(...)` exited {proc.returncode} ({said}); {fix}"
        )


def locate_sglang(python: str) -> Path | None:
    """The ``sglang`` package directory ``python`` would import, None when it has none.

    sglang is located, not imported. Raises ServerError when ``python`` cannot be asked.
    """
    proc = _run_python(python, _FIND_SGLANG, "locate sglang")
    if proc.returncode == 3:
        return None
    if proc.returncode != 0 or not proc.stdout.strip():
        said = SECRETS.clip(proc.stderr.strip(), 500, tail=True) or "no output"
        raise ServerError(f"{python!r} failed to locate sglang (exit {proc.returncode}): {said}")
    return Path(proc.stdout.strip().splitlines()[-1])


def find_sglang_root(python: str) -> Path:
    """The ``sglang`` package directory that ``python`` would import (sglang is not imported)."""
    root = locate_sglang(python)
    if root is None:
        raise ServerError(
            f"sglang is not importable by {python!r}: install SGLang into that environment, "
            "or set [server] python to the interpreter that has it"
        )
    return root


# The packages an SGLang upgrade changes, as sglang_versions reports them.
VERSION_KEYS = ("sglang", "flashinfer", "sgl-kernel", "torch", "cuda")


def sglang_versions(python: str) -> dict[str, str | None]:
    """Versions of sglang, flashinfer (flashinfer-python), sgl-kernel, torch and torch's CUDA in ``python``.

    Keys: :data:`VERSION_KEYS`; a value is None when not installed.
    """
    proc = _run_python(python, _VERSIONS, "read package versions")
    if proc.returncode != 0:
        raise ServerError(
            f"{python!r} failed to report package versions (exit {proc.returncode}): "
            f"{SECRETS.clip(proc.stderr.strip(), 500, tail=True) or 'no output'}"
        )
    try:
        versions = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ServerError(
            f"{python!r} printed no version report: {SECRETS.clip(proc.stdout, 300, tail=True)!r}"
        ) from None
    return {key: versions.get(key) for key in VERSION_KEYS}


def sglang_help_text(python: str, timeout_s: float = 600.0, env: Mapping[str, str] | None = None) -> str:
    """``python -m sglang.launch_server --help``: the authoritative list of server flags.

    This imports sglang and torch in that interpreter (tens of seconds), in ``env`` when given
    (the server's); ``flags_from_source`` is the static fallback. Raises ServerError when the
    help cannot be produced.
    """
    argv = [python, "-m", "sglang.launch_server", "--help"]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=dict(env) if env is not None else None,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerError(f"cannot list SGLang's server flags with {' '.join(argv)}: {exc}") from None
    if proc.returncode != 0 or not known_flags(proc.stdout):
        raise ServerError(
            f"{' '.join(argv)} exited {proc.returncode} without a flag list: "
            f"{SECRETS.clip(proc.stderr.strip() or proc.stdout.strip(), 500, tail=True) or 'no output'}"
        )
    return proc.stdout


def resolve_sglang_root(path: Path) -> Path:
    """The ``sglang`` package directory for what a user points at: the package directory itself,
    an unpacked wheel's root (``<dir>/sglang``) or a source checkout (``<dir>/python/sglang``).

    Raises ServerError naming the places it looked.
    """
    candidates = (path, path / "sglang", path / "python" / "sglang")
    for candidate in candidates:
        if (candidate / "srt").is_dir():
            return candidate
    looked = ", ".join(str(c / "srt") for c in candidates)
    raise ServerError(
        f"{path} is not an SGLang package directory, unpacked wheel or source checkout (no {looked}); "
        "pass the directory that holds sglang/ (an unpacked wheel), the repository root, or sglang/ itself"
    )


def sglang_version_from_tree(sglang_root: Path) -> str:
    """The version of an installed or unpacked ``sglang`` directory, without importing it.

    Reads ``_version.py`` (setuptools-scm, 0.5.4+), then ``version.py`` (older), then the
    wheel's ``sglang-*.dist-info/METADATA`` next to it, then a source checkout's
    ``pyproject.toml``; "unknown" when none says.
    """
    for name in ("_version.py", "version.py"):
        version = _literal_version(sglang_root / name)
        if version:
            return version
    for metadata in sorted(sglang_root.parent.glob("sglang-*.dist-info/METADATA")):
        for line in metadata.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    try:
        project = _toml.loads((sglang_root.parent / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, _toml.TOMLDecodeError, UnicodeDecodeError):
        project = {}
    version = project.get("version") if isinstance(project, dict) else None
    return version if isinstance(version, str) and version else "unknown"


def _literal_version(path: Path) -> str | None:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
            if "__version__" in names and isinstance(node.value.value, str):
                return node.value.value
    return None


def release_tuple(version: str) -> tuple[int, ...]:
    """(0, 5, 12) for "0.5.12", "0.5.12.post1" or "0.5.12rc0"; () when it has no digits."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", version.strip())
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


# argparse prints each option at two spaces of indent; help text starts at column 24 or
# two spaces after the invocation, so continuation lines never match.
_OPTION_LINE = re.compile(r"^  (-\S.*?)(?: {2,}\S.*)?$")
_OPTION_STRING = re.compile(r"(?:^|, )(--?[A-Za-z0-9][\w-]*)")


def known_flags(help_text: str) -> set[str]:
    """Option strings ("--tp-size", "-h", ...) in ``python -m sglang.launch_server --help``."""
    flags: set[str] = set()
    for line in help_text.splitlines():
        match = _OPTION_LINE.match(line)
        if match:
            flags.update(_OPTION_STRING.findall(match.group(1)))
    return flags


def flags_from_source(sglang_root: Path) -> set[str]:
    """Option strings SGLang's launch parser defines, read statically from its source.

    Two generations: ``parser.add_argument("--x", ...)`` calls in ``srt/server_args.py``
    (every release), and, from 0.5.20, fields declared as ``A[type, "help"]`` or
    ``A[type, Arg(cli_name=..., aliases=[...], no_cli=...)]`` under ``srt/arg_groups/fields/``,
    which SGLang turns into ``--field-name`` options.
    """
    server_args = sglang_root / "srt" / "server_args.py"
    if not server_args.is_file():
        raise ServerError(f"{sglang_root} has no srt/server_args.py: not an SGLang package directory")
    files = [server_args, *sorted((sglang_root / "srt" / "arg_groups" / "fields").glob("*.py"))]
    flags: set[str] = set()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                flags.update(_add_argument_flags(node))
            elif isinstance(node, ast.ClassDef):
                flags.update(_annotated_field_flags(node))
    return flags


def _add_argument_flags(call: ast.Call) -> Iterable[str]:
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
        return ()
    return [
        a.value
        for a in call.args
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
    ]


def _annotated_field_flags(cls: ast.ClassDef) -> Iterable[str]:
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        ann = stmt.annotation
        if not (isinstance(ann, ast.Subscript) and _name_of(ann.value) in ("A", "Annotated")):
            continue
        if not isinstance(ann.slice, ast.Tuple):
            continue
        default_flag = "--" + stmt.target.id.replace("_", "-")
        for meta in ann.slice.elts[1:]:
            if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
                yield default_flag
            elif isinstance(meta, ast.Call) and _name_of(meta.func) == "Arg":
                yield from _arg_call_flags(meta, default_flag)


def _arg_call_flags(call: ast.Call, default_flag: str) -> list[str]:
    kwargs = {k.arg: k.value for k in call.keywords if k.arg}
    no_cli = kwargs.get("no_cli")
    if isinstance(no_cli, ast.Constant) and no_cli.value is True:
        return []
    cli_name = kwargs.get("cli_name")
    flags = [cli_name.value if isinstance(cli_name, ast.Constant) and isinstance(cli_name.value, str) else default_flag]
    aliases = kwargs.get("aliases")
    if isinstance(aliases, (ast.List, ast.Tuple)):
        flags += [e.value for e in aliases.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return flags


def _name_of(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


# Flags the scenario used that later releases renamed: old -> (new, first release without old).
_RENAMED = {
    "--nsa-decode-backend": ("--dsa-decode-backend", "0.5.20"),
    "--nsa-prefill-backend": ("--dsa-prefill-backend", "0.5.20"),
}


def _notes(flag: str, version: tuple[int, ...]) -> str | None:
    """A warning for a flag that exists but does not do what its name promises."""
    if flag == "--num-continuous-decode-steps":
        return (
            "--num-continuous-decode-steps has no effect: SGLang's scheduler does not read it "
            "(checked in 0.5.3 - 0.5.23), so any gain attributed to it is noise"
        )
    if flag == "--disable-cuda-graph" and version >= (0, 5, 14):
        return (
            "--disable-cuda-graph is deprecated since SGLang 0.5.14; use "
            "--cuda-graph-backend-decode=disabled --cuda-graph-backend-prefill=disabled"
        )
    if flag == "--enable-flashinfer-allreduce-fusion":
        if version >= (0, 5, 14):
            return (
                "--enable-flashinfer-allreduce-fusion is deprecated since SGLang 0.5.14 and "
                "maps to --flashinfer-allreduce-fusion-backend=auto, which raises on SM120 "
                "(FlashInfer's fused allreduce kernels exist for SM90/SM100 only)"
            )
        return (
            "--enable-flashinfer-allreduce-fusion: FlashInfer's fused allreduce kernels exist "
            "for SM90/SM100 only; forcing them on SM120 measured 236 tok/s at 125 W per GPU"
        )
    return None


def check_flags(args: Sequence[str], known: set[str], sglang_version: str) -> list[str]:
    """Fail on server flags this SGLang does not know; return warnings for suspicious ones.

    ``args`` is the server argv after ``launch_server`` (values included); ``known`` comes
    from ``known_flags`` or ``flags_from_source``. A flag may be abbreviated to a unique
    prefix, as argparse allows. Raises ServerError naming every unknown or ambiguous flag,
    the SGLang version, and the replacement when the flag was renamed.
    """
    version = release_tuple(sglang_version)
    problems: list[str] = []
    warnings: list[str] = []
    for token in args:
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        flag = token.split("=", 1)[0]
        resolved = _resolve(flag, known)
        if isinstance(resolved, str):
            note = _notes(resolved, version)
            if note:
                warnings.append(note)
        else:
            problems.append(_unknown_flag_message(flag, resolved, known))
    if problems:
        raise ServerError(
            f"SGLang {sglang_version} does not accept these server flags ([server] args): " + "; ".join(problems)
        )
    return warnings


def _resolve(flag: str, known: set[str]) -> str | list[str]:
    """The known flag ``flag`` names, or the candidates when it names none or several."""
    if flag in known:
        return flag
    candidates = sorted(k for k in known if k.startswith(flag) and k.startswith("--"))
    return candidates[0] if len(candidates) == 1 else candidates


def _unknown_flag_message(flag: str, candidates: list[str], known: set[str]) -> str:
    if candidates:
        return f"{flag} is ambiguous (matches {', '.join(candidates[:6])})"
    renamed = _RENAMED.get(flag)
    if renamed and renamed[0] in known:
        return f"{flag} is unknown: renamed to {renamed[0]} (SGLang {renamed[1]}+)"
    close = difflib.get_close_matches(flag, sorted(known), n=1, cutoff=0.8)
    return f"{flag} is unknown" + (f" (did you mean {close[0]}?)" if close else "")
