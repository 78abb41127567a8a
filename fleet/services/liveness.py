"""Liveness judged against the fleet, not the clock alone (docs/controller.md#liveness-against-the-fleet).

A node is online while it heartbeated within 3 x heartbeatSeconds. But when the
server, its database or its web tier is down, no heartbeat is recorded and every
node's ``last_seen_at`` ages while its agent keeps running: right after such an
outage the clock alone would call the whole fleet offline.

So the server records whether it has been hearing the fleet (``FleetPulse``):
every web process notes, at most once a second, that it heard a heartbeat; a
silence of more than ``GAP_HEARTBEATS`` heartbeat intervals from the whole
fleet restarts ``listening_since`` at the next heartbeat heard. A verdict
"offline" is trusted only while the server is hearing the fleet (its last
heartbeat heard within the gap) and has listened for a whole online window
since ``listening_since``; otherwise a node that looks offline is neither
skipped nor failed, only waited for.

The first condition covers the moments after an outage and before the first
heartbeat heard: ``listening_since`` has not restarted yet, but the silence is
the server's. A running agent was heard at most one interval before the server
went deaf, so it looks offline once the silence passes 2 intervals: the gap
(1.5) is under that, the online window (3) is not.

The same rule holds while the web tier is down *now* and the database and the
workers run: nothing is skipped or failed for offline until the fleet is heard
again. What the server hears is not only its agents: every API request Django
answers writes the pulse too (fleet/api/heard.py), since a web tier that answers
is not deaf. So a fleet that is silent as a whole while its server answers
(every agent down, one node that never rejoins) is judged silent itself; only a
silence with no request answered at all is the server's. /metrics shows a
silence (``fleet_heard_seconds_ago``, docs/operations.md).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from core.statements import prepared_cursor
from fleet.models import FleetPulse
from fleet.services.nodes import ONLINE_HEARTBEATS, heartbeat_seconds, online_since

#: No heartbeat from the whole fleet for this many intervals: the server was not hearing.
GAP_HEARTBEATS = 1.5
#: A web process writes the pulse at most once per this many seconds: the hot path pays ~one UPDATE a second.
PULSE_EVERY = timedelta(seconds=1)

_last_written_at: datetime | None = None  # this process's last pulse attempt; a race only queries twice


def _online_window() -> timedelta:
    return timedelta(seconds=ONLINE_HEARTBEATS * heartbeat_seconds())


def _gap() -> timedelta:
    return timedelta(seconds=GAP_HEARTBEATS * heartbeat_seconds())


def pulse_ctes(source: str) -> str:
    """The pulse, as two CTEs of a statement that also records what was heard (the agent session's statements,
    fleet/services/session_statements.py) or alone (``pulse_heard``): written when ``source`` has a row.

    Written only when the stored ``last_heard_at`` is at least ``PULSE_EVERY`` old, whoever wrote it; a silence
    longer than the gap restarts ``listening_since``. The first heartbeat ever heard inserts the row (nothing
    says the server was deaf before it); a row another statement inserts meanwhile stands for this one too.
    Parameters: ``pulse_params``.
    """
    table = FleetPulse._meta.db_table
    return f"""heard AS (
    -- The fleet is being heard: at most one write a second, whoever heartbeats or joins.
    UPDATE {table} AS p SET
        listening_since = CASE WHEN p.last_heard_at < %(gap)s THEN %(now)s ELSE p.listening_since END,
        last_heard_at = %(now)s
    WHERE p.id = 1 AND p.last_heard_at <= %(pulse_due)s AND EXISTS (SELECT 1 FROM {source})
    RETURNING p.id
), first_heard AS (
    INSERT INTO {table} (id, last_heard_at, listening_since)
    SELECT 1, %(now)s, %(first_listening)s FROM {source}
    WHERE NOT EXISTS (SELECT 1 FROM {table} WHERE id = 1)
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)"""  # noqa: S608 - table names from the models, values bound


def pulse_params(*, now: datetime) -> dict[str, datetime]:
    """The values ``pulse_ctes`` reads, for a heartbeat heard at ``now``."""
    return {
        "now": now,
        "gap": now - _gap(),
        "pulse_due": now - PULSE_EVERY,
        "first_listening": online_since(now=now),
    }


_PULSE_SQL = f"WITH {pulse_ctes('(SELECT 1) AS heard_now')} SELECT 1"


def pulse_heard(*, now: datetime) -> None:
    """Agents were heard at ``now`` by a path whose own statement does not write the pulse: held requests whose
    nodes were touched (fleet/services/watch.py) or an arrival the async front answered from memory
    (fleet/watch/front.py); or the web tier answered an API request (fleet/api/heard.py): it can hear. The pulse
    alone, one statement. This process also sends none within ``PULSE_EVERY`` of its own last attempt (at most
    one a second per process), so on this path the stored value may lag by up to twice ``PULSE_EVERY``, inside
    the gap at any ``heartbeatSeconds`` of 2 or more."""
    global _last_written_at
    if _last_written_at is not None and timedelta(0) <= now - _last_written_at < PULSE_EVERY:
        return
    _last_written_at = now
    with prepared_cursor() as cursor:
        cursor.execute(_PULSE_SQL, pulse_params(now=now))


def offline_verdicts_trusted(*, now: datetime | None = None) -> bool:
    """Whether "no heartbeat within 3 intervals" means the agent is down, not that the server was deaf.

    False while the server hears nothing from the whole fleet for longer than the gap (its database or web
    tier is or was down, and no heartbeat has been heard since), and during the first online window after
    such a gap: agents that kept running have not all been heard again yet. True before any heartbeat was
    ever heard (no pulse row): there is no fleet to be deaf to.
    """
    now = now or timezone.now()
    pulse = FleetPulse.objects.filter(pk=1).values_list("last_heard_at", "listening_since").first()
    if pulse is None:
        return True
    last_heard_at, listening_since = pulse
    return now - last_heard_at <= _gap() and now - listening_since >= _online_window()
