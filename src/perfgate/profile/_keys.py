"""How a profile key is declared: its check (type, bounds or choices), default and one-line doc.

Each key is declared once, on its field of the frozen dataclasses in ``_model.py``::

    port: int = key(port_number, "Port the launched server listens on", default=0)

The loader (``_load.py``) validates a TOML table against those declarations and the key
reference (``_reference.py``, ``python -m perfgate.profile --reference``) is generated from
them, so the two cannot drift apart. A check converts a TOML value to what the spec holds or
raises :class:`Bad` with what it expected; messages read "expected <expected>, got <value>".
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from perfgate._cpus import format_cpu_list, parse_cpu_list
from perfgate._limits import (
    FACTOR_MAX,
    RATE_MAX,
    RATE_MIN,
    SECONDS_MAX,
    TOKEN_ID_MAX,
    VALUE_MAX,
)
from perfgate._redact import without_userinfo


class Bad(Exception):
    """A value a check refuses; ``expected`` completes "expected ..., got <value>"."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


@dataclass(frozen=True)
class Check:
    """One key's validation: ``type`` and ``allowed`` describe it in the reference (``allowed``
    is "" when any value of the type goes); ``convert`` returns the value or raises :class:`Bad`."""

    type: str
    allowed: str
    convert: Callable[[Any], Any]


@dataclass(frozen=True)
class KeyDoc:
    """A declared key, as the reference shows it."""

    name: str
    type: str
    default: str
    allowed: str
    doc: str


_META = "perfgate.profile"


def key(
    check: Check,
    doc: str,
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    shown_default: str = "",
) -> Any:
    """A dataclass field that is also a profile key.

    ``shown_default`` is what the reference says when the value is derived rather than a
    constant (e.g. a workload's name); a key with neither a default nor ``shown_default``
    is required.
    """
    metadata = {_META: (check, doc, shown_default)}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _declared(cls: type) -> list[tuple[dataclasses.Field[Any], Check, str, str]]:
    return [(f, *f.metadata[_META]) for f in dataclasses.fields(cls) if _META in f.metadata]


def checks(cls: type) -> dict[str, Check]:
    """Every key of the table ``cls`` declares, with its check."""
    return {f.name: check for f, check, _, _ in _declared(cls)}


def _has_default(f: dataclasses.Field[Any], shown: str) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING or bool(shown)


def required(cls: type) -> tuple[str, ...]:
    """The keys a table of ``cls`` must set, in declaration order."""
    return tuple(f.name for f, _, _, shown in _declared(cls) if not _has_default(f, shown))


def key_docs(cls: type) -> list[KeyDoc]:
    """The reference rows of ``cls``'s keys, in declaration order."""
    rows = []
    for f, check, doc, shown in _declared(cls):
        if shown:
            default = shown
        elif f.default is not dataclasses.MISSING:
            default = f"`{toml_value(f.default)}`"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"`{toml_value(f.default_factory())}`"
        else:
            default = "required"
        rows.append(KeyDoc(f.name, check.type, default, check.allowed, doc))
    return rows


def toml_value(value: Any) -> str:
    """``value`` as it would be written in a profile."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return '"inf"'
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }" if value else "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML spelling for {value!r}")


# -- checks ------------------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def integer(min_value: int, max_value: int) -> Check:
    """An integer in [``min_value``, ``max_value``]: every integer key has both bounds."""
    expected = f"an integer >= {min_value}"

    def convert(v: Any) -> int:
        if not _is_int(v) or v < min_value:
            raise Bad(expected)
        if v > max_value:
            raise Bad(f"an integer from {min_value} to {max_value:,}")
        return int(v)

    return Check("integer", f"{min_value} - {max_value:,}", convert)


def integer_or(word: str, min_value: int, max_value: int) -> Check:
    """An integer in [``min_value``, ``max_value``], or the string ``word`` (e.g. "auto")."""
    whole = integer(min_value, max_value)

    def convert(v: Any) -> int | str:
        if v == word:
            return word
        try:
            number: int = whole.convert(v)
        except Bad as e:
            raise Bad(f'{e} or "{word}"') from None
        return number

    return Check(f'integer or "{word}"', f'{min_value} - {max_value:,}, or `"{word}"`', convert)


def _finite_float(v: Any) -> float | None:
    """``v`` as a float when it is a TOML number that fits one (not NaN), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        f = float(v)
    except OverflowError:  # a TOML integer beyond a float's range
        return None
    return None if math.isnan(f) else f


