"""``python -m perfgate.testing.sglang_bundle --version 0.5.17 --torch 2.11.0 --cuda-arch sm90 --out DIR``.

Builds (or finds, when already complete) a bundle of the real PyPI SGLang release for a GPU host
without network: what the host lacks (``--have``: its package list, a file or NAME[==VERSION],...;
default: the H200 device machine's, ``h200_packages.txt``), installed into one tree, packed and cut
into chunks of < 60 MiB with sha256 sums, plus ``join.sh`` and ``env.sh``. Prints one JSON line:
the chunk folders (send each in one call, then run chunk 1's ``join.sh``), the sizes and times.
Exit 2 with one message on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perfgate.errors import PerfgateError
from perfgate.testing._sglang_bundle import (
    CHUNK_BYTES,
    BundleRecipe,
    build_bundle,
    load_have,
    perfgate_requirements,
)

DEFAULT_HAVE = Path(__file__).with_name("h200_packages.txt")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perfgate.testing.sglang_bundle",
        description="Build a carryable bundle of a PyPI SGLang release for an offline GPU host (cached).",
    )
    parser.add_argument("--version", required=True, help="SGLang release, e.g. 0.5.17")
    parser.add_argument("--torch", required=True, help="the host's torch release, which SGLang must pin (2.11.0)")
    parser.add_argument("--cuda-arch", default="sm90", help="sglang-kernel architecture to keep (default: sm90)")
    parser.add_argument("--have", default=str(DEFAULT_HAVE), help="the host's packages: a file, or NAME[==VERSION],...")
    parser.add_argument("--out", type=Path, required=True, help="build and cache directory")
    parser.add_argument("--python", default="python3.12", help="an interpreter of the target's Python (3.12)")
    parser.add_argument("--python-version", default="3.12", help="the host's Python major.minor (default: 3.12)")
    parser.add_argument("--threads", type=int, default=2, help="xz threads (default: 2; the build runs niced)")
    parser.add_argument("--chunk-mib", type=int, default=CHUNK_BYTES // 2**20, help="chunk size in MiB (default: 55)")
    args = parser.parse_args(argv)
    if not 1 <= args.chunk_mib <= 60:
        parser.error("--chunk-mib must be 1..60 (the device takes at most 64 MiB per call, its work tree included)")
    try:
        have = load_have(args.have)
        if have.get("torch") not in (None, args.torch):
            raise PerfgateError(f"--torch {args.torch}: the host list (--have {args.have}) has torch=={have['torch']}")
        recipe = BundleRecipe(
            version=args.version,
            torch=args.torch,
            cuda_arch=args.cuda_arch,
            python_version=args.python_version,
            have={**have, "torch": args.torch},
            extra_roots=tuple(perfgate_requirements()),
        )
        bundle = build_bundle(
            recipe, args.out, python=args.python, threads=args.threads, chunk_bytes=args.chunk_mib * 2**20
        )
    except PerfgateError as e:
        print(f"error: SGLang {args.version} bundle: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(
            f"error: SGLang {args.version} bundle: cannot write {args.out}: {e}; pass a writable --out", file=sys.stderr
        )
        return 2
    m = bundle.manifest
    print(
        json.dumps(
            {
                "chunks": [str(d) for d in bundle.chunk_dirs],
                "join": str(bundle.chunk_dirs[0] / "join.sh"),
                "archive_mib": round(bundle.archive_bytes / 2**20, 1),
                "tree_mib": round(bundle.tree_bytes / 2**20, 1),
                "carried": len(m["carry"]),  # type: ignore[arg-type]
                "seconds": m["seconds"],
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
