"""Server arguments in a canonical form, so equivalent command lines fingerprint the same.

``--flag=value`` and ``--flag value`` are one thing; flag order does not matter; a repeated
flag keeps its last value (argparse's rule); aliases collapse to one name; textual booleans and
numbers are spelled one way; flags that cannot change performance (ports, logging, keys) are
dropped. The result is a sorted tuple of ``--flag=value`` strings (positional arguments first,
in their order), and normalizing it again returns it unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

# Flags that only change where the server listens, what it logs, or who may call it.
_IGNORED = frozenset(
    {
        "--host",
        "--port",
        "--log-level",
        "--log-level-http",
        "--log-requests",
        "--log-requests-level",
        "--enable-log-requests",
        "--disable-log-requests",
        "--disable-log-stats",
        "--uvicorn-log-level",
        "--enable-metrics",
        "--api-key",
        "--admin-api-key",
        "--served-model-name",
        "--ssl-keyfile",
        "--ssl-certfile",
        "--crash-dump-folder",
        "--decode-log-interval",
        "--watchdog-timeout",
        # The model is its own fingerprint field.
        "--model",
        "--model-path",
    }
)

# Spellings of one option (SGLang's and vLLM's long and short forms, and renames between
# SGLang releases that kept the meaning) -> the name used in fingerprints.
_ALIASES = {
    "--tp": "--tp-size",
    "--tensor-parallel-size": "--tp-size",
    "--dp": "--dp-size",
    "--data-parallel-size": "--dp-size",
    "--ep": "--ep-size",
    "--expert-parallel-size": "--ep-size",
    "--pp": "--pp-size",
    "--pipeline-parallel-size": "--pp-size",
    "--nsa-decode-backend": "--dsa-decode-backend",
    "--nsa-prefill-backend": "--dsa-prefill-backend",
    "--mem-fraction": "--mem-fraction-static",
}

_TRUE = frozenset({"true", "yes", "on"})
_FALSE = frozenset({"false", "no", "off"})
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
_FLAG = re.compile(r"--?[A-Za-z]")


def _is_flag(token: str) -> bool:
    # "-1" or "-0.5" are values (e.g. --chunked-prefill-size -1), "-tp" is a flag.
    return bool(_FLAG.match(token))


def _flag_name(raw: str, aliases: Mapping[str, str]) -> tuple[str, str | None]:
    """Canonical flag name and, for ``--no-x`` style negations, the implied value."""
    raw = aliases.get(raw, raw)
    name = "--" + raw.lstrip("-").replace("_", "-").lower()
    if name.startswith("--no-") and len(name) > 5:
        return _ALIASES.get("--" + name[5:], "--" + name[5:]), "false"
    return _ALIASES.get(name, name), None


def _value(raw: str) -> str:
    low = raw.strip().lower()
    if low in _TRUE:
        return "true"
    if low in _FALSE:
        return "false"
    if _INT.fullmatch(raw.strip()):
        return str(int(raw))
    if _FLOAT.fullmatch(raw.strip()):
        return repr(float(raw))
    return raw


def normalize_args(args: Iterable[str], aliases: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The canonical form of a server's command-line arguments (see the module docstring).

    ``aliases`` maps a server's own short options to their long names (``{"-t": "--threads"}``,
    read from its ``--help``); the built-in table covers SGLang's and vLLM's long aliases.
    """
    aliases = aliases or {}
    positional: list[str] = []
    flags: dict[str, str] = {}
    tokens = list(args)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not _is_flag(token):
            positional.append(token)
            continue
        raw_name, eq, inline = token.partition("=")
        name, negated = _flag_name(raw_name, aliases)
        if eq:
            value = inline
        else:
            # nargs="+" options take every following non-flag token.
            values = []
            while i < len(tokens) and not _is_flag(tokens[i]):
                values.append(tokens[i])
                i += 1
            value = " ".join(values) if values else "true"
        if negated is not None and value == "true":
            value = negated
        flags[name] = " ".join(_value(v) for v in value.split(" ")) if value else value
    kept = sorted(f"{name}={value}" for name, value in flags.items() if name not in _IGNORED)
    return (*positional, *kept)
