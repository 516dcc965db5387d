"""TOML parsing: the standard library's ``tomllib`` from Python 3.11, its backport ``tomli`` on 3.10.

Many GPU hosts (Ubuntu 22.04) have Python 3.10 next to SGLang; tomllib is the only 3.11 module
perfgate needs, and tomli is the same parser (tomllib was added to the standard library from it).

:func:`loads` raises :class:`TOMLDecodeError` for every text it cannot take: the parser itself
fails in two other ways, an integer of more than 4,300 digits (``ValueError``, naming
``sys.set_int_max_str_digits``, which is no fix) and a table or array nested deeper than its
recursion can go (``RecursionError``); and what parses is nested :data:`MAX_DEPTH` deep at most,
as a JSON file perfgate reads is.
"""

from __future__ import annotations

import sys
from typing import Any

from perfgate._json import MAX_DEPTH

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError  # novm: vermin does not read version guards
    from tomllib import loads as _loads  # novm
else:
    from tomli import TOMLDecodeError
    from tomli import loads as _loads

__all__ = ["TOMLDecodeError", "loads"]


def loads(text: str) -> dict[str, Any]:
    """``text`` parsed; :class:`TOMLDecodeError` saying why for anything perfgate cannot use."""
    try:
        doc = _loads(text)
    except RecursionError:
        raise TOMLDecodeError(f"nested deeper than the parser can read (at most {MAX_DEPTH} levels are read)") from None
    except TOMLDecodeError:
        raise
    except ValueError:
        # The only other ValueError the parser lets out: int() refusing a number that long.
        raise TOMLDecodeError("an integer of more digits than Python reads (4,300)") from None
    depth = _depth(doc)
    if depth > MAX_DEPTH:
        raise TOMLDecodeError(f"nested {depth} levels deep (at most {MAX_DEPTH} are read)")
    return doc


def _depth(doc: dict[str, Any]) -> int:
    """How deep tables and arrays nest in ``doc`` (a table alone: 1), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest
