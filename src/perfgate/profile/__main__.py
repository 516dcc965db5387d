"""``python -m perfgate.profile --reference [--update README.md]``: the profile key reference."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from perfgate.errors import PerfgateError
from perfgate.profile._reference import reference_markdown, update_reference


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perfgate.profile", description="The profile key reference, generated from the key declarations."
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        required=True,
        help="print the reference as Markdown, one table per profile table",
    )
    parser.add_argument(
        "--update", type=Path, metavar="FILE", help="instead, rewrite the generated reference in FILE (README.md)"
    )
    args = parser.parse_args(argv)
    if args.update is None:
        sys.stdout.write(reference_markdown())
        return 0
    try:
        changed = update_reference(args.update)
    except (PerfgateError, OSError) as err:
        print(f"python -m perfgate.profile: {err}", file=sys.stderr)
        return 2
    print(f"{args.update}: profile key reference {'updated' if changed else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
