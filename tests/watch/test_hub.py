"""The per-process hub in isolation: notifications wake exactly their nodes' held requests, remembered for a
moment; without NOTIFY (SQLite) every held request is woken each second; shutting down releases them all."""

from __future__ import annotations

import asyncio
import uuid

from fleet.watch.hub import POLL_SECONDS, WatchHub


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_notification_wakes_the_requests_held_for_its_nodes_only():
    async def main():
        hub = WatchHub(conninfo=None, channel="fleet_watch", reconnect_seconds=1)
        first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        since = asyncio.get_running_loop().time()
        waits = {node: hub.next_wake(node) for node in (first, second, third)}
        hub._deliver(f"{first.hex},{second.hex}")  # as the LISTEN connection hands a payload over
        await asyncio.sleep(0)
        assert waits[first].done()
        assert waits[second].done()
        assert not waits[third].done()
        # Remembered: a request that read its revision before the notification arrived is woken at once.
        assert hub.notified_since(first, since)
        assert not hub.notified_since(third, since)
        hub.forget(third, waits[third])
        assert hub.held_node_ids() == []

    run(main())


def test_without_notify_held_requests_read_again_every_second():
    async def main():
        hub = WatchHub(conninfo=None, channel="fleet_watch", reconnect_seconds=1)
        await hub.start()
        node = uuid.uuid4()
        loop = asyncio.get_running_loop()
        with hub.holding(node):
            assert hub.held_node_ids() == [node]
            started = loop.time()
            await asyncio.wait_for(hub.next_wake(node), timeout=5 * POLL_SECONDS)
            elapsed = loop.time() - started
        await hub.stop()
        return elapsed

    assert run(main()) <= 1.5 * POLL_SECONDS


def test_stopping_releases_every_held_request_and_holds_no_new_one():
    async def main():
        hub = WatchHub(conninfo=None, channel="fleet_watch", reconnect_seconds=1)
        node = uuid.uuid4()
        held = hub.next_wake(node)
        hub.release_all()
        await asyncio.sleep(0)
        assert held.done()
        assert hub.next_wake(uuid.uuid4()).done()  # held no longer: answered at once
        assert hub.notified_since(node, asyncio.get_running_loop().time() + 60)

    run(main())
