"""The reads of woken held requests, gathered: one statement for all that ask while the previous one runs.

A rollout's tick starts hundreds of nodes in one commit, and each of their held requests, woken by its
notification, reads its node again before it answers. One statement each queued hundreds of statements on the
process's session threads at once, in front of the round's downloads, leaves and joins (docs/benchmarks.md).
Here the first woken request's read starts at once; the requests woken meanwhile wait for it to end and are
read together by the next statement (``fleet.services.watch.held_sessions_read``, at most ``MOST`` tokens each).
A read that fails fails each request it was for, as its own statement would have. Used from the event loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import Counter

from fleet.services.watch import HeldRead

#: The most tokens one statement reads (an array parameter; the rest go in the next).
MOST = 1000
STATEMENTS = Counter("fleet_watch_wake_reads", "Statements that read woken held requests again (each for several).")

Read = Callable[[Sequence[str]], Awaitable[dict[str, HeldRead]]]


class WakeReads:
    """``await reads.read(token_hash)``: the token's node as read by the next statement; None when unknown."""

    def __init__(self, read: Read) -> None:
        self._read = read
        self._asked: dict[str, list[asyncio.Future[HeldRead | None]]] = {}
        self._reading: asyncio.Task[None] | None = None

    async def read(self, token_hash: str) -> HeldRead | None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[HeldRead | None] = loop.create_future()
        self._asked.setdefault(token_hash, []).append(future)
        if self._reading is None:
            self._reading = loop.create_task(self._read_all())
        return await future

    async def _read_all(self) -> None:
        try:
            while self._asked:
                tokens = list(self._asked)[:MOST]
                waiting = {token: self._asked.pop(token) for token in tokens}
                STATEMENTS.inc()
                try:
                    reads = await self._read(tokens)
                except Exception as exc:  # each request answers as its own failed statement would (503)
                    for futures in waiting.values():
                        _settle(futures, error=exc)
                    continue
                except BaseException:  # cancelled (the loop is closing): no request may wait for a read forever
                    for futures in [*waiting.values(), *self._asked.values()]:
                        for future in futures:
                            future.cancel()
                    self._asked.clear()
                    raise
                for token, futures in waiting.items():
                    _settle(futures, result=reads.get(token))
        finally:
            self._reading = None


def _settle(
    futures: list[asyncio.Future[HeldRead | None]],
    *,
    result: HeldRead | None = None,
    error: Exception | None = None,
) -> None:
    for future in futures:
        if future.done():  # the request ended meanwhile (the agent hung up)
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
