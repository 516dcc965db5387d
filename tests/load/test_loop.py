"""The client's event loop runner, and the Python 3.10 path that asyncio.Runner takes from 3.11 on."""

from __future__ import annotations

import asyncio

import pytest

from perfgate.load._loop import run, run_on_new_loop


def test_run_returns_the_coroutines_result():
    async def main() -> list[int]:
        await asyncio.sleep(0)
        return [1, 2, 3]

    assert run(main()) == [1, 2, 3]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_310_runner_cancels_what_is_left_and_closes_its_loop(loop):
    if loop == "uvloop":
        factory = pytest.importorskip("uvloop").new_event_loop
    else:
        factory = asyncio.new_event_loop
    made: list[asyncio.AbstractEventLoop] = []
    cancelled: list[bool] = []
    finalized: list[bool] = []

    def tracked() -> asyncio.AbstractEventLoop:
        made.append(factory())
        return made[-1]

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            finalized.append(True)

    async def main() -> None:
        asyncio.get_running_loop().create_task(forever())
        gen = agen()
        assert await gen.__anext__() == 1
        await asyncio.sleep(0)

    run_on_new_loop(tracked, main())
    (used,) = made
    assert used.is_closed() and cancelled == [True] and finalized == [True]


def test_the_310_runner_raises_what_main_raises():
    async def main() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        run_on_new_loop(asyncio.new_event_loop, main())
