"""``python -m perfgate.testing.sglang_env --version 0.5.23 --cache .perfgate-cache/sglang``.

Builds (or finds, when already complete) a virtual environment with the real PyPI SGLang
release that serves on a CPU-only machine, and prints one JSON line per version: its
interpreter (``[server] python``), the environment its server needs, what was left out and
why, and how long the build took (0 when cached). Exit 2 with one message on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from perfgate.errors import PerfgateError
from perfgate.testing._sglang_env import INSTALLERS, RECIPES, ensure_sglang_env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perfgate.testing.sglang_env",
        description="Install a real SGLang release into its own venv, able to serve on CPU (cached).",
    )
    parser.add_argument(
        "--version", action="append", required=True, choices=sorted(RECIPES), help="SGLang release (repeat for several)"
    )
    parser.add_argument("--cache", type=Path, required=True, help="cache directory, e.g. .perfgate-cache/sglang")
    parser.add_argument(
        "--installer",
        choices=INSTALLERS,
        default="pip",
        help="what installs the packages: pip (default; reads pip's configuration) or uv (about 3x faster, "
        "the same releases; reads UV_* variables, not pip's configuration)",
    )
    parser.add_argument(
        "--pip-cache-dir", type=Path, help="keep pip's downloads in this cache (default: none, the venv is the cache)"
    )
    args = parser.parse_args(argv)
    if args.pip_cache_dir and args.installer != "pip":
        parser.error("--pip-cache-dir is pip's: uv keeps its cache in the build's temporary directory")
    pip_args = (
        None
        if args.installer != "pip"
        else ["--cache-dir", str(args.pip_cache_dir)]
        if args.pip_cache_dir
        else ["--no-cache-dir"]
    )
    for version in args.version:
        try:
            env = ensure_sglang_env(version, args.cache, pip_args=pip_args, installer=args.installer)
        except PerfgateError as e:
            print(f"error: SGLang {version}: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            print(
                f"error: SGLang {version}: cannot write the cache {args.cache}: {e}; pass a writable --cache directory",
                file=sys.stderr,
            )
            return 2
        print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in asdict(env).items()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
