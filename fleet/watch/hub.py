"""One subscription per web process, fanned out in memory to the requests it holds (docs/architecture.md#watch).

PostgreSQL triggers NOTIFY the ids of the nodes whose spec or pending commands changed, after the commit
(fleet/migrations/0005_watch_notify.py). ``WatchHub`` keeps ONE connection per process that LISTENs on that
channel and wakes the requests held for those nodes; a request registers a future per wait, never a
subscription of its own. When the connection is lost (the server restarted, the backend was terminated) the
hub LISTENs again after ``reconnect_seconds``. A change committed meanwhile was notified to nobody: so once it
listens again the hub resyncs, waking every request it holds, and each reads its node's revision again (the
reads gathered into one statement, fleet/watch/reads.py; the process's held nodes touched first, in one
UPDATE, so that no read needs a heartbeat's write of its own) and answers if it changed. A lost subscription
costs a held request the time to LISTEN again, never its ``wait``, and never correctness, since every answer
is read from the database. A connection can
also be lost without an error (a peer gone behind a NAT or a failover, a backend that hangs): whenever it has
listened for ``ping_seconds`` the hub asks it ``SELECT 1``, and one that does not answer within as long is
dropped and replaced (libpq's TCP keepalives, set in fleet/watch/__init__.py, catch a dead peer too).

Notifications are read by a reader on the connection's socket that the event loop keeps for as long as the hub
listens, not by psycopg's ``notifies()``, which adds a reader, a future and a timer and removes them again for every
notification it waits for: 140 µs of a web process's CPU per notification against 72 µs (uvloop, ``python -m
benchmarks notify-read``), paid by every process for every join, leave and spec change of a fleet. What arrives
while psycopg runs a statement on the connection (LISTEN, the ping) it hands to the hub's notify handler: nothing
is lost.

The hub also keeps what the process last read for each watching agent (``known``, fleet/watch/known.py): a
notification for a node drops its read, a lost subscription all of them.

The hub listens on a second channel, its process's own (``own_channel``, named by its random ``ident``): a change
to a session that records this process as its watcher is notified there alone
(fleet/migrations/0011_session_watched_by.py), and the hub keeps a read only when it names this process
(``remember``).

What it keeps per node is keyed as the channel names the node (``NodeKey``: the id's 32 hex digits), so that a
notification's ids are used as they arrive: every process reads every notification of the shared channel, and
parsing each id into a ``UUID`` cost CPU per node (``make bench ARGS=notify-read`` times the delivery), and left
one more object per node for the collector to walk.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import secrets
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from uuid import UUID

import psycopg
import structlog
from prometheus_client import Counter as Counted
from prometheus_client import Gauge

from fleet.watch.known import Known, KnownSessions

log = structlog.get_logger(__name__)

HELD = Gauge("fleet_watch_held", "Agent session requests held now (waiting for a change).", multiprocess_mode="livesum")
LISTENING = Gauge(
    "fleet_watch_listening",
    "1 while every web process holds its subscription to spec changes (0: held requests answer at their wait).",
    multiprocess_mode="livemin",
)
NOTIFICATIONS = Counted(
    "fleet_watch_notifications",
    "Watch notifications this process read, on the shared channel and on its own (docs/fleet.md#watch).",
)
#: A notification is remembered this long: a request that read its revision just before it still sees it.
RECENT_SECONDS = 10.0
#: The nodes remembered as notified before the old ones are forgotten (at least; see ``_deliver``).
PRUNE_AT = 10_000
#: A node no notification was remembered for: (arrived, sender, another sender's before it).
NEVER: tuple[float, str | None, float] = (-math.inf, None, -math.inf)


#: How a notification's first item says it is the sending transaction's id, not a node's
#: (fleet/migrations/0010_watch_notify_transaction.py): a UUID of version 0, which no node id is.
TRANSACTION_MARK = "ffffffff00000"


#: A node as the watch channel names it (``fleet_watch_notify``): its id's 32 lower-case hex digits.
NodeKey = str
_NODE_KEY = re.compile(r"[0-9a-f]{32}")


def node_key(node_id: UUID) -> NodeKey:
    return node_id.hex


def notification(payload: str) -> tuple[str | None, list[NodeKey]]:
    """A watch notification's sending transaction (its id in decimal, as ``pg_current_xact_id`` writes it) and
    nodes; no transaction for a payload without one (sent by hand, its ids spelled any way ``UUID`` reads).
    ValueError: not such a payload."""
    items = payload.split(",")
    transaction = str(int(items.pop(0)[len(TRANSACTION_MARK) :], 16)) if items[0].startswith(TRANSACTION_MARK) else None
    if all(_NODE_KEY.fullmatch(item) for item in items):
        return transaction, items
    return transaction, [node_key(UUID(item)) for item in items]


class WatchHub:
    """Wakes held requests when their node changes. Use from one event loop (the web process's)."""

    def __init__(
        self,
        *,
        conninfo: dict[str, Any],
        channel: str,
        reconnect_seconds: float,
        ping_seconds: float = 30,
        ping_timeout: float | None = None,
    ) -> None:
        self.conninfo = conninfo
        self.channel = channel
        # This process as a session records its watcher (NodeSession.watched_by): a change to such a session is
        # notified on the process's own channel alone (fleet/migrations/0011_session_watched_by.py spells it so).
        self.ident = secrets.token_hex(8)
        self.own_channel = f"{channel}_{self.ident}"
        self.reconnect_seconds = reconnect_seconds
        self.ping_seconds = ping_seconds  # how often the connection is asked SELECT 1
        self.ping_timeout = ping_seconds if ping_timeout is None else ping_timeout  # how long its answer may take
        self.listening = False
        self._waiters: dict[NodeKey, set[asyncio.Future[None]]] = {}
        self._held: Counter[NodeKey] = Counter()
        # Per node: when its latest notification arrived, the transaction that sent it, and when the latest one that
        # another transaction sent before it arrived.
        self._notified: dict[NodeKey, tuple[float, str | None, float]] = {}
        self._prune_at = PRUNE_AT
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._ever_subscribed = False
        self._listening_since = math.inf  # the loop's time the live subscription began (inf: none)
        self.closing = False
        self.known = KnownSessions()
        # Run before the held requests are woken to read again once the hub listens again (the front's touch).
        self.before_resync: Callable[[], Awaitable[object]] | None = None
        self._resyncing: asyncio.Task[None] | None = None

    # -- running -------------------------------------------------------------------------

    async def start(self, *, timeout: float = 2.0) -> None:
        """Start the subscription once; until it has been live once, wait for it (at most ``timeout``), so that
        the first requests, which read their revision after this, cannot miss a later change. Afterwards this
        returns at once: while a lost subscription is restored, requests are held anyway (answered at wait)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen_forever(), name="watch-hub")
        if not self._ever_subscribed:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._subscribed.wait()

    async def stop(self) -> None:
        self.release_all()
        if self._resyncing is not None:
            self._resyncing.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _listen_forever(self) -> None:
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(**self.conninfo, autocommit=True) as conn:
                    conn.add_notify_handler(lambda notify: self._deliver(notify.payload))  # during a statement
                    await conn.execute(f'LISTEN "{self.channel}"; LISTEN "{self.own_channel}"')
                    self._set_listening(True)
                    log.info("fleet.watch.listening", channel=self.channel, own_channel=self.own_channel)
                    await self._read_and_ping(conn)
            except Exception as exc:  # whatever broke it (a peer that stopped answering: TimeoutError): LISTEN again
                log.warning("fleet.watch.subscription_lost", error=f"{type(exc).__name__}: {exc}"[:300])
            finally:
                self._set_listening(False)
            await asyncio.sleep(self.reconnect_seconds)

    async def _read_and_ping(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Deliver notifications as they arrive, and ``SELECT 1`` every ``ping_seconds``; raises what broke the
        connection (it never returns)."""
        loop = asyncio.get_running_loop()
        pgconn, socket, encoding = conn.pgconn, conn.pgconn.socket, conn.info.encoding
        broken: asyncio.Future[None] = loop.create_future()
        reading = False  # whether the reader is on the socket

        def stop_reading() -> None:
            # Once: libpq closes a broken connection's socket, and its number may be another connection's by now.
            nonlocal reading
            if reading:
                loop.remove_reader(socket)
                reading = False

        def readable() -> None:
            try:
                pgconn.consume_input()
                while (notify := pgconn.notifies()) is not None:
                    self._deliver(notify.extra.decode(encoding))
            except Exception as exc:  # the connection broke (or a bug here): the loop below raises it
                stop_reading()
                if not broken.done():
                    broken.set_exception(exc)

        while True:
            loop.add_reader(socket, readable)
            reading = True
            try:
                readable()  # what came in with the last statement's answer
                # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result of an awaitable that
                # completes as it is cancelled, losing the cancellation, and stop() then waited forever.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.ping_seconds):
                        await asyncio.shield(broken)
            finally:
                stop_reading()
            # psycopg reads the connection during the ping: what arrives meanwhile goes to the notify handler.
            async with asyncio.timeout(self.ping_timeout):
                await conn.execute("SELECT 1")

    def _set_listening(self, listening: bool) -> None:
        self.listening = listening
        self._listening_since = asyncio.get_running_loop().time() if listening else math.inf
        LISTENING.set(1 if listening else 0)
        if not listening:
            self.known.forget_all()  # what was read before may have changed unnotified
        if listening:
            self._ever_subscribed = True
            self._subscribed.set()
            if self._waiters:
                self._resyncing = asyncio.get_running_loop().create_task(self._resync(), name="watch-resync")
        else:
            self._subscribed.clear()

    async def _resync(self) -> None:
        """Listening again: every held request reads its revision again now (they were read before the
        subscription was lost, or while there was none: a change committed meanwhile was notified to nobody)."""
        if self.before_resync is not None:
            try:
                await self.before_resync()
            except Exception as exc:  # the reads run all the same; each writes its heartbeat if it must
                log.warning("fleet.watch.resync_touch_failed", error=f"{type(exc).__name__}: {exc}"[:300])
        held = len(self._waiters)
        for node_id in list(self._waiters):
            self._wake(node_id)
        log.info("fleet.watch.resynced", held=held)
        self._resyncing = None

    def _deliver(self, payload: str) -> None:
        NOTIFICATIONS.inc()
        now = asyncio.get_running_loop().time()
        try:
            transaction, node_ids = notification(payload)
        except ValueError:
            log.warning("fleet.watch.bad_payload", payload=payload[:100])
            return
        for node_id in node_ids:
            at, sender, before = self._notified.get(node_id, NEVER)
            self._notified[node_id] = (now, transaction, before if sender == transaction else at)
            self.known.forget_node(node_id, unless_written_by=transaction)
            self._wake(node_id)
        if len(self._notified) > self._prune_at:  # forget old notifications now and then, not per message
            self._notified = {n: last for n, last in self._notified.items() if now - last[0] < RECENT_SECONDS}
            # More than the floor notified within RECENT_SECONDS (a storm of joins, a tick over a large fleet):
            # the next pass waits for as many again, else every message would copy all of them.
            self._prune_at = max(PRUNE_AT, 2 * len(self._notified))

    def _wake(self, node_id: NodeKey) -> None:
        for future in self._waiters.pop(node_id, ()):
            if not future.done():
                future.set_result(None)

    def release_all(self) -> None:
        """Shutting down: every held request answers now, and new ones are answered at once."""
        self.closing = True
        self.known.forget_all()
        for node_id in list(self._waiters):
            self._wake(node_id)

    def release_on_exit_signals(self) -> None:
        """SIGTERM/SIGINT (the server stopping): held requests answer at once rather than hold the shutdown.

        Chained in front of the server's own handlers (installed before the application starts), in the main thread.
        """
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            if not callable(previous):
                continue

            def handler(number: int, frame: Any, previous: Callable[..., Any] = previous) -> None:
                loop.call_soon_threadsafe(self.release_all)
                previous(number, frame)

            with contextlib.suppress(ValueError):  # not the main thread: the server stops held requests at their wait
                signal.signal(signum, handler)

    # -- what a held request uses ----------------------------------------------------------

    @contextlib.contextmanager
    def holding(self, node_id: NodeKey) -> Iterator[None]:
        """The request for ``node_id`` is held for the duration (``held_node_ids``, the gauge)."""
        self._held[node_id] += 1
        HELD.inc()
        try:
            yield
        finally:
            HELD.dec()
            self._held[node_id] -= 1
            if self._held[node_id] <= 0:
                del self._held[node_id]

    def held_node_ids(self) -> list[NodeKey]:
        return list(self._held)

    def notified_since(self, node_id: NodeKey, since: float, *, besides: str | None = None) -> bool:
        """Whether a notification for ``node_id`` arrived at or after ``since`` (the loop's clock); ``besides``: one
        sent by another transaction than that one (a join's own notifications do not make what it read stale)."""
        if self.closing:
            return True
        at, sender, before = self._notified.get(node_id, NEVER)
        if besides is not None and sender == besides:
            return before >= since  # the latest came from that transaction: whether another's came since
        return at >= since

    def unbroken_since(self, moment: float) -> bool:
        """Whether every change committed since ``moment`` has been notified: the NOTIFY subscription has been
        live all along; or the process is stopping (answer now)."""
        return self.closing or self._listening_since <= moment

    def relistened_since(self, moment: float) -> bool:
        """Whether the hub listens again since ``moment`` (a read that began before may have missed a change that
        the resync's wake, which found no waiter for it then, was for)."""
        return self.listening and self._listening_since > moment

    def remember(self, token_hash: str, known: Known) -> None:
        """Keep a heartbeat's or a join's read, to hold the token's next arrival on (fleet/watch/known.py): only when
        the session records this process as its watcher, and the subscription has been live since before the read
        began and brought nothing for the node since (but the join's own notifications)."""
        recent = asyncio.get_running_loop().time() - known.since < RECENT_SECONDS / 2  # its notifications are kept
        changed = self.notified_since(known.node_id, known.since, besides=known.report.written_by)
        if known.report.watched_by != self.ident:
            # Another process is told of the session's changes now (or none is): what was kept of it may be stale.
            self.known.forget_node(known.node_id)
        elif recent and self.unbroken_since(known.since) and not changed:
            self.known.remember(token_hash, known)

    def next_wake(self, node_id: NodeKey) -> asyncio.Future[None]:
        """A future resolved by the next notification for ``node_id`` (or a resync's wake, or shutdown)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.closing:
            future.set_result(None)
        else:
            self._waiters.setdefault(node_id, set()).add(future)
        return future

    def forget(self, node_id: NodeKey, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(node_id)
        if waiters is not None:
            waiters.discard(future)
            if not waiters:
                del self._waiters[node_id]
