"""The front's session threads (fleet/watch/threads.py): results, errors and hang-ups come back as they would from an
executor, and a call whose request went away does not cost the thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from fleet.watch.threads import SessionThreads


def test_results_errors_and_a_cancelled_wait():
    threads = SessionThreads(2, name="test-session")
    release = threading.Event()
    ran: list[str] = []

    def slow(*, tag: str) -> str:
        release.wait(timeout=10)
        ran.append(tag)
        return tag

    def failing() -> None:
        raise LookupError("no such node")

    async def main() -> None:
        assert await threads.run(lambda *, x: x * 2, x=21) == 42
        with pytest.raises(LookupError, match="no such node"):
            await threads.run(failing)
        waiting = asyncio.ensure_future(threads.run(slow, tag="hung up"))
        await asyncio.sleep(0.05)
        waiting.cancel()  # the client hung up while its statement ran
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # The call ran to its end anyway, and both threads still serve.
        assert await asyncio.gather(*(threads.run(slow, tag=str(n)) for n in range(4))) == ["0", "1", "2", "3"]
        for _ in range(500):  # the hung-up call ends on its thread, after its release
            if "hung up" in ran:
                break
            await asyncio.sleep(0.01)
        assert "hung up" in ran
        assert {thread.name for thread in threading.enumerate()} >= {"test-session_0", "test-session_1"}

    asyncio.run(main())


@pytest.mark.django_db(transaction=True)
def test_the_session_threads_commit_without_waiting_for_the_flush_and_nothing_else_does():
    """docs/operations.md#session-commits: the front's threads only; Django's other connections keep the default."""
    from django.db import connection

    from fleet.watch.threads import on_thread

    def synchronous_commit() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            return cursor.fetchone()[0]

    threads = SessionThreads(1, name="test-commit")

    async def on_a_session_thread() -> list[str]:
        try:
            return [await threads.run(on_thread, function=synchronous_commit, kwargs={}) for _ in range(2)]
        finally:
            await threads.run(lambda: connection.close())  # the thread's own connection: the test database can go

    assert asyncio.run(on_a_session_thread()) == ["off", "off"]
    assert synchronous_commit() == "on"
