"""The two variants of an A/B: A is the profile as written, B the profile with the candidate change."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from perfgate._redact import SECRETS
from perfgate.errors import PerfgateError
from perfgate.profile import Profile

Label = Literal["A", "B"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Candidate:
    """What B changes: another interpreter (another venv: the upgrade), extra environment
    variables, extra server arguments. Empty fields change nothing."""

    python: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.python or self.env or self.args)


@dataclass(frozen=True)
class Variant:
    """One side of the A/B: the profile it boots, and what it adds to the profile as written."""

    label: Label
    profile: Profile
    python: str
    extra_env: Mapping[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()

    @property
    def role(self) -> str:
        return "current" if self.label == "A" else "candidate"


def parse_env(items: Iterable[str], option: str = "--candidate-env") -> dict[str, str]:
    """``NAME=VALUE`` items as a dict (a later NAME wins); PerfgateError naming the bad item."""
    env: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not _ENV_NAME.match(name):
            # The value is not shown: it may be a token.
            shown = f"{name}=..." if eq else name
            raise PerfgateError(
                f"{option} {shown!r}: expected NAME=VALUE with NAME a variable name, e.g. {option} "
                "PERFGATE_SIM_SLOWDOWN=1.05"
            )
        env[name] = value
    # Known before anything boots or prints: B's env is shown in the report and its server's log.
    SECRETS.add_env(env)
    return env


def parse_args(text: str, option: str = "--candidate-args") -> tuple[str, ...]:
    """Server flags as a shell would split them; PerfgateError on unbalanced quotes."""
    try:
        return tuple(shlex.split(text))
    except ValueError as e:
        raise PerfgateError(
            f'{option} {text!r}: {e}; quote the flags as for a shell, e.g. {option} "--foo 1 --bar"'
        ) from None


def _check_python(python: str, option: str) -> str:
    found = shutil.which(python) if os.sep not in python else (python if os.path.isfile(python) else None)
    if found is None:
        raise PerfgateError(
            f"{option} {python}: no such interpreter; pass the python of the candidate's environment, "
            "e.g. /opt/sglang-0.5.23/bin/python"
        )
    if not os.access(found, os.X_OK):
        raise PerfgateError(f"{option} {python}: not executable; pass the python of the candidate's environment")
    return found


def variants(profile: Profile, candidate: Candidate, option_prefix: str = "--candidate-") -> tuple[Variant, Variant]:
    """(A, B) for ``profile``; PerfgateError before anything boots when B cannot differ from A
    or the profile cannot be booted twice."""
    spec = profile.server
    if candidate.empty:
        raise PerfgateError(
            f"no candidate: give what B changes with {option_prefix}python PY (another environment), "
            f'{option_prefix}env NAME=VALUE or {option_prefix}args "FLAGS"'
        )
    if spec.kind == "attach":
        raise PerfgateError(
            f'profile {profile.path}: [server] kind = "attach" is a server someone else started; an A/B boots both '
            'variants itself: use a profile with kind = "sglang", "simulator" or "command"'
        )
    b_python = spec.python
    if candidate.python:
        b_python = _check_python(candidate.python, f"{option_prefix}python")
        if spec.kind == "command" and not any("{python}" in part for part in spec.command):
            raise PerfgateError(
                f"profile {profile.path}: [server] command does not use {{python}}, so {option_prefix}python would "
                "change "
                'nothing; write it as ["{python}", "-m", ...] or give the change with '
                f"{option_prefix}env / {option_prefix}args"
            )
    a_python = spec.python or sys.executable
    b_spec = replace(
        spec,
        python=b_python,
        env={**spec.env, **candidate.env},
        args=(*spec.args, *candidate.args),
    )
    a = Variant("A", profile, a_python)
    b = Variant(
        "B", replace(profile, server=b_spec), b_spec.python or sys.executable, dict(candidate.env), candidate.args
    )
    return a, b
