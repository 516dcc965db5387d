"""The client's event loop: uvloop's where it is installed (``perfgate[fast]``), else asyncio's.

uvloop reads sockets and runs protocol callbacks in C: the load client's CPU per streamed
chunk drops by 9-25 % with it (docs/benchmarks.md, "The load client").
``PERFGATE_EVENT_LOOP=asyncio`` keeps asyncio's loop even where uvloop is installed;
``PERFGATE_EVENT_LOOP=uvloop`` insists on uvloop.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from perfgate.errors import LoadError

T = TypeVar("T")


def _uvloop() -> Any:
    """The uvloop module to run on, or None for asyncio's loop."""
    wanted = os.environ.get("PERFGATE_EVENT_LOOP", "")
    if wanted not in ("", "uvloop", "asyncio"):
        raise LoadError(f"PERFGATE_EVENT_LOOP={wanted!r}: expected uvloop, asyncio or unset (uvloop where installed)")
    if wanted == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if wanted == "uvloop":
            raise LoadError(
                "PERFGATE_EVENT_LOOP=uvloop but uvloop is not installed: pip install 'perfgate[fast]'"
            ) from None
        return None
    return uvloop


def loop_name() -> str:
    """Which event loop :func:`run` uses, with its version: results say what measured them."""
    uvloop = _uvloop()
    return f"uvloop {uvloop.__version__}" if uvloop is not None else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the client's event loop.

    The result travels outside the main task: on its way out asyncio.Runner compares SIGINT
    handlers, and Python 3.11 then formats a repr of that task, result included; for a
    workload's records that repr cost seconds and megabytes.
    """
    try:
        uvloop = _uvloop()
    except LoadError:
        main.close()
        raise
    factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop if uvloop is not None else None
    out: list[T] = []

    async def main_task() -> None:
        out.append(await main)

    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:  # novm: 3.11+ only, guarded
            runner.run(main_task())
    else:
        run_on_new_loop(factory or asyncio.new_event_loop, main_task())
    return out[0]


def run_on_new_loop(factory: Callable[[], asyncio.AbstractEventLoop], main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` on a fresh loop from ``factory``, then close it: asyncio.Runner's job on Python 3.10.

    Like asyncio.run, tasks still pending are cancelled and awaited, and async generators and the
    default executor are shut down, before the loop closes.
    """
    loop = factory()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
