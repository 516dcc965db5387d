"""How a name of the profile (the profile's, a workload's, a sweep's) becomes part of a file name.

It sits beside ``errors.py``, outside the stages, because the profile loader refuses the names
this module cannot place and baseline/ and report/ place them; a home in one stage would make
another import sideways or upward.

The rules, one for every writer:

- :func:`name_problem` is what the loader refuses: an empty or padded name, a path separator,
  ``..``, a control, surrogate or bidirectional-override character, more than
  :data:`MAX_NAME_BYTES` of UTF-8.
- :func:`file_stem` is the name in a file name. An ASCII name keeps the spelling perfgate has
  always given it (``[^A-Za-z0-9._-]`` runs become ``_``), so committed baselines still match;
  any other name is a readable slug plus 12 hex digits of the SHA-256 of its exact UTF-8, so two
  distinct names in one script never share a file.
- :func:`collision_keys` is what two names must not share in one profile: their stems in one
  case (macOS's default file system ignores case; ``a b`` and ``a_b`` share the stem ``a_b``)
  and the names as read (case and NFC vs NFD folded: two workloads that look alike).
- :func:`path_in` joins a file name to its folder and refuses one that is not a single entry
  of it, so a future writer given an unchecked name cannot escape either.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from pathlib import Path

from perfgate.errors import PerfgateError

# A file name holds 255 bytes on Linux and macOS; the longest wrapping is a baseline's
# "<stem>--<count>x<gpu>-<limit>W--<digest>.json", whose fingerprint part takes up to ~90.
MAX_NAME_BYTES = 120
_HASH_CHARS = 12
_SLUG_CHARS = 40
# Bidirectional overrides and isolates: they make a name display unlike its bytes.
_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u061c")


def safe_name(text: str) -> str:
    """``text`` with every run outside ``[A-Za-z0-9._-]`` made ``_``, trimmed of dots and
    underscores; the file-name spelling of an ASCII name since the first baseline."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "_"


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a file of perfgate's, or None when it can."""
    if not name.strip():
        return "is empty"
    if name != name.strip():
        return "starts or ends with white space"
    if "/" in name or "\\" in name:
        return "contains a path separator (/ or \\)"
    if ".." in name:
        return "contains '..'"
    for ch in name:
        category = unicodedata.category(ch)
        if category in ("Cc", "Cs", "Zl", "Zp") or ch in _BIDI:
            return f"contains the control character U+{ord(ch):04X}"
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        return f"is {size} bytes of UTF-8, more than the {MAX_NAME_BYTES} a file name leaves room for"
    return None


def file_stem(name: str) -> str:
    """The part of a file name that stands for ``name`` (see the module's rules)."""
    if name.isascii():
        return safe_name(name)
    slug = safe_name(unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode())
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    return f"{slug[:_SLUG_CHARS]}-{digest}" if slug != "_" else f"u-{digest}"


def collision_keys(name: str) -> tuple[str, str]:
    """Two names sharing either key must not both be in one profile: the first is the file
    name as a case-insensitive file system (macOS's default) compares it, the second is the
    name as a person reads it (case and Unicode normal form, NFC vs NFD, folded)."""
    return file_stem(name).lower(), unicodedata.normalize("NFC", unicodedata.normalize("NFC", name).casefold())


def path_in(folder: Path, file_name: str) -> Path:
    """``folder / file_name``, refused unless it is an entry directly inside ``folder`` that a
    file system can hold (one component, at most 255 bytes)."""
    path = folder / file_name
    one_part = "/" not in file_name and "\\" not in file_name and "\0" not in file_name
    if (
        not one_part
        or file_name in ("", ".", "..")
        or path.parent != folder
        or len(file_name.encode("utf-8", "surrogatepass")) > 255
    ):
        raise PerfgateError(
            f"refusing to write {path}: the file name {file_name!r} is not one entry of {folder}; this is a bug in "
            "perfgate, please report it"
        )
    return path