def number(min_value: float, max_value: float, *, strict_min: bool = False, allow_inf: bool = False) -> Check:
    """A number in [``min_value``, ``max_value``] (above ``min_value`` with ``strict_min``), or
    with ``allow_inf`` "inf": every number key has both bounds, as every integer key does."""
    bound = f"{'>' if strict_min else '>='} {min_value:g}"
    inf = ' or "inf"' if allow_inf else ""
    expected = f"a number {bound}{inf}"

    def convert(v: Any) -> float:
        if allow_inf and isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
            return math.inf
        f = _finite_float(v)
        if f is None or (math.isinf(f) and not allow_inf):
            raise Bad(expected)
        if f < min_value or (strict_min and f == min_value):
            raise Bad(expected)
        if f > max_value and not (allow_inf and math.isinf(f)):
            raise Bad(f"a number {bound} and <= {shown(max_value)}{inf}")
        return f

    return Check('number or "inf"' if allow_inf else "number", f"{bound}, <= {shown(max_value)}", convert)


def shown(bound: float) -> str:
    """A bound as a message shows it: ``86,400``, ``1e+15``."""
    return f"{bound:,.0f}" if abs(bound) < 1e12 and bound == int(bound) else f"{bound:g}"


seconds = number(0.0, SECONDS_MAX)
"""A wait that may be none (``--perf-lock-wait``, a think time)."""
positive_seconds = number(0.0, SECONDS_MAX, strict_min=True)
"""A timeout or period."""
rate = number(RATE_MIN, RATE_MAX, allow_inf=True)
"""Requests per second."""
factor = number(0.0, FACTOR_MAX, strict_min=True)
"""A share or factor that must be above 0."""


def key_check(table: type, name: str) -> Check:
    """The check declared on key ``name`` of ``table`` (an option that sets the same number uses it)."""
    return checks(table)[name]


def checked(check: Check, value: Any, option: str) -> Any:
    """``value`` through ``check``; ValueError "<option> <value>: expected ..." when it is refused
    (a value set in code, which did not pass through :func:`option_type`)."""
    try:
        return check.convert(value)
    except Bad as e:
        raise ValueError(f"{option} {value!r}: expected {e.expected}") from None


def option_type(check: Check) -> Callable[[str], Any]:
    """An argparse ``type`` for an option that sets what a profile key sets: the key's check, so
    the bounds and the words are the key's ("expected an integer from 1 to 1,000, got '1000000'")."""

    def parse(text: str) -> Any:
        value: Any = text
        for kind in (int, float):
            try:
                value = kind(text)
                break
            except ValueError:
                continue
        try:
            return check.convert(value)
        except Bad as e:
            raise argparse.ArgumentTypeError(f"expected {e.expected}, got {text!r}") from None

    return parse


def _at_most(base: Check, limit: float, *, inclusive: bool, expected: str, allowed: str) -> Check:
    """``base``, and at most ``limit`` (below it unless ``inclusive``); ``expected`` for values above."""

    def convert(v: Any) -> Any:
        x = base.convert(v)
        if x > limit or (not inclusive and x == limit):
            raise Bad(expected)
        return x

    return Check(base.type, allowed, convert)


# The base has no upper bound of its own: _at_most adds it, in its own words.
ratio = _at_most(number(0.0, math.inf), 1.0, inclusive=True, expected="a number between 0 and 1", allowed="0 - 1")
open_ratio = _at_most(
    number(0.0, math.inf, strict_min=True),
    1.0,
    inclusive=False,
    expected="a number between 0 and 1 (exclusive)",
    allowed="> 0 and < 1",
)


def _port(v: Any) -> int:
    if not _is_int(v) or v < 0:
        raise Bad("an integer >= 0")
    if v > 65535:
        raise Bad("a port number 0-65535 (0 picks a free port)")
    return int(v)


port_number = Check("integer", "0 - 65535 (0 picks a free port)", _port)


def _instance_of(kind: type, expected: str) -> Callable[[Any], Any]:
    def convert(v: Any) -> Any:
        if not isinstance(v, kind):
            raise Bad(expected)
        return v

    return convert


string = Check("string", "", _instance_of(str, "a string"))
boolean = Check("boolean", "", _instance_of(bool, "true or false"))


