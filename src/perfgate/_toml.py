"""TOML parsing: the standard library's ``tomllib`` from Python 3.11, its backport ``tomli`` on 3.10.

Many GPU hosts (Ubuntu 22.04) have Python 3.10 next to SGLang; tomllib is the only 3.11 module
perfgate needs, and tomli is the same parser (tomllib was added to the standard library from it).
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from tomllib import TOMLDecodeError, loads  # novm: vermin does not read version guards
else:
    from tomli import TOMLDecodeError, loads

__all__ = ["TOMLDecodeError", "loads"]
