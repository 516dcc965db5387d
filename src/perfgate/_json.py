"""Reading JSON from a file a person or a server can shape: baselines, results, explain tables, traces.

``json.loads`` has three ways to fail that are no :class:`json.JSONDecodeError`: a document
nested deeper than the interpreter's stack (``RecursionError``; 100,000 ``[`` are 100 KB), an
integer of more than 4,300 digits (``ValueError``), and, worse, no failure at all for a key
given twice (the last one silently wins: a baseline whose ``"output_throughput"`` is repeated
with 1.0 passed a +600,000 % run). :func:`loads` turns each into one :class:`JSONInputError`
whose text says what is wrong, for the caller to prefix with the file's name.

Depth and digits are read from the text before it is parsed, with the strings taken out, in
a few passes of C code (a results file of 100 MB is not walked in Python); the limits are far
above what perfgate writes and far below what the parser and the code after it can take.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64
"""Nesting of arrays and objects: perfgate's files need under 10, a torch trace under 10."""
MAX_NUMBER_DIGITS = 100
"""Digits in a row in one number: a float's repr has at most 17, an int beyond 100 fits no float."""

# A string, or an unterminated one to the end of the text: with the closing quote required, a
# text of one quote and then escaped quotes (\" ...) is tried from every quote to its end, and
# 40 KB of it take 10 s. Text after an unterminated string is no JSON, which json.loads says.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
# Byte tables for bytes.translate, which runs at memory speed where a regex visiting every
# character takes seconds for 100 MB: digits all made "0", and everything but brackets dropped.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_LONG_RUN = b"0" * (MAX_NUMBER_DIGITS + 1)
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class JSONInputError(ValueError):
    """A text that is not JSON perfgate can use; ``str()`` says why, without the file's name
    ("nested 100,000 levels deep ...", for a message "baseline <path>: <why>; <what to do>")."""


class JSONSyntaxError(JSONInputError):
    """Text that is not JSON at all (may be a file still being written)."""


def _shape_problem(data: str | bytes) -> str:
    """What makes ``data`` too deep or its numbers too long to parse safely; "" when nothing does."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    # A string holds any bracket or digit: only what lies outside strings counts.
    outside = _STRING.sub(b"", raw)
    digits = outside.translate(_DIGITS_AS_ZERO)
    at = digits.find(_LONG_RUN)
    if at != -1:
        run = len(digits) - at - len(digits[at:].lstrip(b"0"))
        return f"a number of {run:,} digits (at most {MAX_NUMBER_DIGITS} are read)"
    depth = max(accumulate(_STEP[c] for c in outside.translate(None, _NOT_BRACKETS)), default=0)
    if depth > MAX_DEPTH:
        return f"nested {depth:,} levels deep (at most {MAX_DEPTH} are read)"
    return ""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise JSONInputError(f"the key {k!r} twice in one object (which one counts is unknown)")
            seen.add(k)
    return out


def _no_constant(name: str) -> Any:
    raise JSONInputError(f"{name}, which is no JSON number (perfgate writes null for a value not measured)")


def loads(data: str | bytes, *, strict: bool = True) -> Any:
    """``data`` parsed; :class:`JSONInputError` (:class:`JSONSyntaxError` for text that is not
    JSON) for a document too deep, a number too long, and, when ``strict`` (a file perfgate
    wrote), a key given twice in one object or NaN/Infinity, which perfgate never writes.
    Without ``strict`` (a server's trace) neither is looked for: it costs a call per object."""
    problem = _shape_problem(data)
    if problem:
        raise JSONInputError(problem)
    try:
        if strict:
            return json.loads(data, object_pairs_hook=_unique, parse_constant=_no_constant)
        return json.loads(data)
    except JSONInputError:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise JSONSyntaxError(f"not valid JSON ({e})") from None