def _nonempty_string(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise Bad("a non-empty string")
    return v


nonempty_string = Check("string", "non-empty", _nonempty_string)


def _url(v: Any) -> str:
    string.convert(v)
    if v and not v.startswith(("http://", "https://")):
        raise Bad("an http:// or https:// URL")
    if without_userinfo(v) != v:
        # perfgate records the URL everywhere and sends no Basic auth (see server.check_url).
        raise Bad(
            "a URL without user:password@ (perfgate records the URL and does not send them; put the "
            "server's API key in an environment variable named by [server] api_key_env)"
        )
    return str(v)


url = Check("string", 'an http:// or https:// URL, or ""', _url)


def _url_path(v: Any) -> str:
    path = _nonempty_string(v)
    if not path.startswith("/"):
        raise Bad('a path starting with "/", e.g. "/health"')
    return path


url_path = Check("string", 'a path starting with "/"', _url_path)


def _optional_url_path(v: Any) -> str:
    if v == "":
        return ""
    try:
        return _url_path(v)
    except Bad:
        raise Bad('a path starting with "/", or "" for none') from None


optional_url_path = Check("string", 'a path starting with "/", or ""', _optional_url_path)


def choice(*options: str) -> Check:
    expected = "one of " + ", ".join(repr(o) for o in options)

    def convert(v: Any) -> str:
        if not isinstance(v, str) or v not in options:
            raise Bad(expected)
        return v

    return Check("string", ", ".join(f"`{toml_value(o)}`" for o in options), convert)


def _str_list(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise Bad("a list of strings")
    return tuple(v)


str_list = Check("list of strings", "", _str_list)


def _gpu_list(v: Any) -> tuple[int | str, ...]:
    ok = isinstance(v, list) and all((_is_int(x) and x >= 0) or (isinstance(x, str) and x.strip()) for x in v)
    if not ok:
        raise Bad('a list of GPU indices (integers >= 0) or UUIDs ("GPU-...")')
    if len(set(v)) != len(v):
        raise Bad("a list without repeated GPUs")
    return tuple(v)


gpu_list = Check(
    "list of integers or strings", 'NVML indices >= 0, UUIDs (`"GPU-..."`) or PCI bus ids; no repeats', _gpu_list
)


_CPU_LIST = 'a CPU list such as "0-7" or "0,2,4-6" (the `taskset -c` syntax), or "" to inherit perfgate\'s'


def _cpu_list(v: Any) -> str:
    if not isinstance(v, str):
        raise Bad(_CPU_LIST)
    if v == "":
        return ""
    try:
        return format_cpu_list(parse_cpu_list(v))
    except ValueError as e:
        raise Bad(f"{_CPU_LIST}; {e}") from None


cpu_list = Check("string", 'CPU numbers and ranges: `"0-7"`, `"0,2,4-6"`; `""` = not set', _cpu_list)
"""A set of CPUs, held in the one written form (``" 2,0-1"`` -> ``"0-2"``)."""


def _id_range(v: Any) -> tuple[int, int]:
    ok = isinstance(v, list) and len(v) == 2 and all(_is_int(x) and 0 <= x <= TOKEN_ID_MAX for x in v) and v[0] < v[1]
    if not ok:
        raise Bad(f"[lo, hi] with 0 <= lo < hi <= {TOKEN_ID_MAX} (token ids are drawn from lo to hi - 1)")
    return (v[0], v[1])


id_range = Check("[integer, integer]", f"0 <= lo < hi <= {TOKEN_ID_MAX}", _id_range)


def _str_map(v: Any) -> dict[str, str]:
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        raise Bad("a table of string values")
    return dict(v)


str_map = Check("table of strings", "", _str_map)


def _scalar_map(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict) or not all(isinstance(x, (str, int, float, bool)) for x in v.values()):
        raise Bad("a table of strings, numbers or booleans")
    return dict(v)


scalar_map = Check("table of strings, numbers or booleans", "", _scalar_map)


def _table(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Bad("a table")
    return dict(v)


table = Check("table", "", _table)


def metric_map(min_value: float = -VALUE_MAX) -> Check:
    value_check = number(min_value, VALUE_MAX)

    def convert(v: Any) -> dict[str, float]:
        if not isinstance(v, dict):
            raise Bad("a table of metric = number")
        out = {}
        for k, x in v.items():
            try:
                out[k] = value_check.convert(x)
            except Bad as e:
                raise Bad(f"a table of metric = number; {k!r} must be {e.expected}") from None
        return out

    bound = f"; values {value_check.allowed}" if value_check.allowed else ""
    return Check("table of metric = number", f"metrics of known direction{bound}", convert)
