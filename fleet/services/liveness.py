"""Liveness judged against the fleet, not the clock alone (docs/controller.md#liveness-against-the-fleet).

A node is online while it heartbeated within 3 x heartbeatSeconds. But when the
server, its database or its web tier is down, no heartbeat is recorded and every
node's ``last_seen_at`` ages while its agent keeps running: right after such an
outage the clock alone would call the whole fleet offline.

So the server records whether it has been hearing the fleet (``FleetPulse``):
every web process notes, at most once a second, that it heard a heartbeat; a
silence of more than ``GAP_HEARTBEATS`` heartbeat intervals from the whole
fleet restarts ``listening_since`` at the next heartbeat heard. A verdict
"offline" is trusted only once the server has listened for a whole online
window since then; until then a node that looks offline is neither skipped nor
failed, only waited for.

What this cannot see: a web tier that is down *now* while the database and the
workers run. Nothing distinguishes that silence from every agent being down
until the first heartbeat after it; docs/operations.md says how to watch for it
(``fleet_heard_seconds_ago``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Case, F, Value, When
from django.utils import timezone

from fleet.models import FleetPulse
from fleet.services.nodes import ONLINE_HEARTBEATS, heartbeat_seconds, online_since

#: No heartbeat from the whole fleet for this many intervals: the server was not hearing.
GAP_HEARTBEATS = 1.5
#: A web process writes the pulse at most once per this many seconds: the hot path pays ~one UPDATE a second.
PULSE_EVERY = timedelta(seconds=1)

_last_written_at: datetime | None = None  # this process's last pulse attempt; a race only queries twice


def _online_window() -> timedelta:
    return timedelta(seconds=ONLINE_HEARTBEATS * heartbeat_seconds())


def pulse_heard(*, now: datetime) -> None:
    """A heartbeat (or join) was recorded at ``now``: note that the fleet is being heard (one UPDATE).

    Written only when the stored ``last_heard_at`` is at least ``PULSE_EVERY`` old, whoever wrote it; this
    process also sends no query within ``PULSE_EVERY`` of its own last attempt (at most one a second per
    process), so on this path the stored value may lag by up to twice ``PULSE_EVERY``, far inside the gap.
    The plain heartbeat applies the same rule inside its one SQL statement (``fleet/services/sessions.py``,
    the ``heard`` and ``first_heard`` CTEs); tests/fleet/test_heartbeat_paths.py runs both over the same
    states and fails when they differ.
    """
    global _last_written_at
    if _last_written_at is not None and timedelta(0) <= now - _last_written_at < PULSE_EVERY:
        return
    _last_written_at = now
    gap = now - timedelta(seconds=GAP_HEARTBEATS * heartbeat_seconds())
    heard = FleetPulse.objects.filter(pk=1, last_heard_at__lte=now - PULSE_EVERY).update(
        listening_since=Case(When(last_heard_at__lt=gap, then=Value(now)), default=F("listening_since")),
        last_heard_at=now,
    )
    if not heard and not FleetPulse.objects.filter(pk=1).exists():
        # The first heartbeat ever heard (else it was heard within PULSE_EVERY: nothing to write; the read
        # takes no lock, where an INSERT would wait for a pulse write in flight and take SQLite's write lock):
        # nothing says the server was deaf before it. Two processes may create it at the same moment: the
        # other one's row stands for this heartbeat too.
        FleetPulse.objects.bulk_create(
            [FleetPulse(pk=1, last_heard_at=now, listening_since=online_since(now=now))], ignore_conflicts=True
        )


def offline_verdicts_trusted(*, now: datetime | None = None) -> bool:
    """Whether "no heartbeat within 3 intervals" means the agent is down, not that the server was deaf.

    False during the first online window after a gap in what the server heard
    (its database or web tier was down): agents that kept running have not all
    been heard again yet.
    """
    now = now or timezone.now()
    listening_since = FleetPulse.objects.filter(pk=1).values_list("listening_since", flat=True).first()
    return listening_since is None or now - listening_since >= _online_window()
