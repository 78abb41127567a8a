"""The per-process hub in isolation: notifications wake exactly their nodes' held requests, remembered for a
moment; listening again after a loss wakes them all; shutting down releases them all."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections import Counter
from types import SimpleNamespace

import psycopg
import pytest
import uvloop

from fleet.services.sessions import SessionReport
from fleet.watch import listen_conninfo
from fleet.watch.hub import PRUNE_AT, RECENT_SECONDS, WatchHub, node_key, notification
from fleet.watch.known import KNOWN_SECONDS, Known, KnownSessions


def run(coroutine):
    return asyncio.run(coroutine)


def test_a_notification_wakes_the_requests_held_for_its_nodes_only():
    async def main():
        hub = WatchHub(conninfo={"dbname": "unused"}, channel="fleet_watch", reconnect_seconds=1)
        first, second, third = uuid.uuid4().hex, uuid.uuid4().hex, uuid.uuid4().hex
        since = asyncio.get_running_loop().time()
        waits = {node: hub.next_wake(node) for node in (first, second, third)}
        hub._deliver(f"{first},{second}")  # as the LISTEN connection hands a payload over
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


def test_a_notification_names_its_nodes_as_they_arrive_and_a_payload_sent_by_hand_in_any_uuid_spelling():
    node, other = uuid.uuid4(), uuid.uuid4()
    # As fleet_watch_notify sends it: the transaction's mark (its id, 42, in hex), then the nodes' hex digits.
    assert notification(f"ffffffff00000{42:019x},{node.hex},{other.hex}") == ("42", [node.hex, other.hex])
    assert notification(f"{str(node).upper()},{{{other}}}") == (None, [node_key(node), node_key(other)])
    with pytest.raises(ValueError, match="badly formed"):
        notification(f"{node.hex},not-a-node")


def test_more_nodes_notified_at_once_than_the_floor_are_not_copied_at_every_message():
    """A storm (100,000 agents rejoining, a tick over a large fleet) notifies more nodes within RECENT_SECONDS than
    the hub forgets at: the notifications it remembers are gone over again after as many more, not at every message
    (which copied all of them each time); old ones are still forgotten."""

    async def main():
        hub = WatchHub(conninfo={"dbname": "unused"}, channel="fleet_watch", reconnect_seconds=1)
        storm = 3 * PRUNE_AT
        passes, remembered = 0, hub._notified
        for _ in range(storm):
            hub._deliver(uuid.uuid4().hex)
            if hub._notified is not remembered:
                passes, remembered = passes + 1, hub._notified
        assert len(hub._notified) == storm  # all recent: all kept
        assert passes <= 2
        # Later, all of them old: the next pass forgets them.
        old = asyncio.get_running_loop().time() - 2 * RECENT_SECONDS
        hub._notified = {node: (old, None, old) for node in hub._notified}
        later = hub._prune_at - len(hub._notified) + 1
        for _ in range(later):
            hub._deliver(uuid.uuid4().hex)
        assert len(hub._notified) == later  # the recent ones only

    run(main())


def test_stopping_releases_every_held_request_and_holds_no_new_one():
    async def main():
        hub = WatchHub(conninfo={"dbname": "unused"}, channel="fleet_watch", reconnect_seconds=1)
        node = uuid.uuid4().hex
        held = hub.next_wake(node)
        hub.release_all()
        await asyncio.sleep(0)
        assert held.done()
        assert hub.next_wake(uuid.uuid4().hex).done()  # held no longer: answered at once
        assert hub.notified_since(node, asyncio.get_running_loop().time() + 60)

    run(main())


def _known(hub: WatchHub | None, node: str, since: float, *, watched_by: str | None = None) -> Known:
    """A read of ``node`` that began at ``since``, whose session records ``watched_by`` (default: ``hub``) as its
    watcher."""
    report = SessionReport(
        spec={}, commands=[], heartbeat_seconds=60, joined=False, node_id=uuid.UUID(node), fields={},
        watched_by=hub.ident if watched_by is None and hub is not None else watched_by,
    )  # fmt: skip
    return Known(node, report, "1.0.0", 3, since, seen_floor=0.0)


def test_what_was_read_is_kept_only_while_listening_and_forgotten_at_a_notification_or_a_loss():
    async def main():
        hub = WatchHub(conninfo={"dbname": "unused"}, channel="fleet_watch", reconnect_seconds=1)
        loop = asyncio.get_running_loop()
        first, second = uuid.uuid4().hex, uuid.uuid4().hex
        hub.remember("a", _known(hub, first, loop.time()))
        assert hub.known.get("a") is None  # not listening: nothing may be answered from memory
        hub._set_listening(True)
        await asyncio.sleep(0.01)
        hub.remember("a", _known(hub, first, loop.time()))
        hub.remember("b", _known(hub, second, loop.time()))
        hub.known.touched([first], seen_floor=100.0)
        hub.remember("a", _known(hub, first, loop.time()))  # read again: the floor stays
        assert hub.known.get("a").seen_floor == 100.0
        # A read whose session records another process as its watcher is not kept, and what was kept of the node
        # is dropped: changes to it are told to that process alone (fleet/migrations/0011_session_watched_by.py).
        hub.remember("a", _known(hub, first, loop.time(), watched_by="another"))
        assert hub.known.get("a") is None
        hub.remember("a", _known(hub, first, loop.time()))
        hub.known.touched([first], seen_floor=100.0)
        hub._deliver(first)
        assert hub.known.get("a") is None
        assert hub.known.get("b") is not None
        # A read that began before a notification for its node is not kept.
        before = loop.time()
        hub._deliver(first)
        hub.remember("a", _known(hub, first, before))
        assert hub.known.get("a") is None
        # Another token of the same node replaces the old one's entry.
        hub.remember("c", _known(hub, second, loop.time()))
        assert hub.known.get("b") is None
        assert len(hub.known) == 1
        hub.known.forget_expired(loop.time() + KNOWN_SECONDS / 2 - 1)  # the keeper's use: none expired yet
        assert len(hub.known) == 1
        hub.known.forget_expired(loop.time() + KNOWN_SECONDS)  # every lifetime is at most KNOWN_SECONDS
        assert len(hub.known) == 0
        hub.remember("c", _known(hub, second, loop.time()))
        hub._set_listening(False)
        assert len(hub.known) == 0

    run(main())


def test_listening_again_touches_the_held_nodes_then_wakes_every_held_request():
    """A change committed while the hub did not listen was notified to nobody: once it listens again, every held
    request is woken to read its revision again, after the held nodes were touched (one UPDATE)."""

    async def main():
        hub = WatchHub(conninfo={"dbname": "unused"}, channel="fleet_watch", reconnect_seconds=1)
        first, second = uuid.uuid4().hex, uuid.uuid4().hex
        waits = [hub.next_wake(first), hub.next_wake(first), hub.next_wake(second)]
        touched_while_held: list[bool] = []

        async def touch():
            touched_while_held.append(not any(wait.done() for wait in waits))

        hub.before_resync = touch
        hub._set_listening(False)  # the subscription is lost: nothing wakes them
        await asyncio.sleep(0.01)
        assert not any(wait.done() for wait in waits)
        read_began = asyncio.get_running_loop().time()  # a request reading meanwhile, not waiting: no waiter
        assert not hub.relistened_since(read_began)
        await asyncio.sleep(0.001)
        hub._set_listening(True)
        await asyncio.sleep(0.01)
        assert hub.relistened_since(read_began)  # it reads again before it waits
        assert not hub.relistened_since(asyncio.get_running_loop().time())
        assert touched_while_held == [True]
        assert all(wait.done() for wait in waits)
        assert hub._waiters == {}

    run(main())


def test_listening_again_wakes_them_even_when_the_touch_fails():
    async def main():
        hub = WatchHub(conninfo={"dbname": "unused"}, channel="fleet_watch", reconnect_seconds=1)
        wait = hub.next_wake(uuid.uuid4().hex)

        async def touch():
            raise OSError("the database is down again")

        hub.before_resync = touch
        hub._set_listening(True)
        await asyncio.sleep(0.01)
        assert wait.done()

    run(main())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("event_loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize(
    ("ping_seconds", "within"),
    [
        pytest.param(30, 5, id="read by the hub's reader alone"),  # no ping within the test's wait
        pytest.param(0.005, 10, id="pinged every 5 ms meanwhile"),  # psycopg reads during each ping too
    ],
)
def test_every_notification_arrives_once(event_loop, ping_seconds, within):
    """The hub reads its connection with a reader of its own, and psycopg reads it during each ping: thousands of
    notifications, one at a time and three in a statement, each delivered once, on one unbroken subscription."""
    conninfo = listen_conninfo()
    channel = f"watch_test_{uuid.uuid4().hex[:8]}"
    sent = [uuid.uuid4() for _ in range(1500)]

    async def main():
        hub = WatchHub(
            conninfo=conninfo, channel=channel, reconnect_seconds=1, ping_seconds=ping_seconds, ping_timeout=30
        )
        delivered: list[str] = []
        deliver = hub._deliver
        hub._deliver = lambda payload: (delivered.append(payload), deliver(payload))  # type: ignore[method-assign]
        await hub.start(timeout=10)
        assert hub.listening
        listening_since = asyncio.get_running_loop().time()
        async with await psycopg.AsyncConnection.connect(**conninfo, autocommit=True) as sender:
            for start in range(0, len(sent), 3):
                batch = sent[start : start + 3]
                if start % 2:  # one statement, three notifications
                    await sender.execute(
                        "SELECT pg_notify(%(c)s, %(a)s), pg_notify(%(c)s, %(b)s), pg_notify(%(c)s, %(d)s)",
                        {"c": channel, "a": batch[0].hex, "b": batch[1].hex, "d": batch[2].hex},
                    )
                else:
                    for node in batch:
                        await sender.execute("SELECT pg_notify(%s, %s)", [channel, node.hex])
        deadline = asyncio.get_running_loop().time() + within
        while len(delivered) < len(sent) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        unbroken = hub.unbroken_since(listening_since)
        await hub.stop()
        return delivered, unbroken

    delivered, unbroken = uvloop.run(main()) if event_loop == "uvloop" else asyncio.run(main())
    assert sorted(delivered) == sorted(node.hex for node in sent)
    assert unbroken  # no notification came through a second subscription


class PingedConnection:
    """What ``WatchHub._read_and_ping`` uses of a connection, its pings answered by the test: a socket that never
    carries a notification, and ``execute`` returning a future the test resolves."""

    def __init__(self) -> None:
        self._ends = socket.socketpair()
        self.pgconn = SimpleNamespace(socket=self._ends[0].fileno(), consume_input=lambda: None, notifies=lambda: None)
        self.info = SimpleNamespace(encoding="utf-8")
        self.pings: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()

    def execute(self, sql: str) -> asyncio.Future[None]:
        ping = asyncio.get_running_loop().create_future()
        self.pings.put_nowait(ping)
        return ping

    def close(self) -> None:
        for end in self._ends:
            end.close()


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_a_cancellation_that_comes_as_a_ping_is_answered_is_not_lost(event_loop):
    """stop() cancels the subscription's task; when the ping it awaits is answered in the same turn of the event
    loop, the task still ends (Python 3.11's asyncio.wait_for returned the ping's result instead, losing the
    cancellation: stop() then waited forever)."""

    async def main() -> bool:
        hub = WatchHub(conninfo={}, channel="unused", reconnect_seconds=1, ping_seconds=0.001)
        connection = PingedConnection()
        task = asyncio.get_running_loop().create_task(hub._read_and_ping(connection))
        try:
            ping = await asyncio.wait_for(connection.pings.get(), 5)
            ping.set_result(None)  # answered ...
            task.cancel()  # ... as the hub is stopped, before the task runs again
            done, _ = await asyncio.wait({task}, timeout=2)
            return bool(done) and task.cancelled()
        finally:
            task.cancel()
            connection.close()

    assert uvloop.run(main()) if event_loop == "uvloop" else asyncio.run(main())


def test_reads_made_together_age_out_spread_over_half_their_bound():
    """A reconnect storm's reads are made within a moment: their lifetimes are drawn between half the bound and
    all of it, so they age out spread over that half, not all at once; each is dropped once its own has ended."""
    known, since = KnownSessions(), 1000.0
    for index in range(2000):
        known.remember(f"token-{index}", _known(None, uuid.uuid4().hex, since))
    ages = sorted(known.get(f"token-{index}").until - since for index in range(2000))
    assert ages[0] >= KNOWN_SECONDS / 2
    assert ages[-1] <= KNOWN_SECONDS
    # Spread over the half: every tenth of it holds some of them, and none holds more than a fifth.
    tenth = KNOWN_SECONDS / 20
    per_tenth = Counter(min(9, int((age - KNOWN_SECONDS / 2) // tenth)) for age in ages)
    assert sorted(per_tenth) == list(range(10))
    assert max(per_tenth.values()) < 2000 / 5
    middle = since + ages[1000]
    known.forget_expired(middle)
    assert len(known) == 2000 - sum(1 for age in ages if since + age <= middle)
