"""``python -m perfgate.testing.tinymodel OUT``: build the tiny test model; prints its directory.

With ``--cache``, OUT is a cache directory and the model is built there only if missing.
``--defect perturbed|nan`` builds a wrong model under the same shapes, for the correctness probe's tests.
``--experts N`` builds a Mixtral-style MoE (N experts per layer) instead of the dense Llama.
``--link PATH`` then points a symlink at the model, so a profile can name a fixed model_path.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from perfgate.errors import PerfgateError
from perfgate.testing._tinymodel import DEFECTS, SIZES, build_tiny_model, ensure_tiny_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m perfgate.testing.tinymodel",
        description="Build a small random Llama (or Mixtral-style MoE) and BPE tokenizer locally (never downloaded).",
    )
    parser.add_argument("out", type=Path, help="new or empty directory to build into (a cache directory with --cache)")
    parser.add_argument("--cache", action="store_true", help="treat OUT as a cache; reuse the model if already built")
    parser.add_argument("--link", type=Path, help="also make PATH a symlink to the built model (replaced atomically)")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny", help="preset (default: tiny)")
    parser.add_argument("--hidden", type=int, dest="hidden_size", help="hidden size (overrides the preset)")
    parser.add_argument("--layers", type=int, dest="num_layers", help="number of layers")
    parser.add_argument("--heads", type=int, dest="num_heads", help="attention heads")
    parser.add_argument("--ffn", type=int, dest="intermediate_size", help="MLP intermediate size")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), help="weight dtype")
    parser.add_argument(
        "--experts",
        type=int,
        dest="num_experts",
        help="a Mixtral-style MoE with this many experts per layer (--ffn is then each expert's); 0: dense",
    )
    parser.add_argument(
        "--experts-per-token", type=int, dest="experts_per_token", help="experts routed per token (default 2)"
    )
    parser.add_argument("--seed", type=int, default=0, help="weight seed (default: 0)")
    parser.add_argument(
        "--defect",
        choices=DEFECTS,
        default="none",
        help="build a wrong model with the same shapes and tokenizer: 'perturbed' (noise in the output head) "
        "or 'nan' (one NaN weight); default: none",
    )
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    cached = args.pop("cache")
    link = args.pop("link")
    try:
        path = ensure_tiny_model(out, **args) if cached else build_tiny_model(out, **args)
    except PerfgateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if link is not None:
        try:
            _link(link, path)
        except OSError as e:
            print(
                f"error: cannot point {link} at {path}: {e}; pass a --link path that is a symlink or does not exist",
                file=sys.stderr,
            )
            return 2
    print(path)
    return 0


def _link(link: Path, target: Path) -> None:
    # A symlink renamed over the old one: a reader never finds the path missing.
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.resolve(), target_is_directory=True)
    try:
        os.replace(tmp, link)
    except OSError:
        tmp.unlink()
        raise


if __name__ == "__main__":
    sys.exit(main())
