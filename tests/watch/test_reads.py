"""Woken held requests read together (fleet/watch/reads.py): those that ask while a read runs share the next
statement; a failed read fails each of its requests; a request that went away is skipped."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from fleet.watch import reads as reads_module
from fleet.watch.reads import WakeReads


class Reader:
    """A stand-in for the statement: each call's tokens recorded, answered when released."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail = fail

    async def __call__(self, tokens: Sequence[str]) -> dict:
        self.calls.append(list(tokens))
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return {token: f"read {token}" for token in tokens if token != "unknown"}


def test_requests_woken_meanwhile_share_the_next_statement():
    async def main() -> None:
        reader = Reader()
        wake_reads = WakeReads(reader)
        first = asyncio.ensure_future(wake_reads.read("a"))
        await asyncio.sleep(0)  # its statement is under way
        others = [asyncio.ensure_future(wake_reads.read(token)) for token in ("b", "c", "unknown", "b")]
        await asyncio.sleep(0)
        reader.release.set()
        assert await first == "read a"
        assert await asyncio.gather(*others) == ["read b", "read c", None, "read b"]
        assert reader.calls == [["a"], ["b", "c", "unknown"]]  # two statements for five requests, b read once
        assert await wake_reads.read("d") == "read d"  # and the next wake starts a statement of its own
        assert reader.calls[-1] == ["d"]

    asyncio.run(main())


def test_at_most_MOST_tokens_a_statement(monkeypatch):
    monkeypatch.setattr(reads_module, "MOST", 2)

    async def main() -> None:
        reader = Reader()
        reader.release.set()
        wake_reads = WakeReads(reader)
        assert await asyncio.gather(*(wake_reads.read(token) for token in "abcde")) == [f"read {t}" for t in "abcde"]
        assert reader.calls == [["a", "b"], ["c", "d"], ["e"]]

    asyncio.run(main())


def test_a_failed_read_fails_each_of_its_requests_and_one_that_went_away_is_skipped():
    async def main() -> None:
        reader = Reader(fail=ConnectionError("the database went away"))
        wake_reads = WakeReads(reader)
        first = asyncio.ensure_future(wake_reads.read("a"))
        await asyncio.sleep(0)
        second, gone = asyncio.ensure_future(wake_reads.read("b")), asyncio.ensure_future(wake_reads.read("c"))
        await asyncio.sleep(0)
        gone.cancel()  # its agent hung up
        reader.release.set()
        for request in (first, second):
            with pytest.raises(ConnectionError, match="went away"):
                await request
        assert gone.cancelled()
        reader.fail = None
        assert await wake_reads.read("a") == "read a"  # the next wake reads again

    asyncio.run(main())


def test_a_read_cancelled_with_the_loop_leaves_no_request_waiting():
    async def main() -> None:
        reader = Reader()
        wake_reads = WakeReads(reader)
        first = asyncio.ensure_future(wake_reads.read("a"))
        await asyncio.sleep(0)
        queued = asyncio.ensure_future(wake_reads.read("b"))
        await asyncio.sleep(0)
        assert wake_reads._reading is not None
        wake_reads._reading.cancel()  # the server stopping
        results = await asyncio.gather(first, queued, return_exceptions=True)
        assert all(isinstance(result, asyncio.CancelledError) for result in results)
        reader.release.set()
        assert await wake_reads.read("c") == "read c"  # a later wake reads again

    asyncio.run(main())
