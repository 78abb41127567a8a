"""Watching agents: held session answers, what keeps a held node online, and the polling hold.

An agent may send ``wait`` (seconds) and ``seen`` (the ``specRevision`` it has) with its session request: the
answer is then held until the revision differs from ``seen`` or ``wait`` passes (docs/fleet.md#watch).

The production web tier holds them in async code (``fleet/watch/``): no database connection and no thread
while they wait, woken by PostgreSQL NOTIFY. What it needs from the database is here, synchronous, run on its
threads for a moment each: ``agent_heartbeat`` (sessions.py) at arrival, ``held_sessions_read`` for the held
requests a notification woke (one statement for all of them), and ``held_sessions_touch`` for the nodes it
holds. ``session_hold`` is the fallback of a synchronous server (``manage.py runserver``, a WSGI gunicorn): it
polls, and holds its thread and connection meanwhile.

Liveness: a node is online while it heartbeated within 3 x heartbeatSeconds, and a node whose request is held
must stay online however long ``wait`` is. The arrival counts as a heartbeat (the same coalesced write), and
every process touches the nodes it holds every half interval (``held_sessions_touch``: one UPDATE for all of
them, written only where ``last_seen_at`` is about half an interval old). So ``last_seen_at`` lags by at most about
one interval while a request is held, and when the hold ends (an answer, or the agent hanging up) nothing more
needs writing: the node is online while held, and offline within one interval of a polling agent's time once
it stops asking.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from django.utils import timezone

from core.statements import NamedRows, prepared_cursor
from fleet.models import Command, Node
from fleet.plugins import session_fields
from fleet.services.commands import commands_pending
from fleet.services.liveness import pulse_heard
from fleet.services.nodes import heartbeat_seconds
from fleet.services.session_statements import HELD_READ_SQL, HELD_TOUCH_SQL, HeldReadRow
from fleet.services.sessions import SessionReport

#: ``wait`` is whole seconds in this range; anything else is 400 invalid_input.
WAIT_MIN_SECONDS = 1
WAIT_MAX_SECONDS = 60
#: A ``seen`` longer than this cannot be a revision (they are 22 characters): 400 invalid_input.
SEEN_MAX_LENGTH = 64
#: The PostgreSQL channel the triggers NOTIFY node ids on (fleet/migrations/0005_watch_notify.py); a change to a
#: session that records its watcher goes to that web process's own channel instead, this name, ``_`` and the
#: process's hub's ident (0011). Channels are per database: two deployments (or test runs) on one server, each with
#: its database, never wake each other.
NOTIFY_CHANNEL = "fleet_watch"
#: How often the polling hold (synchronous servers, no NOTIFY) reads the revision again.
POLL_SECONDS = 0.5
#: ``HELD_READ_SQL``'s rows, read by column name.
_ROWS = NamedRows()


def held_touch_every() -> float:
    """Seconds between two touches of the held nodes: half an interval (at least 1 s)."""
    return max(1.0, heartbeat_seconds() / 2)


def touched_within() -> float:
    """Seconds: after a touch at ``now``, each held node's ``last_seen_at`` is within this of ``now``.

    Nine tenths of half an interval: a touch writes a little early, so that every round writes what the round
    before it wrote (they are half an interval apart, plus the touch's own time), and a node held since the
    last round is known to be fresh (fleet/watch/known.py counts on it)."""
    return heartbeat_seconds() / 2 * 0.9


def _touch_due(now: datetime) -> datetime:
    """A held node's ``last_seen_at`` at or before this is written (``touched_within``)."""
    return now - timedelta(seconds=touched_within())


def held_sessions_touch(
    *, node_ids: Iterable[UUID | str], now: datetime | None = None, watcher: str | None = None
) -> int:
    """The agents of these nodes are connected (their requests are held): count it as a heartbeat of each.

    One UPDATE for any number of nodes, coalesced (a session is written only when its ``last_seen_at`` is about
    half an interval old, ``touched_within``, or ahead of ``now``, or when it records another watcher than
    ``watcher``, the web process holding them: docs/fleet.md#watch); the fleet is being heard. Returns the sessions
    written. ``node_ids``: ids, or all of them as the watch channel names them (their hex digits: the web process's).
    """
    ids = list(node_ids)
    if not ids:
        return 0
    now = now or timezone.now()
    due = _touch_due(now)
    # The ids as one array parameter: as ``node_id__in``, each of a process's thousands was a placeholder that
    # Django and psycopg processed one by one, a fifth of an idle web tier's CPU (docs/benchmarks.md).
    with prepared_cursor() as cursor:
        cursor.execute(HELD_TOUCH_SQL, {"node_ids": ids, "now": now, "due": due, "watcher": watcher})
        touched: int = cursor.rowcount
    pulse_heard(now=now)
    return touched


@dataclass(frozen=True)
class HeldRead:
    """A held request's node as a wake reads it (``held_sessions_read``): what a heartbeat would answer, and the
    session the answer is for (all None: the node has no session)."""

    node_id: UUID
    report: SessionReport
    daemon_version: str | None
    protocol_version: int | None
    left_at: datetime | None
    last_seen_at: datetime | None

    def is_plain_heartbeat(self, daemon_version: str, protocol_version: int) -> bool:
        """Whether a heartbeat with these versions would be a plain one that writes nothing but ``last_seen_at``:
        the session is open on this daemon version, with this protocol version."""
        return (
            self.left_at is None
            and self.daemon_version == daemon_version
            and self.protocol_version == protocol_version
            and self.last_seen_at is not None
        )


def held_sessions_read(*, token_hashes: Sequence[str]) -> dict[str, HeldRead]:
    """The nodes of these agent token hashes, read again for the held requests a notification woke: one statement
    for all of them, writing nothing (their arrivals were counted; the keeper touches held nodes). An unknown
    token is absent from the result. The plug-ins' fields are read once for all."""
    if not token_hashes:
        return {}
    fields = session_fields()
    seconds = heartbeat_seconds()
    with prepared_cursor() as cursor:
        cursor.execute(HELD_READ_SQL, {"token_hashes": list(token_hashes), "pending": Command.State.PENDING})
        found = cursor.fetchall()
        description = cursor.description
        rows: list[HeldReadRow] = [_ROWS.read(HELD_READ_SQL, description, one, (HeldReadRow,))[0] for one in found]
    reads = {}
    for row in rows:
        report = SessionReport(
            spec=json.loads(row.spec),
            commands=json.loads(row.commands),
            heartbeat_seconds=seconds,
            joined=False,
            node_id=row.node_id,
            fields=fields,
            watched_by=row.watched_by,
        )
        reads[row.token_hash] = HeldRead(
            row.node_id, report, row.daemon_version, row.protocol_version, row.left_at, row.last_seen_at
        )
    return reads


def node_watch_report(*, node_id: UUID, now: datetime | None = None) -> SessionReport | None:
    """What a held request answers now: the node's spec and pending commands; its session touched. None: no node."""
    spec = Node.objects.filter(pk=node_id).values_list("spec", flat=True).first()
    if spec is None:
        return None
    held_sessions_touch(node_ids=[node_id], now=now)
    return SessionReport(
        spec=spec,
        commands=commands_pending(node_id=node_id),
        heartbeat_seconds=heartbeat_seconds(),
        joined=False,
        node_id=node_id,
    )


def session_hold(
    *,
    node_id: UUID,
    seen: str,
    wait: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> SessionReport | None:
    """The polling hold of a synchronous server: read every ``POLL_SECONDS`` until the revision is not
    ``seen`` or ``wait`` seconds have passed; the last read is the answer (each read touches the session)."""
    deadline = clock() + wait
    while True:
        sleep(max(0.0, min(POLL_SECONDS, deadline - clock())))
        report = node_watch_report(node_id=node_id)
        if report is None or report.spec_revision != seen or clock() >= deadline:
            return report
