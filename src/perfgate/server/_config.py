"""What a server kind contributes to a baseline's fingerprint: its engine and its flags.

A flag written in ``[server] command`` changes performance as much as one in ``args``, so both
are part of the configuration. Servers spell one option several ways (``-t 2`` and
``--threads 2``); for a command server the short options are mapped to their long names by
reading the server's own ``--help``, so equivalent command lines fingerprint the same (the
baseline layer normalizes the rest: ``=`` vs space, order, booleans, numbers).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from perfgate.profile import ServerSpec

_HELP_TIMEOUT_S = 60.0
_SHORT_FLAG = re.compile(r"-[A-Za-z]\w*$")
# An option-list line of a --help text: argparse ("  -t N, --threads N   help") and
# llama.cpp style ("-t,    --threads N     help") alike: option strings separated by commas.
_OPTION_LIST = re.compile(
    r"^\s{0,8}(-{1,2}[A-Za-z][\w-]*(?:[ =][^\s,]+)?(?:,\s*-{1,2}[A-Za-z][\w-]*(?:[ =][^\s,]+)?)+)"
)
_OPTION = re.compile(r"(?:^|,\s*)(-{1,2}[A-Za-z][\w-]*)")


@dataclass(frozen=True)
class ServerConfig:
    """The comparable part of a server's configuration.

    engine: "sglang", "simulator", "attach", or "command:<program>" (the interpreter's module
    for ``python -m``). args: every flag as written (template placeholders included; ports,
    hosts and models are dropped by the baseline layer). flag_aliases: short option -> long
    name, from the server's ``--help``. notes: what could not be determined.
    """

    engine: str
    args: tuple[str, ...]
    flag_aliases: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def short_aliases(help_text: str) -> dict[str, str]:
    """Short options mapped to the first long option of their group in a ``--help`` text."""
    aliases: dict[str, str] = {}
    for line in help_text.splitlines():
        match = _OPTION_LIST.match(line)
        if not match:
            continue
        names = _OPTION.findall(match.group(1))
        longs = [n for n in names if n.startswith("--")]
        if longs:
            for name in names:
                if not name.startswith("--"):
                    aliases.setdefault(name, longs[0])
    return aliases


def _is_python(token: str) -> bool:
    return token == "{python}" or os.path.basename(token).startswith("python")


def _split_program(command: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the program, the rest of the command line). For a Python interpreter the program includes
    ``-m module``, ``-c code`` or the script it runs."""
    if len(command) >= 3 and _is_python(command[0]) and command[1] in ("-m", "-c"):
        return list(command[:3]), list(command[3:])
    if len(command) >= 2 and _is_python(command[0]) and not command[1].startswith("-"):
        return list(command[:2]), list(command[2:])
    return list(command[:1]), list(command[1:])


def _engine(program: Sequence[str]) -> str:
    name = os.path.basename(program[0]).replace("{python}", "python") if program else "?"
    if len(program) == 3 and program[1] == "-m":
        return f"command:{name} -m {program[2]}"
    if len(program) == 3:
        # The code of ``python -c`` is a launcher, not the server: only the fact is kept.
        return f"command:{name} -c"
    if len(program) == 2:
        return f"command:{name} {os.path.basename(program[1])}"
    return f"command:{name}"


def _help_text(program: Sequence[str], spec: ServerSpec) -> tuple[str, str]:
    """(the program's --help output, a note when it could not be had)."""
    argv = [part.replace("{python}", spec.python or sys.executable) for part in program] + ["--help"]
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=_HELP_TIMEOUT_S,
            env={**os.environ, **spec.env},
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return "", f"short server flags kept as written: `{' '.join(argv)}` failed ({type(e).__name__}: {e})"
    return proc.stdout + proc.stderr, ""


def server_config(spec: ServerSpec) -> ServerConfig:
    """The engine and flags of ``spec`` as a fingerprint sees them (the same launched or attached)."""
    if spec.kind == "simulator":
        sim = tuple(f"--{k.replace('_', '-')}={v}" for k, v in sorted(spec.sim.items()))
        return ServerConfig("simulator", (*spec.args, *sim))
    if spec.kind != "command":
        return ServerConfig(spec.kind, tuple(spec.args))
    program, rest = _split_program(spec.command)
    args = (*rest, *spec.args)
    if not any(_SHORT_FLAG.match(a) for a in args):
        return ServerConfig(_engine(program), args)
    text, note = _help_text(program, spec)
    aliases = short_aliases(text)
    unresolved = sorted({a for a in args if _SHORT_FLAG.match(a) and a not in aliases})
    notes = [note] if note else []
    if unresolved and not note:
        notes.append(
            f"short server flags {', '.join(unresolved)} have no long name in the server's --help; kept as written"
        )
    return ServerConfig(_engine(program), args, aliases, tuple(notes))
