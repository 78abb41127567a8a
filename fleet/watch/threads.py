"""The front's session threads: a statement's hop from the event loop to a thread and back, and nothing more.

``loop.run_in_executor`` does the same through a ``concurrent.futures.Future`` (a Condition and its lock per
call), a work item, the executor's thread accounting and an asyncio future chained to it: about a tenth of the
web tier's CPU at 10,000 watching agents, where every arrival, wake, join and leave takes the hop once
(docs/benchmarks.md). Here a call is one tuple on a queue, and its result comes back with one
``call_soon_threadsafe``. Each thread keeps its Django database connection across calls; the threads are
daemons that live as long as the process, as an executor's. ``on_thread`` is what the front runs on them around
each of its calls: its commit setting, and a connection the database dropped replaced once.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import close_old_connections, connection

from core.database import DATABASE_ERRORS
from core.statements import commit_without_flush_wait

T = TypeVar("T")

_Call = tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[..., Any], dict[str, Any]]


class SessionThreads:
    """``await threads.run(function, **kwargs)``: ``function(**kwargs)`` on one of ``count`` threads."""

    def __init__(self, count: int, *, name: str = "session") -> None:
        self._calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._serve, name=f"{name}_{n}", daemon=True) for n in range(count)]
        self._lock = threading.Lock()
        self._started = False

    async def run(self, function: Callable[..., T], /, **kwargs: Any) -> T:
        if not self._started:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((loop, future, function, kwargs))
        return await future

    def _start(self) -> None:
        with self._lock:
            if not self._started:
                for thread in self._threads:
                    thread.start()
                self._started = True

    def _serve(self) -> None:
        while True:
            loop, future, function, kwargs = self._calls.get()
            try:
                result, error = function(**kwargs), None
            except BaseException as exc:  # handed to the awaiting request, as run_in_executor would
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (the server stopped): nobody waits
                loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():  # the client hung up; the call ran anyway, as it would have on an executor
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def on_thread(*, function: Callable[..., T], kwargs: dict[str, Any]) -> T:
    """``function(**kwargs)`` on a session thread, whose Django connection persists across calls.

    Its commits do not wait for the WAL flush (core/statements.py ``commit_without_flush_wait``). No request
    signals run here. A connection the database dropped (it restarted since this thread last
    used it) is closed as Django's request cycle would close it, and the call runs once more on a new
    connection: the first heartbeat after a restart is answered, not refused with a 503. Running any
    function run here twice is harmless: a heartbeat and a touch write the time, a leave is idempotent, and
    a join whose first try committed is a heartbeat the second time. A database that is down fails the
    second try too (503, ``database_unavailable``).
    """
    try:
        commit_without_flush_wait()
        return function(**kwargs)
    except DATABASE_ERRORS:
        close_old_connections()
        if connection.connection is not None:  # still usable: the statement failed, not the connection
            raise
    commit_without_flush_wait()
    return function(**kwargs)
