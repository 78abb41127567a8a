"""How a fleet stops at once, from any thread or a signal handler: every agent's sleep returns False and every
held request is cancelled (its agent sees None).

Stopping wakes each sleep's own future and cancels each held request, rather than adding callbacks to one stop
future: ``asyncio.wait`` on a shared future adds a callback and removes it by scanning the future's list, which is
O(agents) per sleep or held request.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class Stopper:
    """The stop of one fleet: asked for from anywhere, seen on the loop the fleet runs on (``start``)."""

    def __init__(self) -> None:
        self._requested = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Future[None] | None = None  # done once stopping, on the fleet's loop
        self._sleeps: set[asyncio.Future[None]] = set()
        self._held: set[asyncio.Future[Any]] = set()

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    @property
    def started(self) -> bool:
        """The fleet runs (``start`` was called on its loop): a sleep waits from now on."""
        return self._stopped is not None

    @property
    def done(self) -> bool:
        return self._stopped is not None and self._stopped.done()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._stopped = loop.create_future()
        if self._requested.is_set():
            self._stopped.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Until the fleet stops or ``timeout`` passes."""
        assert self._stopped is not None, "the fleet is not running"
        await asyncio.wait([self._stopped], timeout=timeout)

    async def sleep(self, delay: float) -> bool:
        """Sleep ``delay`` seconds; False (at once) when the fleet is stopping."""
        stop = self._stopped
        if stop is None or stop.done():
            return False
        if delay <= 0:
            await asyncio.sleep(0)
            return not stop.done()
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(delay, _wake, woken)
        self._sleeps.add(woken)
        try:
            await woken
        finally:
            timer.cancel()
            self._sleeps.discard(woken)
        return not stop.done()

    async def held(self, exchange: Awaitable[T]) -> T | None:
        """A held request's exchange; None when stopping cancelled it (the caller's own cancellation propagates)."""
        held = asyncio.ensure_future(exchange)
        self._held.add(held)
        try:
            return await held
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if held.cancelled() and self.requested and not (current and current.cancelling()):
                return None
            raise
        finally:
            self._held.discard(held)

    def stop(self) -> None:
        """Ask the fleet to stop; safe from any thread and from signal handlers."""
        self._requested.set()
        loop, stop = self._loop, self._stopped
        if loop is None or stop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self.wake_all()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self.wake_all)

    def wake_all(self) -> None:
        """Stopping now, on the fleet's loop: every sleep returns and every held request is cancelled."""
        self._requested.set()
        stop = self._stopped
        if stop is not None and not stop.done():
            stop.set_result(None)
        for woken in list(self._sleeps):
            _wake(woken)
        for held in list(self._held):
            held.cancel()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
