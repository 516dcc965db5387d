"""``python -m perfgate.sim --host 127.0.0.1 --port P [--option value ...]``."""

from __future__ import annotations

import os
import sys

from aiohttp import web

from perfgate.sim._app import build_app
from perfgate.sim._options import parse_options
from perfgate.sim._server import SimServer


def _raise_open_file_limit() -> None:
    """Every client connection is a file descriptor: take what the hard limit allows (SGLang
    raises its own limit the same way), so 8,192 streams do not meet a soft limit of 1,024."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Linux
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            # An unlimited hard limit is still capped by the kernel (fs.nr_open): keep the soft one.
            pass


def main(argv: list[str] | None = None) -> int:
    opts = parse_options(sys.argv[1:] if argv is None else argv, os.environ)
    _raise_open_file_limit()
    srv = SimServer(opts)
    try:
        web.run_app(
            build_app(srv),
            host=opts.host,
            port=opts.port,
            access_log=None,
            print=srv.on_listening,
            # uvicorn under SGLang accepts 2048 pending connects; aiohttp's default 128 would add
            # SYN-retry seconds to TTFT when 1024 clients connect at once.
            backlog=2048,
            shutdown_timeout=30.0,
        )
    except OSError as err:
        print(f"perfgate.sim: cannot listen on {opts.host}:{opts.port}: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
