"""``python -m perfgate.plugin --reference [--update [PAGE]]``: the options reference."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from perfgate.plugin._reference import SECTION, reference_markdown


def main(argv: Sequence[str] | None = None) -> int:
    return SECTION.main(argv, reference_markdown)


if __name__ == "__main__":
    sys.exit(main())
